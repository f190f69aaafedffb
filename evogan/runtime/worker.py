"""A worker process: its block of the grid's cells, one torch elastic round at a time.

Started by ``evogan run --workers N`` (through :mod:`evogan.runtime.launcher`) or by ``torchrun ... -m
evogan.worker RECIPE --run-dir DIR`` on each node; both run :func:`run_worker`. One round:

1. build a fresh plugin manager and validate the recipe (nothing arrives pickled from the launcher);
2. bind one publisher per local cell; ``init_process_group("gloo")``; all-gather fixed-size byte rows
   holding every cell's endpoint plus each rank's run id and recipe hash (no pickle); connect to the
   distinct neighbours and pass the transport's subscription barrier;
3. resume every local cell from its checkpoint when all have one (a restart), else start fresh;
4. run the shared :class:`~evogan.engine.run.Driver` loop; at the end gather each rank's scores as JSON
   bytes, rank 0 writes summary.json and the plots, the owner of the best cell draws it.

The gloo group stays open for that final exchange: a worker that closed its transport early would drop
messages its neighbours still wait for.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch

from evogan import recipe as recipes
from evogan.api import ConnectableTransport
from evogan.engine.run import (
    Driver,
    build_settings,
    build_topology,
    default_threads,
    pick_device,
    set_threads,
    write_summary,
)
from evogan.engine.rundir import RunDirectory, atomic_write, resume_points
from evogan.errors import EvoganError, RunFailure, UserError
from evogan.hookspecs import hookimpl
from evogan.plugins import make_plugin_manager
from evogan.registry import Registries
from evogan.runtime.watchdog import Progress, progress_path, start_watchdog

FAULT_ENV = "EVOGAN_FAULT"
RECIPE_ENV = "EVOGAN_RECIPE"  # the recipe as TOML text, set by `evogan run` for its own workers
STOP_FILE = "STOP"
ROW_BYTES = 512  # one endpoint (or run tag) per row of the exchange tensor


# ------------------------------------------------------------------------------------ placement
def cells_of(rank: int, world: int, cells: int) -> range:
    """Contiguous, row-major blocks: rank ``r`` serves cells ``[r*C//W, (r+1)*C//W)``.

    Blocks keep row neighbours in one process and differ in size by at most one cell.
    """
    if world > cells:
        raise UserError(f"{world} workers for {cells} cells: at most one worker per cell")
    return range(rank * cells // world, (rank + 1) * cells // world)


def owner_of(cell: int, world: int, cells: int) -> int:
    return next(r for r in range(world) if cell in cells_of(r, world, cells))


def check_devices(device: str, local_workers: int) -> None:
    """``cuda`` means one GPU per worker; ``auto`` shares GPUs round-robin by local rank."""
    if device != "cuda":
        return
    visible = torch.cuda.device_count()
    if visible == 0:
        raise UserError("run.device: cuda was asked for, but no CUDA device is visible")
    if local_workers > visible:
        raise UserError(
            f"run.device is cuda: {local_workers} workers on this machine need {local_workers} GPUs, "
            f'{visible} visible (use device = "auto" to share GPUs)'
        )


@dataclass(frozen=True)
class WorkerEnv:
    """What torch elastic tells a worker about itself."""

    rank: int
    world: int
    local_rank: int
    local_world: int
    restart: int
    run_id: str

    @classmethod
    def from_environ(cls) -> WorkerEnv:
        get = os.environ.get
        if "RANK" not in os.environ:
            raise UserError("evogan.worker runs under torchrun (or `evogan run --workers N`): RANK is not set")
        return cls(
            rank=int(get("RANK", "0")),
            world=int(get("WORLD_SIZE", "1")),
            local_rank=int(get("LOCAL_RANK", "0")),
            local_world=int(get("LOCAL_WORLD_SIZE", "1")),
            restart=int(get("TORCHELASTIC_RESTART_COUNT", "0")),
            run_id=get("TORCHELASTIC_RUN_ID", ""),
        )


# ------------------------------------------------------------------------------------ faults
@dataclass(frozen=True)
class Fault:
    """``EVOGAN_FAULT="cell:generation:kill|stop|freeze[:seconds]"``: the owner of ``cell`` SIGKILLs
    itself, SIGSTOPs itself for ``seconds``, or freezes (SIGSTOP, never continued) right after that cell's
    generation ends, in the first incarnation only. Generation 0 fires after the endpoint exchange,
    before the subscription barrier."""

    cell: int
    generation: int
    action: str
    seconds: float = 5.0

    @classmethod
    def parse(cls, text: str) -> Fault:
        parts = text.split(":")
        try:
            if len(parts) not in (3, 4) or parts[2] not in ("kill", "stop", "freeze"):
                raise ValueError
            return cls(int(parts[0]), int(parts[1]), parts[2], float(parts[3]) if len(parts) == 4 else 5.0)
        except ValueError:
            raise UserError(f"{FAULT_ENV}={text!r}: expected cell:generation:kill|stop|freeze[:seconds]") from None

    def fire(self) -> None:
        if self.action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if self.action == "freeze":
            os.kill(os.getpid(), signal.SIGSTOP)  # until the watchdog kills us
            return
        # A stopped process cannot wake itself: a helper sends SIGCONT.
        helper = subprocess.Popen(
            ["sh", "-c", f"sleep {self.seconds}; kill -CONT {os.getpid()}"], start_new_session=True
        )
        os.kill(os.getpid(), signal.SIGSTOP)
        helper.wait()


class FaultPlugin:
    def __init__(self, fault: Fault) -> None:
        self.fault = fault

    @hookimpl
    def evogan_generation_end(self, cell: int, generation: int) -> None:
        if (cell, generation) == (self.fault.cell, self.fault.generation):
            self.fault.fire()


# ------------------------------------------------------------------------------------ control plane
def _rows(texts: Sequence[str]) -> torch.Tensor:
    rows = torch.zeros(len(texts), ROW_BYTES, dtype=torch.uint8)
    for i, text in enumerate(texts):
        data = text.encode()
        if len(data) > ROW_BYTES:
            raise UserError(f"endpoint {text!r} is longer than {ROW_BYTES} bytes")
        if data:
            rows[i, : len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    return rows


def _text(row: torch.Tensor) -> str:
    data = bytes(row.tolist())
    return data.rstrip(b"\0").decode("utf-8", errors="replace")


def exchange_endpoints(endpoints: Mapping[int, str], tag: str, env: WorkerEnv, cells: int) -> dict[int, str]:
    """All-gather one row per cell (empty when not ours) plus one tag row; no pickle involved."""
    import torch.distributed as dist

    texts = [endpoints.get(c, "") for c in range(cells)] + [tag]
    mine = _rows(texts)
    gathered = [torch.empty_like(mine) for _ in range(env.world)]
    dist.all_gather(gathered, mine)
    result: dict[int, str] = {}
    for rank, rows in enumerate(gathered):
        theirs = _text(rows[cells])
        if theirs != tag:
            block = cells_of(rank, env.world, cells)
            raise RunFailure(
                f"rank {rank} (cells {block.start}-{block.stop - 1}) runs {theirs}, rank {env.rank} "
                f"runs {tag}: every node must use the same --run-dir name and recipe"
            )
        for cell in cells_of(rank, env.world, cells):
            result[cell] = _text(rows[cell])
    return result


def gather_json(value: Any, world: int) -> list[Any]:
    """All-gather a JSON document from every rank as padded UTF-8 bytes."""
    import torch.distributed as dist

    data = json.dumps(value, default=float).encode()
    size = torch.tensor([len(data)], dtype=torch.int64)
    sizes = [torch.empty_like(size) for _ in range(world)]
    dist.all_gather(sizes, size)
    longest = int(max(s.item() for s in sizes))
    mine = torch.zeros(longest, dtype=torch.uint8)
    if data:
        mine[: len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    out = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(out, mine)
    return [json.loads(bytes(t[: int(n.item())].tolist())) for t, n in zip(out, sizes, strict=True)]


def make_transport(recipe: recipes.Recipe, registries: Registries, world: int) -> ConnectableTransport:
    choice = recipes.transport_choice(recipe, registries, processes=max(2, world))
    transport = choice.component(choice.options)
    assert isinstance(transport, ConnectableTransport)  # transport_choice checked the class
    return transport


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
        best = min(cells, key=lambda c: cells[c]["mixture_score"])
        local = {cell.index: cell for cell in self.cells}
        if int(best) in local:
            self.pictures(local[int(best)], "final-best")
        if self.env.rank != 0:
            return {"cells": scores}
        return write_summary(
            self.run_dir,
            self.recipe,
            self.topology.describe(),
            cells,
            any(part["interrupted"] for part in parts),
            parts[0]["problem"],
        )


def _stopper(run_dir: RunDirectory, env: WorkerEnv, driver: Driver | None) -> Any:
    """Stop when the launcher's STOP file (for this elastic run) names a generation every local cell
    has reached; ``abort`` exits at once (a second Ctrl-C: the launcher is killing the workers)."""
    path = run_dir.path / STOP_FILE

    def stop() -> bool:
        try:
            order = json.loads(path.read_text())
        except (OSError, ValueError):
            return False
        if not isinstance(order, dict) or order.get("run_id") != env.run_id:
            return False
        if order.get("abort"):
            os._exit(130)
        target = int(order.get("generation", 0))
        return driver is not None and all(cell.generation >= target for cell in driver.cells)

    return stop


def _redirect_output(path: Path) -> None:
    """Both file descriptors (C libraries write there too) to an append-mode log; the launcher's
    console shows the live view instead."""
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _watch_parent() -> None:
    """Never outlive the agent that started us (no orphans if the launcher is killed)."""
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, name="evogan-parent-watch", daemon=True).start()


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
    if os.environ.get("EVOGAN_LAUNCHER"):
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the launcher coordinates Ctrl-C (STOP file)
        _redirect_output(run_dir / "logs" / f"worker-{env.rank:04d}.out")
    print(
        f"worker rank {env.rank}/{env.world} restart {env.restart} pid {os.getpid()} started {time.ctime()}", flush=True
    )
    _watch_parent()
    _stopper(RunDirectory(run_dir), env, None)()  # a restart after the launcher aborted exits here
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
            ages = transport.liveness()
            return {
                "liveness": {
                    str(p): (round(ages[p], 3) if math.isfinite(ages[p]) else None)
                    for p in topology.neighbours(cell)
                    if p in ages
                }
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
        start_watchdog(directory.path, f"{env.run_id}/{env.restart}", log=_say)
        return driver.run(resume_at=resume_at, stop=_stopper(directory, env, driver))
    finally:
        transport.close()
        if dist.is_initialized():
            dist.destroy_process_group()


def agree_resume_points(directory: RunDirectory, mine: Sequence[int], world: int) -> dict[int, int] | None:
    """Every rank's valid checkpoint generations meet over gloo, so all cells of the run resume from one
    consistent generation (the newest every cell has), or all start afresh when any cell has none.
    Returns every cell's point (the run starts at the least advanced). A fresh start removes this
    rank's checkpoints: they belong to a timeline the run does not continue."""
    mine_available = {str(c): directory.valid_generations(c) for c in mine}
    available = {int(c): gens for part in gather_json(mine_available, world) for c, gens in part.items()}
    if all(available.values()):
        return resume_points(available)
    for cell in mine:
        directory.discard_checkpoints_after(cell, 0)
    directory.truncate_records({c: 0 for c in mine})
    return None


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def error_path(run_dir: Path, rank: int) -> Path:
    return run_dir / "logs" / f"worker-{rank:04d}.error"


def pid_path(run_dir: Path, rank: int) -> Path:
    return run_dir / "logs" / f"worker-{rank:04d}.pid"


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m evogan.worker [RECIPE] --run-dir DIR [--set K=V]... [--disable-plugin NAME]...``"""
    import argparse

    parser = argparse.ArgumentParser(prog="evogan.worker", description=main.__doc__)
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


__all__ = [
    "Fault",
    "WorkerDriver",
    "WorkerEnv",
    "cells_of",
    "check_devices",
    "exchange_endpoints",
    "main",
    "owner_of",
    "run_worker",
]
