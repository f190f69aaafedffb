"""Preparing a run (recipe, run directory, plugin manager) and running every cell in this process."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pluggy

from evogan import recipe as recipes
from evogan.api import Transport
from evogan.engine.run import Driver, build_settings, build_topology, pick_device, set_threads
from evogan.engine.rundir import RunDirectory
from evogan.errors import UserError
from evogan.plugins import make_plugin_manager
from evogan.registry import Registries
from evogan.runtime.placement import workers_for


@dataclass
class PreparedRun:
    recipe: recipes.Recipe
    run_dir: RunDirectory
    pm: pluggy.PluginManager
    registries: Registries
    resume: bool
    notes: tuple[str, ...] = ()


def prepare(
    recipe_path: Path | None,
    *,
    resume_dir: Path | None = None,
    overrides: Iterable[str] = (),
    pm: pluggy.PluginManager | None = None,
    run_dir_path: Path | None = None,
    cap_workers: bool = False,
    nodes: int = 1,
) -> PreparedRun:
    """Validate the recipe and create (or reopen, for ``--resume``) the run directory; ``run_dir_path``
    names it instead of ``<name>-<timestamp>`` (every node of a multi-node run names the same one, and a
    second start of the same command resumes it).

    With ``cap_workers`` (the worker count is the recipe's, not the user's ``--workers``), more workers
    than ``nodes`` machines' share of the cells are cut to that share and ``notes`` says so.

    Nothing is written before the recipe validates.
    """
    pm = pm or make_plugin_manager()
    registries = Registries.from_plugin_manager(pm)
    notes: list[str] = []

    def load(path: Path) -> recipes.Recipe:
        recipe = recipes.load(path, registries, overrides)
        cells = build_topology(recipe).cells
        fitting = workers_for(recipe.run.workers, cells, nodes)
        if cap_workers and fitting != recipe.run.workers:
            on = f" on each of {nodes} nodes" if nodes > 1 else ""
            notes.append(
                f"note: run.workers = {recipe.run.workers} is more than the {cells} cell(s) allow{on}; "
                f"running {fitting} (at most one worker per cell)"
            )
            recipe = recipes.load(path, registries, [*overrides, f"run.workers={fitting}"])
        return recipe

    if run_dir_path is not None and resume_dir is None:
        if recipe_path is None:
            existing = RunDirectory.open_existing(run_dir_path)
            recipe = load(existing.recipe_path)
        else:
            recipe = load(recipe_path)
        run_dir = RunDirectory.named(run_dir_path)
        run_dir.write_recipe(recipe.to_toml())  # the workers read it; checkpoints guard against another recipe
        return PreparedRun(recipe, run_dir, pm, registries, resume=run_dir.has_checkpoints(), notes=tuple(notes))
    if resume_dir is not None:
        run_dir = RunDirectory.open_existing(resume_dir)
        if not run_dir.has_checkpoints():
            raise UserError(f"{resume_dir}: no checkpoints to resume from")
        recipe = load(run_dir.recipe_path)
        if overrides or notes:
            run_dir.write_recipe(recipe.to_toml())
        return PreparedRun(recipe, run_dir, pm, registries, resume=True, notes=tuple(notes))
    if recipe_path is None:
        raise UserError("a recipe file is needed (or --resume RUN_DIR)")
    recipe = load(recipe_path)
    run_dir = RunDirectory.create(recipe.run.output_dir, recipe.name)
    run_dir.write_recipe(recipe.to_toml())
    return PreparedRun(recipe, run_dir, pm, registries, resume=False, notes=tuple(notes))


def run_in_process(prepared: PreparedRun, *, stop: Callable[[], bool] = lambda: False) -> dict[str, Any]:
    """Every cell in this process, through the in-process transport: the reproducible reference mode."""
    recipe = prepared.recipe
    set_threads(recipe.run.threads)
    device = pick_device(recipe.run.device)
    settings = build_settings(recipe, prepared.registries, prepared.run_dir, device)
    topology = build_topology(recipe)
    transport = recipes.transport_choice(recipe, prepared.registries, processes=1).create(Transport)
    driver = Driver(
        recipe,
        prepared.pm,
        settings,
        topology,
        prepared.run_dir,
        transport,
        range(topology.cells),
        device=device,
    )
    try:
        resume_at = prepared.run_dir.resume_points(range(topology.cells)) if prepared.resume else None
        return driver.run(resume_at=resume_at, stop=stop)
    finally:
        transport.close()


__all__ = ["PreparedRun", "prepare", "run_in_process"]
