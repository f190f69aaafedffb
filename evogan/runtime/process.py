"""A worker as a process: its files in the run directory, its output, its parent, and stopping."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from evogan.engine.run import Driver
from evogan.engine.rundir import RunDirectory
from evogan.runtime.environment import WorkerEnv

STOP_FILE = "STOP"


def stopper(run_dir: RunDirectory, env: WorkerEnv, driver: Driver | None) -> Callable[[], bool]:
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


def redirect_output(path: Path) -> None:
    """Both file descriptors (C libraries write there too) to an append-mode log; the launcher's
    console shows the live view instead."""
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def watch_parent() -> None:
    """Never outlive the agent that started us (no orphans if the launcher is killed)."""
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, name="evogan-parent-watch", daemon=True).start()


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def error_path(run_dir: Path, rank: int) -> Path:
    return run_dir / "logs" / f"worker-{rank:04d}.error"


def pid_path(run_dir: Path, rank: int) -> Path:
    return run_dir / "logs" / f"worker-{rank:04d}.pid"


__all__ = ["STOP_FILE", "error_path", "pid_path", "redirect_output", "say", "stopper", "watch_parent"]
