"""The commands beside ``run``: ``evaluate``, ``sample`` and ``export`` score, draw from and export a
finished (or stopped) run, loaded as :func:`evogan.load` loads it; ``keys generate`` writes the ZeroMQ
transport's CURVE certificates. torch is imported when a command runs, not when the CLI starts."""

from __future__ import annotations

import json
from pathlib import Path

import click

from evogan.cli_common import disable_option, handle_errors
from evogan.errors import UserError


@click.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option("--device", type=click.Choice(["cpu", "cuda", "auto"]), help="Override run.device.")
@disable_option
@handle_errors
def evaluate(run_dir: Path, as_json: bool, device: str | None, disable: tuple[str, ...]) -> None:
    """Score every cell's best generator and its mixture ensemble from RUN_DIR's checkpoints."""
    from rich.console import Console
    from rich.table import Table

    from evogan.trained import load

    trained = load(run_dir, device=device, disable=disable)
    scores = trained.scores()
    best = min(scores, key=lambda c: scores[c]["mixture_score"])
    result = {
        "run": str(run_dir),
        "best_cell": int(best),
        "cells": scores,
        **trained.problem.describe(),
    }
    if as_json:
        click.echo(json.dumps(result, indent=2, default=float))
        return
    keys = list(next(iter(scores.values()))["mixture"])
    table = Table(box=None, header_style="bold")
    for column in ["cell", "generation", *[f"G {k}" for k in keys], *[f"mixture {k}" for k in keys]]:
        table.add_column(column, justify="right")
    for cell, score in scores.items():
        style = "bold green" if cell == best else None
        table.add_row(
            cell,
            str(score["generation"]),
            *[f"{score['generator'][k]:.4g}" for k in keys],
            *[f"{score['mixture'][k]:.4g}" for k in keys],
            style=style,
        )
    console = Console()
    console.print(table)
    console.print(f"best mixture ensemble: cell {best}")


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
@click.option("--device", type=click.Choice(["cpu", "cuda", "auto"]), help="Override run.device.")
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
    disable: tuple[str, ...],
) -> None:
    """Write a grid (images) or scatter plot (2-D data) of samples from RUN_DIR's ensemble."""
    import torch

    from evogan.trained import load

    trained = load(run_dir, device=device, disable=disable)
    ensemble = trained.single(cell) if single else trained.mixture(cell)
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        trained.problem.save_pictures(
            ensemble.networks,
            ensemble.weights,
            output,
            generator=torch.Generator().manual_seed(seed),
            title=f"cell {ensemble.cell}",
            count=count,
        )
    except OSError as exc:
        raise UserError(f"{output}: cannot write: {exc.strerror}") from None
    click.echo(
        f"wrote {count} samples from cell {ensemble.cell}{' (best generator)' if single else ' (mixture)'} "
        f"to {output}"
    )


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


COMMANDS = [evaluate, sample, export, keys]
