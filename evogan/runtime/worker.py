"""A worker process: its block of the grid's cells, one torch elastic round at a time.

Started by ``evogan run --workers N`` (:mod:`evogan.runtime.launcher`) or ``torchrun ... -m evogan.start_worker``
(:mod:`evogan.start_worker`); both run :func:`run_worker`. Each round builds its own plugin manager and validates
the recipe (nothing arrives pickled), shares endpoints over gloo as fixed-size byte rows (no pickle), resumes its
cells when all have a checkpoint, then runs the shared :class:`~evogan.engine.run.Driver`. Rank 0 fires the per-run
hooks and writes summary.json. The gloo group stays open for the final gather: a worker that closed early would drop
messages neighbours still wait for.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import sys
import time
import tomllib
from collections.abc import Sequence
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

from evogan import recipe as recipes
from evogan.api import ConnectableTransport
from evogan.engine.run import (
    Driver,
    best_cell,
    build_settings,
    build_topology,
    default_threads,
    pick_device,
    set_threads,
    write_summary,
)
from evogan.engine.rundir import RunDirectory, atomic_write
from evogan.errors import EvoganError, RunFailure
from evogan.plugins import PluginFailure, make_plugin_manager, reporting_failures
from evogan.registry import Registries
from evogan.runtime.control import agree_resume_points, exchange_endpoints, gather_json
from evogan.runtime.environment import LAUNCHER_ENV, RECIPE_ENV, WorkerEnv
from evogan.runtime.faults import FAULT_ENV, Fault, FaultPlugin
from evogan.runtime.placement import cells_of, check_devices
from evogan.runtime.process import error_path, pid_path, redirect_output, say, stopper, watch_parent
from evogan.runtime.watchdog import Progress, progress_path, start_watchdog


def make_transport(recipe: recipes.Recipe, registries: Registries, world: int) -> ConnectableTransport:
    return recipes.transport_choice(recipe, registries, processes=max(2, world)).create(ConnectableTransport)


# ------------------------------------------------------------------------------------ the driver
class WorkerDriver(Driver):
    """The shared loop; at the end every rank's scores meet over gloo and rank 0 writes the summary."""

    def __init__(self, *args: Any, env: WorkerEnv, beats: Progress, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.env, self.beats = env, beats

    def progress(self, phase: str, *, expected: float = 0.0) -> None:
        # Finishing waits on the slowest rank over gloo and scores the final models: not watched.
        generation = min(cell.generation for cell in self.cells)
        self.beats.beat(phase, expected=math.inf if phase == "finishing" else expected, generation=generation)

    def finish(self, interrupted: bool) -> dict[str, Any]:
        scores = self.score()
        parts = gather_json(
            {"cells": scores, "interrupted": interrupted, "problem": self.settings.problem.describe()},
            self.env.world,
        )
        merged = {c: s for part in parts for c, s in part["cells"].items()}
        cells = {c: merged[c] for c in sorted(merged, key=int)}
        best = best_cell(cells)
        local = {cell.index: cell for cell in self.cells}
        if int(best) in local:
            self.pictures(local[int(best)], "final-best")
        if self.env.rank != 0:
            return {"cells": scores}
        return write_summary(
            self.run_dir,
            self.recipe,
            self.topology,
            cells,
            any(part["interrupted"] for part in parts),
            parts[0]["problem"],
            self.settings.problem.roles[0],
        )


def _plugin_warning(env: WorkerEnv, failure: PluginFailure, *, launched: bool) -> None:
    """A worker's line about a plugin that failed to load. Under ``evogan run`` it goes to the worker's
    own log (the launcher printed the warning once already); under torchrun, where every worker shares a
    terminal, only each node's local rank 0 prints it."""
    if launched or env.local_rank == 0:
        print(f"worker rank {env.rank}: warning: {failure.warning()}", file=sys.stderr, flush=True)


def _open_run_dir(
    run_dir: Path, recipe_path: Path | None, overrides: Sequence[str], registries: Registries
) -> tuple[RunDirectory, recipes.Recipe]:
    if recipe_path is None:
        directory = RunDirectory.open_existing(run_dir)
        text = os.environ.get(RECIPE_ENV)
        if text:  # this node's agent's recipe: with a shared run directory, another node's is not ours
            data = recipes.apply_overrides(tomllib.loads(text), overrides, str(directory.recipe_path))
            return directory, recipes.validate(data, registries, path=directory.recipe_path)
        return directory, recipes.load(directory.recipe_path, registries, overrides)
    recipe = recipes.load(recipe_path, registries, overrides)
    directory = RunDirectory.named(run_dir)
    if not directory.recipe_path.exists():  # every local worker writes the same bytes atomically
        directory.write_recipe(recipe.to_toml())
    return directory, recipe


def run_worker(
    run_dir: Path,
    *,
    recipe_path: Path | None = None,
    overrides: Sequence[str] = (),
    blocked: Sequence[str] = (),
) -> dict[str, Any]:
    import torch.distributed as dist

    env = WorkerEnv.from_environ()
    if os.environ.get(LAUNCHER_ENV):
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the launcher coordinates Ctrl-C (STOP file)
        redirect_output(run_dir / "logs" / f"worker-{env.rank:04d}.out")
    print(
        f"worker rank {env.rank}/{env.world} restart {env.restart} pid {os.getpid()} started {time.ctime()}", flush=True
    )
    watch_parent()
    stopper(RunDirectory(run_dir), env, None)()  # a restart after the launcher aborted exits here
    with reporting_failures(partial(_plugin_warning, env, launched=bool(os.environ.get(LAUNCHER_ENV)))):
        pm = make_plugin_manager(blocked=blocked)
        registries = Registries.from_plugin_manager(pm)
    directory, recipe = _open_run_dir(run_dir, recipe_path, overrides, registries)
    topology = build_topology(recipe)
    mine = list(cells_of(env.rank, env.world, topology.cells))
    threads = recipe.run.threads or default_threads(env.local_world)
    set_threads(threads)
    why = "run.threads" if recipe.run.threads else f"{default_threads(1)} cores / {env.local_world} local workers"
    print(f"worker rank {env.rank} cells {mine[0]}-{mine[-1]}: {threads} torch threads ({why})", flush=True)
    check_devices(recipe.run.device, env.local_world)
    device = pick_device(recipe.run.device, env.local_rank)
    print(f"worker rank {env.rank} local rank {env.local_rank}: device {device}", flush=True)
    fault = Fault.parse(os.environ[FAULT_ENV]) if os.environ.get(FAULT_ENV) and env.restart == 0 else None
    if fault is not None and fault.cell in mine and fault.generation > 0:
        pm.register(FaultPlugin(fault))
    transport = make_transport(recipe, registries, env.world)
    stages: dict[str, float] = {}  # seconds per start-up stage, for the log
    clock = time.monotonic()

    def lap(stage: str) -> None:
        nonlocal clock
        stages[stage], clock = time.monotonic() - clock, time.monotonic()

    settings = build_settings(recipe, registries, directory, device)
    lap("settings")
    timeout = max(600.0, 10 * recipe.exchange.timeout)
    pid_path(directory.path, env.rank).write_text(f"{os.getpid()}\n")
    try:
        endpoints = transport.bind(mine)
        cells_at: dict[str, list[int]] = {}
        for cell, endpoint in endpoints.items():
            cells_at.setdefault(endpoint, []).append(cell)
        where = "; ".join(f"cells {' '.join(map(str, cells))} at {e}" for e, cells in cells_at.items())
        print(f"worker rank {env.rank} publishes {where}", flush=True)  # what a firewall must let through
        tag = f"run {directory.run_id} recipe {recipe.digest}"
        try:
            dist.init_process_group("gloo", timeout=timedelta(seconds=timeout))
            everyone = exchange_endpoints(endpoints, tag, env, topology.cells)
        except (RuntimeError, ValueError) as exc:  # torch's DistError subclasses RuntimeError
            raise RunFailure(f"endpoint exchange failed: {str(exc).splitlines()[0]}") from None
        if fault is not None and fault.cell in mine and fault.generation == 0:
            fault.fire()
        peers = {c: topology.neighbours(c) for c in mine}
        subscribers = {c: [o for o in range(topology.cells) if c in topology.neighbours(o)] for c in mine}
        transport.connect(everyone, peers, subscribers)
        lap("endpoints")
        transport.wait_ready()
        lap("barrier")
        resume_at = agree_resume_points(directory, mine, env.world)
        lap("resume point")
        print(
            f"worker rank {env.rank} ready {time.ctime()}: "
            + ", ".join(f"{stage} {seconds:.2f} s" for stage, seconds in stages.items())
            + (f"; resuming at generations {sorted({resume_at[c] for c in mine})}" if resume_at else "; fresh start"),
            flush=True,
        )
        def annotate(cell: int) -> dict[str, Any]:
            ages, stats = transport.liveness(), transport.stats()
            return {
                "liveness": {
                    str(p): (round(ages[p], 3) if math.isfinite(ages[p]) else None)
                    for p in topology.neighbours(cell)
                    if p in ages
                },
                # this process's transport since it started: messages received, and dropped by reason
                "transport": {"received": stats.received_messages, "dropped": dict(stats.dropped)},
            }

        driver = WorkerDriver(
            recipe,
            pm,
            settings,
            topology,
            directory,
            transport,
            mine,
            device=device,
            workers=env.world,
            drives=env.rank == 0,
            annotate=annotate,
            env=env,
            beats=Progress(
                progress_path(directory.path, env.rank),
                rank=env.rank,
                round_id=f"{env.run_id}/{env.restart}",
                fixed=recipe.run.watchdog,
            ),
        )
        start_watchdog(directory.path, f"{env.run_id}/{env.restart}", log=say)
        return driver.run(resume_at=resume_at, stop=stopper(directory, env, driver))
    finally:
        transport.close()
        if dist.is_initialized():
            dist.destroy_process_group()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m evogan.start_worker [RECIPE] --run-dir DIR [--set K=V]... [--disable-plugin NAME]...``"""
    import argparse

    parser = argparse.ArgumentParser(prog="evogan.start_worker", description=main.__doc__)
    parser.add_argument("recipe", nargs="?", type=Path, help="recipe (default: DIR/recipe.toml)")
    parser.add_argument("--run-dir", required=True, type=Path, help="run directory (the same on every node)")
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--disable-plugin", dest="blocked", action="append", default=[], metavar="NAME")
    args = parser.parse_args(argv)
    try:
        run_worker(args.run_dir, recipe_path=args.recipe, overrides=args.sets, blocked=args.blocked)
    except EvoganError as error:
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        print(f"error: {error}", file=sys.stderr, flush=True)
        rank, line = int(os.environ.get("RANK", "0")), f"{error.exit_code} {message}\n"
        with contextlib.suppress(OSError):
            atomic_write(error_path(args.run_dir, rank), lambda f: f.write(line), binary=False)
        return error.exit_code
    return 0


__all__ = ["WorkerDriver", "main", "make_transport", "run_worker"]
