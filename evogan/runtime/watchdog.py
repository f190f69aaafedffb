"""Progress beats and the watchdog that restarts a worker which stopped making progress without dying.

Each worker writes ``logs/worker-<rank>.progress`` (JSON) whenever its loop changes phase: which phase,
and the wall-clock deadline by which it must beat again (what the phase may legitimately take, such as an
exchange's time-out, plus an allowance). A watchdog thread in every worker reads the files of the workers
on its own machine that belong to the same elastic round; one past its deadline is killed (SIGKILL), so the
elastic agent restarts the group and every cell resumes from its checkpoints. A thread cannot see its own
process frozen (SIGSTOP stops every thread), which is why the siblings watch each other; a worker whose
own main thread hangs (a deadlock, a device call that never returns) is caught by its own watchdog too.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

FLOOR_SECONDS = 60.0  # automatic allowance, at least
FIRST_GENERATION_SECONDS = 600.0  # automatic allowance before any phase has been measured
PHASE_FACTOR = 10.0  # automatic allowance: this many times the longest phase measured so far


def progress_path(run_dir: Path, rank: int) -> Path:
    return run_dir / "logs" / f"worker-{rank:04d}.progress"


class Progress:
    """The beats of one worker. ``fixed`` > 0 is the recipe's ``run.watchdog`` (seconds); 0 is automatic."""

    def __init__(self, path: Path, *, rank: int, round_id: str, fixed: float) -> None:
        self.path, self.rank, self.round_id, self.fixed = path, rank, round_id, fixed
        self.longest = 0.0
        self.phase = ""
        self.since = time.monotonic()

    def allowance(self) -> float:
        if self.fixed > 0:
            return self.fixed
        if self.longest == 0.0:
            return FIRST_GENERATION_SECONDS
        return max(FLOOR_SECONDS, PHASE_FACTOR * self.longest)

    def beat(self, phase: str, *, expected: float = 0.0, generation: int = -1) -> None:
        """Enter ``phase``; ``expected``: seconds it may take on top of the allowance (``inf``: unwatched)."""
        now = time.monotonic()
        if self.phase:
            self.longest = max(self.longest, now - self.since)
        self.phase, self.since = phase, now
        budget = expected + self.allowance()
        body = {
            "rank": self.rank,
            "round": self.round_id,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "ppid": os.getppid(),
            "phase": phase,
            "generation": generation,
            "time": time.time(),
            "deadline": time.time() + budget if math.isfinite(budget) else None,
        }
        tmp = self.path.with_name(self.path.name + ".tmp")
        with contextlib.suppress(OSError):  # a beat lost to a full disk is only a missed beat
            tmp.write_text(json.dumps(body))
            os.replace(tmp, self.path)


def overdue(run_dir: Path, round_id: str, now: float | None = None) -> list[dict[str, Any]]:
    """Beats of this machine's workers in ``round_id`` whose deadline has passed."""
    now = time.time() if now is None else now
    host, late = socket.gethostname(), []
    for path in (run_dir / "logs").glob("worker-*.progress"):
        try:
            body = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # being replaced right now, or not ours
        if not isinstance(body, dict) or body.get("round") != round_id or body.get("host") != host:
            continue
        deadline = body.get("deadline")
        if isinstance(deadline, int | float) and now > deadline:
            late.append(body)
    return late


def start_watchdog(
    run_dir: Path, round_id: str, *, log: Callable[[str], None], interval: float = 1.0
) -> threading.Thread:
    """Watch this machine's workers of ``round_id``; SIGKILL a sibling (our agent's child) or exit ourselves
    when past its deadline. Returns the daemon thread."""
    me, parent = os.getpid(), os.getppid()
    handled: set[int] = set()

    def kill(body: dict[str, Any]) -> None:
        if body["pid"] in handled:
            return
        handled.add(body["pid"])
        silent = time.time() - float(body["time"])
        log(
            f"watchdog: worker {body['rank']} (pid {body['pid']}) made no progress for {silent:.0f} s in "
            f"phase {body['phase']} (generation {body['generation']}); killing it so the agent restarts the group"
        )
        if body["pid"] == me:
            os._exit(70)  # our own main thread is stuck; the agent restarts us
        if body.get("ppid") == parent:  # only a sibling started by our own agent
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(body["pid"]), signal.SIGKILL)

    def watch() -> None:
        while True:
            time.sleep(interval)
            for body in overdue(run_dir, round_id):
                kill(body)

    thread = threading.Thread(target=watch, name="evogan-watchdog", daemon=True)
    thread.start()
    return thread


__all__ = ["Progress", "overdue", "progress_path", "start_watchdog"]
