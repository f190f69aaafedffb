"""Turns: several cells' generations in one process, interleaved at their mid-generation exchanges.

When cells exchange inside a generation (``exchange.every_batches``), a cell at an exchange point needs
its neighbours' models from the same point, so cells in one process cannot run their generations one
after another. Each generation runs in its own thread, but strictly one at a time: a task runs until it
calls ``pause()`` (after publishing, before gathering) or ends, then the next task runs. Every round
therefore publishes before anyone gathers, and the order of all work is fixed, so the numbers do not
depend on thread scheduling: single-process runs stay reproducible and equal to lockstep workers.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

Pause = Callable[[], None]


class Aborted(BaseException):
    """Raised inside a paused task when another task failed: it unwinds without doing more work."""


class _Task:
    def __init__(self, body: Callable[[Pause], None]) -> None:
        self.body = body
        self.go = threading.Event()
        self.back = threading.Event()
        self.done = False
        self.abort = False
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._main, daemon=True)

    def _main(self) -> None:
        try:
            self._wait()
            self.body(self.pause)
        except Aborted:
            pass
        except BaseException as exc:  # handed to the driver thread, which re-raises it
            self.error = exc
        finally:
            self.done = True
            self.back.set()

    def _wait(self) -> None:
        self.go.wait()
        self.go.clear()
        if self.abort:
            raise Aborted

    def pause(self) -> None:
        self.back.set()
        self._wait()

    def resume(self) -> None:
        """Let the task run until it pauses or ends (the caller waits meanwhile)."""
        self.back.clear()
        if not self.thread.is_alive() and not self.done:
            self.thread.start()
        self.go.set()
        self.back.wait()


def run_in_turns(bodies: Sequence[Callable[[Pause], None]]) -> None:
    """Run ``bodies`` in rounds, in the given order, one at a time, until all have returned.

    A body's first error stops the others (each unwinds at its next pause) and is raised here.
    """
    tasks = [_Task(body) for body in bodies]
    running: _Task | None = None
    try:
        while pending := [task for task in tasks if not task.done]:
            for task in pending:
                running = task
                task.resume()
                running = None
                if task.error is not None:
                    raise task.error
    finally:
        # Paused tasks unwind now. One still running (an interrupt reached this thread while it ran)
        # is a daemon thread: the process is on its way out, and resume truncates its records.
        for task in tasks:
            if task is not running and not task.done and task.thread.is_alive():
                task.abort = True
                task.go.set()
                task.thread.join()


__all__ = ["Aborted", "Pause", "run_in_turns"]
