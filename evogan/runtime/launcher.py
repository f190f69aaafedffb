"""``evogan run --workers N``: N worker processes on this machine under torch's elastic agent.

The agent (``elastic_launch``, c10d rendezvous on a free loopback port, ``max_restarts`` from the
recipe) runs in a background thread and starts ``python -m evogan.start_worker --run-dir DIR`` N times: the
same command torchrun starts on each node of a multi-machine run. The workers read the recipe from the
run directory and build their own plugins; nothing pickled crosses over.

This process stays the reporter: it tails ``metrics.jsonl`` and ``timings.jsonl`` and fires the
lifecycle hooks of the plugins that only live here (the terminal reporter), so the live view shows the
workers' progress; at the end it reads the summary rank 0 wrote. Ctrl-C writes a ``STOP`` file naming a
generation every worker stops at (after checkpointing); a second Ctrl-C kills the workers by pid.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import signal
import socket
import sys
import threading
import traceback
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from rich.console import Console

from evogan import recipe as recipes
from evogan.engine.run import RunInfo, build_settings, build_topology, pick_device
from evogan.engine.rundir import METRICS_FILE, SUMMARY_FILE, TIMINGS_FILE, RunDirectory, atomic_write
from evogan.errors import RunFailure, UserError
from evogan.plugins import BLOCK_ENV, make_plugin_manager
from evogan.runtime import AGENT_THREAD
from evogan.runtime.environment import LAUNCHER_ENV, RECIPE_ENV
from evogan.runtime.liveness import NodeWatch
from evogan.runtime.placement import cells_of, check_devices
from evogan.runtime.process import STOP_FILE, error_path, pid_path
from evogan.runtime.rendezvous import GLOO_IFNAME_ENV, Role, decide
from evogan.runtime.single import PreparedRun
from evogan.runtime.watchdog import progress_path
from evogan.transport.addresses import NODE_ADDRESS_ENV

PORT_ENV = "EVOGAN_RDZV_PORT"  # a fixed rendezvous port (default: a free one)
LIFECYCLE_HOOKS = ("evogan_run_start", "evogan_generation_end", "evogan_run_end")


# ------------------------------------------------------------------------------------ checks
def rendezvous_endpoint() -> str:
    """``127.0.0.1:PORT``: a free port, or ``$EVOGAN_RDZV_PORT`` after checking nobody holds it."""
    wanted = os.environ.get(PORT_ENV, "")
    if wanted and not wanted.isdigit():
        raise UserError(f"{PORT_ENV}={wanted!r}: expected a port number")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("127.0.0.1", int(wanted or 0)))
        except OSError as exc:
            raise UserError(
                f"rendezvous port 127.0.0.1:{wanted} is not free ({exc.strerror}); pick another with {PORT_ENV}"
            ) from None
        return f"127.0.0.1:{probe.getsockname()[1]}"


def check_launch(prepared: PreparedRun, world: int | None = None) -> int:
    """Everything that can be refused before a process starts; returns the cell count."""
    recipe = prepared.recipe
    cells = build_topology(recipe).cells
    cells_of(0, world or recipe.run.workers, cells)
    check_devices(recipe.run.device, recipe.run.workers)
    recipes.transport_choice(recipe, prepared.registries, processes=max(2, world or recipe.run.workers))
    # Data, network and metric problems (missing files, image sizes) are found here, not in N workers.
    build_settings(
        recipe, prepared.registries, None, torch.device("cpu"), precision_on=pick_device(recipe.run.device)
    )
    return cells


# ------------------------------------------------------------------------------------ tailing
class Tail:
    """New complete lines of metrics.jsonl joined with their timings lines, each (cell, generation)
    once. Follows the file across a resume's atomic rewrite (a new inode). Reads line by line and keeps
    only each cell's last reported generation: a long run's records never sit in the launcher's memory."""

    def __init__(self, run_dir: RunDirectory) -> None:
        self.run_dir = run_dir
        self.offsets: dict[str, tuple[int, int]] = {}  # name -> (inode, offset)
        self.timings: dict[tuple[int, int], dict[str, Any]] = {}
        self.pending: list[dict[str, Any]] = []
        self.reported: dict[int, int] = {}  # cell -> its last generation reported (a cell's lines come in order)
        self.highest = 0

    def skip_existing(self) -> None:
        for record in self._read(METRICS_FILE):
            self.reported[record["cell"]] = max(record["generation"], self.reported.get(record["cell"], 0))
        for _ in self._read(TIMINGS_FILE):
            pass

    def _new(self, record: dict[str, Any]) -> bool:
        return bool(record["generation"] > self.reported.get(record["cell"], 0))

    def _read(self, name: str) -> Iterator[dict[str, Any]]:
        """The records of the complete lines written since the last read (all of them after a rewrite)."""
        path = self.run_dir.path / name
        if not path.exists():  # created once, then only renamed over: never gone again
            return
        with open(path, "rb") as handle:
            inode = os.fstat(handle.fileno()).st_ino
            known, offset = self.offsets.get(name, (inode, 0))
            if known != inode or os.fstat(handle.fileno()).st_size < offset:
                offset = 0
            handle.seek(offset)
            for line in handle:
                if not line.endswith(b"\n"):
                    break  # a line still being written waits for the next poll
                offset += len(line)
                self.offsets[name] = (inode, offset)
                with contextlib.suppress(ValueError):
                    yield json.loads(line)
            self.offsets[name] = (inode, offset)

    def poll(self, final: bool = False) -> list[dict[str, Any]]:
        for timing in self._read(TIMINGS_FILE):
            if self._new(timing):
                self.timings[(timing["cell"], timing["generation"])] = timing
        self.pending += (record for record in self._read(METRICS_FILE) if self._new(record))
        ready, waiting = [], []
        for record in self.pending:
            key = (record["cell"], record["generation"])
            if key in self.timings or final:
                timing = {k: v for k, v in self.timings.pop(key, {}).items() if k not in ("cell", "generation")}
                if self._new(record):
                    self.reported[key[0]] = key[1]
                    self.highest = max(self.highest, key[1])
                    ready.append({**record, "timings": timing})
            else:
                waiting.append(record)
        self.pending = waiting
        return ready


# ------------------------------------------------------------------------------------ launching
@contextlib.contextmanager
def _stderr_to(path: Path | None) -> Iterator[None]:
    """File descriptor 2 into ``path`` while the agent runs: torch's C++ store and socket warnings (a
    client that waits for the head, a store that went away) would break the one-line failure."""
    if path is None:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(fd, 2)
    os.close(fd)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


@contextlib.contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _start_generation(run_dir: RunDirectory, cells: int) -> int:
    """Where a ``--resume`` continues; a cell without any valid checkpoint is refused here (exit 2)."""
    return min(run_dir.resume_points(range(cells)).values(), default=0)


def _worker_failure(run_dir: RunDirectory, workers: int, cells: int, cause: BaseException) -> Exception:
    """One line naming the failed worker(s) and their own error line, if they wrote one."""
    lines, codes = [], []
    for rank in range(workers):
        path = error_path(run_dir.path, rank)
        if path.exists():
            code, _, message = path.read_text(encoding="utf-8").strip().partition(" ")
            block = cells_of(rank, workers, cells)
            lines.append(f"worker {rank} (cells {block.start}-{block.stop - 1}): {message}")
            codes.append(int(code) if code.isdigit() else 1)
    if not lines:
        lines.append(_death_line(run_dir, workers, cells, cause))
    text = "; ".join(lines)
    return UserError(text) if codes and all(code == 2 for code in codes) else RunFailure(text)


def _save_report(run_dir: RunDirectory, error: BaseException) -> Path:
    """torch's whole account of a failure (traceback and message), for logs/; the console gets one line."""
    report = run_dir.path / "logs" / "launcher-error.txt"
    text = "".join(traceback.format_exception(error))
    with contextlib.suppress(OSError):
        atomic_write(report, lambda f: f.write(text), binary=False)
    return report


def _agent_failure(
    run_dir: RunDirectory, world: int, cells: int, error: BaseException, endpoint: str, hint: str
) -> Exception:
    """One line for whatever ended the elastic agent; torch's own report goes to logs/launcher-error.txt."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous.api import RendezvousError

    if isinstance(error, ChildFailedError):
        return _worker_failure(run_dir, world, cells, error)
    report = _save_report(run_dir, error)
    first = (str(error).strip().splitlines() or [""])[0][:200]
    if isinstance(error, RendezvousError):
        return RunFailure(
            f"rendezvous at {endpoint} failed ({type(error).__name__}: {first}): {hint} torch's report in {report}"
        )
    return RunFailure(f"the elastic agent failed ({type(error).__name__}: {first}); torch's report in {report}")


def _death_line(run_dir: RunDirectory, workers: int, cells: int, cause: BaseException) -> str:
    """Which worker died and how, from torch's ChildFailedError; its whole report goes to logs/."""
    report = _save_report(run_dir, cause)
    failures = dict(getattr(cause, "failures", None) or {})
    # The agent SIGTERMs the survivors of a death: the worker that died first is the one to name.
    dead = {r: f for r, f in failures.items() if f.exitcode != -signal.SIGTERM} or failures
    parts = []
    for rank, failure in sorted(dead.items()):
        block = cells_of(rank, workers, cells) if rank < workers else range(0)
        how = (
            f"killed by {signal.Signals(-failure.exitcode).name}"
            if failure.exitcode < 0 and -failure.exitcode in signal.valid_signals()
            else f"exit code {failure.exitcode}"
        )
        started = progress_path(run_dir.path, rank).exists()
        parts.append(
            f"worker {rank} (cells {block.start}-{block.stop - 1}) {how}"
            + ("" if started else " during start-up")
        )
    what = ", ".join(parts) or f"the worker group failed ({type(cause).__name__})"
    return (
        f"{what}, and run.max_restarts is exhausted; worker output in {run_dir.path / 'logs'}/worker-*.out, "
        f"torch's report in {report}"
    )


def _stopped(run_dir: RunDirectory, cells: int) -> str:
    """What a node that stops for a lost node leaves behind, and how to go on."""
    try:
        generation = _start_generation(run_dir, cells)
    except UserError:
        return "this node's workers are stopped; no generation has a checkpoint of every cell yet"
    return (
        f"this node's workers are stopped; every cell has a checkpoint of generation {generation}: start the "
        "same command on every node to resume"
    )


def _write_order(run_dir: RunDirectory, order: dict[str, Any]) -> None:
    text = json.dumps(order)
    atomic_write(run_dir.path / STOP_FILE, lambda f: f.write(text), binary=False)


def _kill_workers(run_dir: RunDirectory, world: int) -> None:
    """SIGKILL our own worker children, by the pids they wrote (checked to be our children: with several
    nodes on a shared run directory the other ranks' files name other machines' processes)."""
    for rank in range(world):
        try:
            pid = int(pid_path(run_dir.path, rank).read_text().strip())
            with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
                parent = int(handle.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if parent == os.getpid():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@dataclass(frozen=True)
class Nodes:
    """Several machines: every node runs ``evogan run RECIPE --run-dir DIR --nnodes N --rdzv-endpoint
    HOST:PORT`` with the same values; the agents meet at the endpoint (c10d, hosted by the node whose
    address it is) and the workers share the grid. One node (the default) picks a free loopback port."""

    count: int = 1
    endpoint: str = ""
    rdzv_id: str = ""
    join_timeout: float = 600.0
    host: bool | None = None  # --rdzv-host yes|no; None: host iff the endpoint's address is ours
    node_timeout: float = 45.0  # a node unheard this long ends the run (evogan.runtime.liveness)


def launch(
    prepared: PreparedRun,
    *,
    stop: Callable[[], bool] = lambda: False,
    console: Console | None = None,
    quiet: bool = False,
    blocked: Sequence[str] = (),
    poll: float = 0.2,
    nodes: Nodes = Nodes(),
) -> dict[str, Any]:
    """Run the workers to the end; return the summary (rank 0 wrote it). ``console``/``quiet`` are
    accepted for the CLI's call; the view itself is the plugin manager's reporter."""
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    recipe, run_dir, pm = prepared.recipe, prepared.run_dir, prepared.pm
    workers = recipe.run.workers  # on this node
    world = workers * nodes.count
    if nodes.count > 1:
        if not nodes.endpoint:
            raise UserError("--nnodes > 1 needs --rdzv-endpoint HOST:PORT (the same on every node)")
        endpoint, run_id = nodes.endpoint, nodes.rdzv_id or f"evogan-{run_dir.run_id}"
        role = decide(endpoint, nodes.host)
    else:
        endpoint, run_id = rendezvous_endpoint(), f"evogan-{uuid.uuid4().hex[:12]}"
        role = Role(endpoint, "127.0.0.1", int(endpoint.rsplit(":", 1)[1]), None, "one node", None, None)
    cells = check_launch(prepared, world)
    stale = (
        run_dir.path / STOP_FILE,
        run_dir.path / SUMMARY_FILE,
        *(error_path(run_dir.path, r) for r in range(world)),
    )
    for path in stale:
        path.unlink(missing_ok=True)
    (run_dir.path / "logs").mkdir(exist_ok=True)

    fresh = make_plugin_manager(blocked=blocked)  # what the workers load: their hooks fire there
    shared = [p for p in pm.get_plugins() if pm.get_name(p) in {fresh.get_name(q) for q in fresh.get_plugins()}]
    hooks = {name: pm.subset_hook_caller(name, remove_plugins=shared) for name in LIFECYCLE_HOOKS}
    topology = build_topology(recipe)
    info = RunInfo(
        recipe=recipe,
        run_dir=run_dir,
        topology=topology.describe(),
        cells=cells,
        local_cells=tuple(range(cells)),
        generations=recipe.run.generations,
        start_generation=_start_generation(run_dir, cells) if prepared.resume else 0,
        device=recipe.run.device,
        workers=world,
        layout=topology.layout(),
    )
    # shutdown_timeout is newer than torch 2.11 (seen on the GPU machine): older releases keep their 30 s
    newer: dict[str, Any] = {}
    if "shutdown_timeout" in {f.name for f in dataclasses.fields(LaunchConfig)}:
        newer["shutdown_timeout"] = 5
    config = LaunchConfig(
        min_nodes=nodes.count,
        max_nodes=nodes.count,
        nproc_per_node=workers,
        run_id=run_id,
        role="evogan",
        rdzv_backend="c10d",
        rdzv_endpoint=endpoint,
        rdzv_configs={
            "join_timeout": nodes.join_timeout if nodes.count > 1 else 60,
            # Store calls outlast the node watch, so a lost head ends in its line, not in torch's; else
            # torch's 60 s, or --join-timeout when shorter (how long a node waits for the head's store).
            "read_timeout": int(max(nodes.node_timeout + 15, min(nodes.join_timeout, 60))),
            **({} if role.hosts is None else {"is_host": role.hosts}),
        },
        local_addr=role.address,  # MASTER_ADDR when this node gets rank 0 (default: the hostname's)
        rdzv_timeout=120,
        max_restarts=recipe.run.max_restarts,
        monitor_interval=0.1,
        start_method="spawn",
        **newer,
        # Workers redirect their own output to logs/worker-<rank>.out (torch's redirect leaks file handles).
        logs_specs=DefaultLogsSpecs(log_dir=str(run_dir.path / "logs" / "elastic")),
    )
    args = ["-u", "-m", "evogan.start_worker", "--run-dir", str(run_dir.path)]
    for name in blocked:
        args += ["--disable-plugin", name]
    outcome: dict[str, BaseException | None] = {"error": None}

    def agent() -> None:
        try:
            elastic_launch(config, sys.executable)(*args)
        except BaseException as exc:  # reported by the main thread
            outcome["error"] = exc

    environment = {
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",  # restarts break without it (pytorch#135712)
        LAUNCHER_ENV: "1",
        RECIPE_ENV: recipe.to_toml(),
        BLOCK_ENV: ",".join(filter(None, [os.environ.get(BLOCK_ENV, ""), *blocked])),
    }
    if role.interface and not os.environ.get(GLOO_IFNAME_ENV):
        environment[GLOO_IFNAME_ENV] = role.interface  # gloo's default follows the hostname too
    if nodes.count > 1 and role.address and not os.environ.get(NODE_ADDRESS_ENV):
        environment[NODE_ADDRESS_ENV] = role.address  # advertised when exchange.options.bind is unset
    watch = None
    if nodes.count > 1:
        role.announce(run_dir.path / "logs" / "rendezvous.log", console if not quiet else None)
        try:
            watch = NodeWatch(
                role.host,
                role.port,
                run_id,
                role.address or f"{socket.gethostname()}-{os.getpid()}",
                nodes=nodes.count,
                limit=nodes.node_timeout,
                head=role.hosts,
                finished=(run_dir.path / SUMMARY_FILE).exists,
            )
        except OSError as exc:
            raise UserError(
                f"--rdzv-endpoint {endpoint}: this node hosts the rendezvous, but UDP port {role.port} (where the "
                f"nodes' beats arrive) is taken ({exc.strerror})"
            ) from None
    tail = Tail(run_dir)
    tail.skip_existing()
    hooks["evogan_run_start"](run=info)
    elastic_log = logging.getLogger("torch.distributed.elastic")
    level = elastic_log.level
    elastic_log.setLevel(logging.CRITICAL)  # the agent's chatter would break the live view; we report
    stop_sent = False
    try:
        agent_log = run_dir.path / "logs" / f"agent-{role.address or socket.gethostname()}.err"
        with _environment(environment), _stderr_to(agent_log if nodes.count > 1 else None):
            thread = threading.Thread(target=agent, name=AGENT_THREAD, daemon=True)
            thread.start()
            if watch is not None:
                watch.start()
            while thread.is_alive():
                lost = watch.lost() if watch is not None else None
                if lost:
                    _kill_workers(run_dir, world)
                    hooks["evogan_run_end"](run=info, summary={}, interrupted=True)
                    raise RunFailure(f"{lost}; {_stopped(run_dir, cells)}")
                thread.join(poll)
                for record in tail.poll():
                    hooks["evogan_generation_end"](
                        run=info, cell=record["cell"], generation=record["generation"], record=record
                    )
                if not stop_sent and stop():
                    order = {"run_id": run_id, "generation": min(tail.highest + 1, recipe.run.generations)}
                    _write_order(run_dir, order)
                    stop_sent = True
    except KeyboardInterrupt:
        _write_order(run_dir, {"run_id": run_id, "abort": True})
        _kill_workers(run_dir, world)
        hooks["evogan_run_end"](run=info, summary={}, interrupted=True)
        raise
    finally:
        elastic_log.setLevel(level)
        if watch is not None:
            watch.stop()
    for record in tail.poll(final=True):
        hooks["evogan_generation_end"](run=info, cell=record["cell"], generation=record["generation"], record=record)
    error = outcome["error"]
    if error is not None:
        hooks["evogan_run_end"](run=info, summary={}, interrupted=True)
        started = watch is not None and watch.armed
        raise _agent_failure(run_dir, world, cells, error, endpoint, role.failure_hint(nodes.count, started=started))
    (run_dir.path / STOP_FILE).unlink(missing_ok=True)
    try:
        summary = json.loads((run_dir.path / SUMMARY_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise RunFailure(f"{run_dir.path / SUMMARY_FILE}: the workers ended without a summary") from None
    hooks["evogan_run_end"](run=info, summary=summary, interrupted=bool(summary.get("interrupted")))
    return summary


__all__ = ["PORT_ENV", "Nodes", "Tail", "check_launch", "launch", "rendezvous_endpoint"]
