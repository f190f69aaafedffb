"""The commands beside ``run``: ``evaluate`` and ``sample`` score and draw from a finished (or stopped)
run; ``keys generate`` writes the ZeroMQ transport's CURVE certificates."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
import torch
from rich.console import Console
from rich.table import Table

from evogan.cli_common import disable_option, handle_errors, plugin_manager


def _load_run(run_dir_path: Path, disable: tuple[str, ...], device: str | None) -> tuple[Any, Any, list[Any]]:
    from evogan import recipe as recipes
    from evogan.engine.run import build_settings, build_topology, load_cells, pick_device
    from evogan.engine.rundir import RunDirectory
    from evogan.errors import UserError
    from evogan.registry import Registries

    run_dir = RunDirectory.open_existing(run_dir_path)
    if not run_dir.has_checkpoints():
        raise UserError(f"{run_dir_path}: no checkpoints to evaluate (the run stopped before its first)")
    registries = Registries.from_plugin_manager(plugin_manager(disable))
    recipe = recipes.load(run_dir.recipe_path, registries)
    settings = build_settings(recipe, registries, None, pick_device(device or recipe.run.device))
    cells = load_cells(run_dir, settings, build_topology(recipe))
    return recipe, settings, cells


@click.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option("--device", type=click.Choice(["cpu", "cuda", "auto"]), help="Override run.device.")
@disable_option
@handle_errors
def evaluate(run_dir: Path, as_json: bool, device: str | None, disable: tuple[str, ...]) -> None:
    """Score every cell's best generator and its mixture ensemble from RUN_DIR's checkpoints."""
    from evogan.engine.run import score_cells

    recipe, settings, cells = _load_run(run_dir, disable, device)
    scores = score_cells(cells, settings, recipe.run.seed)
    best = min(scores, key=lambda c: scores[c]["mixture_score"])
    result = {
        "run": str(run_dir),
        "best_cell": int(best),
        "cells": scores,
        **settings.problem.describe(),
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
    from evogan.engine.run import mixture_of, score_cells
    from evogan.errors import UserError

    recipe, settings, cells = _load_run(run_dir, disable, device)
    if cell is None:
        scores = score_cells(cells, settings, recipe.run.seed)
        cell = int(min(scores, key=lambda c: scores[c]["mixture_score"]))
    if not 0 <= cell < len(cells):
        raise UserError(f"--cell {cell}: the run has cells 0..{len(cells) - 1}")
    chosen = cells[cell]
    networks, weights = ([chosen.evaluated(chosen.best("generator"))], [1.0]) if single else mixture_of(chosen)
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        settings.problem.save_pictures(
            networks,
            weights,
            output,
            generator=torch.Generator().manual_seed(seed),
            title=f"cell {cell}",
            count=count,
        )
    except OSError as exc:
        raise UserError(f"{output}: cannot write: {exc.strerror}") from None
    click.echo(
        f"wrote {count} samples from cell {cell}{' (best generator)' if single else ' (mixture)'} to {output}"
    )


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


COMMANDS = [evaluate, sample, keys]
