"""The commands beside ``run``: ``evaluate``, ``sample`` and ``export`` score, draw from and export a
finished (or stopped) run, loaded as :func:`evogan.load` loads it; ``optimize`` tunes its mixture weights
after training; ``keys generate`` writes the ZeroMQ transport's CURVE certificates; ``sweep`` and ``compare``
live in :mod:`evogan.sweep` and :mod:`evogan.compare`. torch is imported when
a command runs, not when the CLI starts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from evogan.cli_common import disable_option, handle_errors
from evogan.errors import UserError
from evogan.recipe import POOLS
from evogan.trained import DEVICES

if TYPE_CHECKING:
    from evogan.trained import TrainedRun

device_option = click.option("--device", type=click.Choice(DEVICES), help="Override run.device.")
optimized_option = click.option(
    "--optimized",
    type=click.Choice(POOLS),
    help="Use the best ensemble `evogan optimize` chose from this pool (optimized-mixture.json).",
)

@click.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option(
    "--generation",
    type=click.IntRange(min=0),
    help="Score every cell's checkpoint of this generation (default: the newest every cell kept).",
)
@click.option(
    "--along",
    is_flag=True,
    help="Score every generation at which all cells kept a checkpoint, oldest first: one row each "
    "(the chosen mixture and the means over the cells, test stream). Keep more with run.keep_checkpoints.",
)
@device_option
@optimized_option
@disable_option
@handle_errors
def evaluate(
    run_dir: Path,
    as_json: bool,
    generation: int | None,
    along: bool,
    device: str | None,
    optimized: str | None,
    disable: tuple[str, ...],
) -> None:
    """Score every cell's best generator and its mixture ensemble from RUN_DIR's checkpoints on the test
    stream, choose the best mixture on the validation stream (shown beside it), and average the test
    scores over the cells; with --optimized, the optimised ensemble on both streams too; with --along,
    the same at every generation the checkpoints cover."""
    from evogan.trained import load

    if along and (generation is not None or optimized):
        raise UserError("--along scores every kept generation: it takes neither --generation nor --optimized")
    trained = load(run_dir, device=device, disable=disable, generation=generation)
    if along:
        _evaluate_along(trained, as_json)
    else:
        _evaluate_once(trained, as_json, optimized)


def _scored(trained: TrainedRun) -> dict[str, Any]:
    from evogan.engine.run import reported

    scores = trained.scores()
    alone = trained.problem.roles[0]
    return {"run": str(trained.path), **reported(scores, alone), "cells": scores, **trained.problem.describe()}


def _evaluate_along(trained: TrainedRun, as_json: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    from evogan.along import generator_steps

    generations = trained.generations
    console = Console(stderr=as_json)
    rows = []
    for generation in generations:
        console.print(f"scoring generation {generation} ({generations.index(generation) + 1}/{len(generations)})")
        result = _scored(trained.at(generation))
        steps = generator_steps(trained.problem, generation)
        row: dict[str, Any] = {"generation": generation, **({} if steps is None else {"steps": steps})}
        rows.append(row | {k: v for k, v in result.items() if k not in ("run", "cells")})
    if as_json:
        click.echo(json.dumps({"run": str(trained.path), "along": rows}, indent=2, default=float))
        return
    alone = trained.problem.roles[0]
    keys = list(rows[0]["chosen"]["test"]) if rows else []
    what = "mixture" if not rows or rows[0]["chosen"]["what"] == "mixture" else alone
    title = f"test stream; the best {what} is chosen on validation"
    table = Table(box=None, header_style="bold", title=title)
    columns = ["generation", "G steps", "best cell", *[f"{what} {k}" for k in keys]]
    for column in [*columns, *[f"mean {alone} {k}" for k in keys]]:
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(
            str(row["generation"]),
            str(row.get("steps", "-")),
            str(row["best_cell"]),
            *[f"{row['chosen']['test'][k]:.4g}" for k in keys],
            *[f"{row['mean_over_cells'][alone][k]:.4g}" for k in keys],
        )
    console.print(table)


def _evaluate_once(trained: TrainedRun, as_json: bool, optimized: str | None) -> None:
    from rich.console import Console
    from rich.table import Table

    from evogan.builtin.reporter import metrics_text, summary_lines
    from evogan.engine.ensemble import optimized_ensemble
    from evogan.rng import score_generator

    result = _scored(trained)
    scores = result["cells"]
    alone = trained.problem.roles[0]
    best = str(result["best_cell"])
    run_dir = trained.path
    if optimized:
        problem, seed = trained.problem, trained.recipe.run.seed
        networks, weights, chosen = optimized_ensemble(run_dir, optimized, trained.cells)
        on = {
            stream: problem.evaluate_on(networks, weights, stream=stream, generator=score_generator(seed, stream))
            for stream in ("validation", "test")
        }
        result["optimized"] = {
            "pool": optimized,
            "weights": chosen["after"]["weights"],
            "metrics": on["test"],
            "score": problem.objective(on["test"]),
            "validation": {"metrics": on["validation"], "score": problem.objective(on["validation"])},
        }
    if as_json:
        click.echo(json.dumps(result, indent=2, default=float))
        return
    mixture = result["chosen"]["what"] == "mixture"
    keys = list(result["chosen"]["test"])
    title = f"test stream; the best {'mixture' if mixture else alone} is chosen on validation"
    table = Table(box=None, header_style="bold", title=title)
    label = alone if len(trained.problem.keys()[0]) > 1 else trained.problem.keys()[0].upper()
    columns = ["cell", "generation", "val. score", *[f"{label} {k}" for k in keys]]
    columns += [f"mixture {k}" for k in keys] if mixture else []
    for column in columns:
        table.add_column(column, justify="right")
    for cell, score in scores.items():
        style = "bold green" if cell == best else None
        table.add_row(
            cell,
            str(score["generation"]),
            f"{score['validation']['score']:.4g}",
            *[f"{score[alone][k]:.4g}" for k in keys],
            *([f"{score['mixture'][k]:.4g}" for k in keys] if mixture else []),
            style=style,
        )
    console = Console()
    console.print(table)
    for line in summary_lines(result):
        console.print(line, highlight=False)
    if optimized:
        chosen_metrics = metrics_text(result["optimized"]["metrics"])
        validation = metrics_text(result["optimized"]["validation"]["metrics"])
        line = f"optimised {optimized} ensemble: test {chosen_metrics}; validation {validation}"
        console.print(line, highlight=False)


@click.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option(
    "--pool",
    type=click.Choice(POOLS),
    help="Each cell's neighbourhood mixture, or one ensemble of every cell's best generator "
    "(default: the recipe's mixture.optimize.pool).",
)
@click.option(
    "--generations",
    type=click.IntRange(min=1),
    help="ES generations (default: mixture.optimize.generations, or 10 when the recipe has 0).",
)
@click.option("--samples", type=click.IntRange(min=1), help="Samples per score (default: mixture.optimize.samples).")
@click.option("--sigma", type=click.FloatRange(min=0, min_open=True), help="Weight mutation sd (default: recipe's).")
@click.option(
    "--random-init/--trained-init",
    default=None,
    help="Start from random normalised weights or the trained ones (default: mixture.optimize.random_init).",
)
@click.option(
    "--seed",
    type=int,
    help="Seed of the ES and its validation noise (default: run.seed); the test stream is always run.seed's.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the record as JSON.")
@device_option
@disable_option
@handle_errors
def optimize(
    run_dir: Path,
    pool: str | None,
    generations: int | None,
    samples: int | None,
    sigma: float | None,
    random_init: bool | None,
    seed: int | None,
    as_json: bool,
    device: str | None,
    disable: tuple[str, ...],
) -> None:
    """Optimise the mixture weights of RUN_DIR's finished ensembles with a (1+1)-ES on the validation
    stream (Lipizzaner's optimize_mixture), report them on the test stream; write
    RUN_DIR/optimized-mixture.json, leave the checkpoints alone."""
    from rich.console import Console
    from rich.table import Table

    from evogan.engine.ensemble import optimise_run
    from evogan.trained import load

    trained = load(run_dir, device=device, disable=disable)
    trained.prepare_scoring()
    recipe = trained.recipe
    configured = recipe.mixture.optimize
    changes: dict[str, Any] = {"generations": generations or configured.generations or 10}
    for key, value in (("pool", pool), ("samples", samples), ("sigma", sigma), ("random_init", random_init)):
        if value is not None:
            changes[key] = value
    options = configured.model_copy(update=changes)
    entry = optimise_run(
        trained.run_dir,
        trained.problem,
        trained.cells,
        options,
        seed=recipe.run.seed if seed is None else seed,
        test_seed=recipe.run.seed,
    )
    if as_json:
        click.echo(json.dumps(entry, indent=2, default=float))
        return
    table = Table(box=None, header_style="bold", title="tuned and chosen on validation, reported on test")
    columns = ("ensemble", "members", "validation before", "validation after", "test before", "test after")
    for column in (*columns, "accepted", "weights after"):
        table.add_column(column, justify="right")
    for i, result in enumerate(entry["ensembles"]):
        label = "every cell" if result["centre"] is None else f"cell {result['centre']}"
        weights = " ".join(f"{w:.3f}" for w in result["after"]["weights"].values())
        table.add_row(
            label,
            " ".join(result["members"]),
            f"{result['before']['score']:.4g}",
            f"{result['after']['score']:.4g}",
            f"{result['before']['test']['score']:.4g}",
            f"{result['after']['test']['score']:.4g}",
            str(result["accepted"]),
            weights,
            style="bold green" if i == entry["best"] else None,
        )
    console = Console()
    console.print(table)
    console.print(f"wrote {run_dir / 'optimized-mixture.json'} ({options.pool}, {options.generations} generations)")


@click.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option(
    "-n", "count", type=click.IntRange(min=1), default=64, show_default=True, help="Samples to draw."
)
@click.option(
    "-o",
    "output",
    type=click.Path(path_type=Path),
    default=Path("samples.png"),
    show_default=True,
    help="PNG file to write.",
)
@click.option("--cell", type=int, help="Draw from this cell's mixture (default: the best-scoring cell).")
@click.option("--single", is_flag=True, help="Use the cell's best generator alone, not its mixture.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the noise.")
@device_option
@optimized_option
@disable_option
@handle_errors
def sample(
    run_dir: Path,
    count: int,
    output: Path,
    cell: int | None,
    single: bool,
    seed: int,
    device: str | None,
    optimized: str | None,
    disable: tuple[str, ...],
) -> None:
    """Write a grid (images) or scatter plot (2-D data) of samples from RUN_DIR's ensemble."""
    from evogan.engine.ensemble import optimized_ensemble
    from evogan.trained import load

    if optimized and (cell is not None or single):
        raise UserError("--optimized draws from the optimised ensemble: leave out --cell and --single")
    trained = load(run_dir, device=device, disable=disable)
    if optimized:
        networks, weights, chosen = optimized_ensemble(run_dir, optimized, trained.cells)
        label = "every cell" if chosen["centre"] is None else f"cell {chosen['centre']}"
        _save_pictures(trained.problem, networks, weights, output, seed, count, f"optimised, {label}")
        click.echo(f"wrote {count} samples from the optimised {optimized} ensemble ({label}) to {output}")
        return
    ensemble = trained.single(cell) if single else trained.mixture(cell)
    _save_pictures(trained.problem, ensemble.networks, ensemble.weights, output, seed, count, f"cell {ensemble.cell}")
    click.echo(
        f"wrote {count} samples from cell {ensemble.cell}{' (best generator)' if single else ' (mixture)'} "
        f"to {output}"
    )


def _save_pictures(
    problem: Any, networks: list[Any], weights: list[float], output: Path, seed: int, count: int, title: str
) -> None:
    import torch

    from evogan.api import Problem

    if type(problem).save_pictures is Problem.save_pictures:  # the default draws nothing
        raise UserError(f"problem {problem.name}: draws no pictures of its individuals (it has no save_pictures)")
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        problem.save_pictures(
            networks, weights, output, generator=torch.Generator().manual_seed(seed), title=title, count=count
        )
    except OSError as exc:
        raise UserError(f"{output}: cannot write: {exc.strerror}") from None


@click.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option(
    "-o",
    "output",
    type=click.Path(path_type=Path),
    default=Path("mixture.pt2"),
    show_default=True,
    help="File to write (a torch.export archive).",
)
@click.option("--cell", type=int, help="Export this cell's mixture (default: the best-scoring cell).")
@disable_option
@handle_errors
def export(run_dir: Path, output: Path, cell: int | None, disable: tuple[str, ...]) -> None:
    """Write RUN_DIR's mixture ensemble as a file that samples it with torch alone (no evogan):
    torch.export.load(FILE).module()(z, u); FILE's evogan.json says what z and u are."""
    from evogan.trained import load

    trained = load(run_dir, device="cpu", disable=disable)
    mixture = trained.mixture(cell)
    trained.export(output, mixture.cell)
    shares = ", ".join(f"cell {m}: {w:.3f}" for m, w in zip(mixture.members, mixture.weights, strict=True))
    click.echo(f"wrote cell {mixture.cell}'s mixture ({shares}) to {output}")


@click.group(name="keys")
def keys() -> None:
    """CURVE certificates for the ZeroMQ transport."""


@keys.command(name="generate")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--name",
    "names",
    multiple=True,
    default=("client",),
    show_default=True,
    help="client keypair to create (repeat for one per node)",
)
def generate(directory: Path, names: tuple[str, ...]) -> None:
    """Create DIRECTORY/public and DIRECTORY/private with the server keypair and client keypairs."""
    from evogan.transport.curve import generate_keys

    generate_keys(directory, names)
    click.echo(f"keys in {directory}: public/ is the allow-list, private/ holds secrets (keep it private)")


def _experiments() -> list[click.Command]:
    from evogan.compare import compare
    from evogan.sweep import sweep

    return [sweep, compare]


COMMANDS = [evaluate, sample, optimize, export, keys, *_experiments()]
