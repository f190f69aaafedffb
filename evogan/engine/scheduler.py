"""Turn-taking: one generation of each of a process's cells, through the exchanges that join them.

Each cell's generation is :func:`evogan.engine.generation.generation`, which pauses where cells meet. The
scheduler plays them in a fixed order, so a single process computes exactly what lockstep workers compute:

1. Every cell gathers the neighbours' models of the last generation, as its turn comes (or all first, when
   the problem plays every cell's fitness games as one batch: :meth:`Problem.prefetch_fitness`).
2. Looped cells then take turns: a cell runs until its next exchange point inside the generation and
   publishes there, then the next cell runs. Round after round, each waiting cell gathers what its
   neighbours published at that point and runs on, until every cell has finished its generation.
   Every round publishes before anyone gathers.
3. Vectorised cells (``run.vectorize``) run to their variation, which the problem varies as one batched
   computation (:meth:`Problem.vary_together`), and then each to its end.

A finished generation goes to the driver (``finished``), which publishes, records and checkpoints it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from evogan.api import Problem, Transport
from evogan.engine.cell import Cell
from evogan.engine.generation import ExchangePoint, Pause, Steps, Timings, VaryTogether, generation
from evogan.recipe import ExchangeSection

#: the driver's side: where the loop is (phase, expected seconds), a cell's accepted messages at the
#: start of its generation, and a finished generation with its timings and exchange seconds
Progress = Callable[..., None]
Gathered = Callable[[Cell, Mapping[int, Mapping[str, Any]]], None]
Finished = Callable[[Cell, Timings, float], None]


@dataclass
class _Turn:
    """A cell's generation while cells take turns; ``pause``: where it waits (None once finished)."""

    cell: Cell
    steps: Steps
    exchange_seconds: float
    prefetch_seconds: float
    pause: Pause | None = None


class Scheduler:
    """Steps a process's cells one generation at a time (:meth:`step`)."""

    def __init__(
        self,
        problem: Problem,
        transport: Transport,
        exchange: ExchangeSection,
        *,
        vectorize: bool,
        stacked_fitness: bool,
        progress: Progress,
        gathered: Gathered,
        finished: Finished,
    ) -> None:
        """:param vectorize: vary each group's jobs as one batched computation.
        :param stacked_fitness: vectorised cells score their games through :meth:`Problem.stacked_fitness`."""
        self.problem, self.transport, self.exchange = problem, transport, exchange
        self.vectorize, self.stacked_fitness = vectorize, stacked_fitness
        self.progress, self.gathered, self.finished = progress, gathered, finished
        # the problem plays all local cells' fitness games as one batch (Problem.prefetch_fitness)
        self.prefetch = type(problem).prefetch_fitness is not Problem.prefetch_fitness

    def step(self, cells: Sequence[Cell]) -> None:
        """One generation of each of ``cells``; cells at the same generation together, lowest first."""
        for at in sorted({cell.generation for cell in cells}):
            group = [cell for cell in cells if cell.generation == at]
            if self.vectorize:
                self.step_together(group)
            else:
                self.take_turns(group)

    # -------------------------------------------------------------------------------- looped cells
    def take_turns(self, group: Sequence[Cell]) -> None:
        """Cells run to their next exchange point one after another, round after round (steps 1 and 2)."""
        gathered, share = self._prefetch(group) if self.prefetch and len(group) > 1 else ([], 0.0)
        turns: list[_Turn] = []
        for i, cell in enumerate(group):  # first round: each cell gathers the last generation's models
            exchange_seconds = gathered[i] if gathered else self.gather(cell)  # as its turn comes
            turns.append(_Turn(cell, generation(cell), exchange_seconds, share))
            self._advance(turns[-1])
        while waiting := [turn for turn in turns if turn.pause is not None]:
            for turn in waiting:
                self._gather_inside(turn)
                self._advance(turn)

    def _advance(self, turn: _Turn) -> None:
        """Run ``turn``'s cell to its next exchange point and publish there, or to the generation's end."""
        try:
            turn.pause = turn.steps.send(None)
        except StopIteration as end:
            turn.pause = None
            self._finish(turn.cell, end.value, turn.exchange_seconds, turn.prefetch_seconds)
            return
        assert isinstance(turn.pause, ExchangePoint), "looped cells vary on their own"
        self.progress("exchange", expected=self.exchange.timeout)
        started = time.perf_counter()
        self.transport.publish(turn.cell.index, turn.cell.message(substep=turn.pause.batches))
        turn.exchange_seconds += time.perf_counter() - started

    def _gather_inside(self, turn: _Turn) -> None:
        """Load the neighbours' models stamped ``(last generation, batches done)`` into ``turn``'s cell."""
        cell, pause = turn.cell, turn.pause
        assert isinstance(pause, ExchangePoint)
        started = time.perf_counter()
        messages = self.transport.gather(
            cell.index,
            cell.neighbours,
            cell.generation - 1,
            max_staleness=self.exchange.max_staleness,
            timeout=self.exchange.timeout,
            substep=pause.batches,
        )
        cell.receive(messages, wanted=(cell.generation - 1, pause.batches))
        turn.exchange_seconds += time.perf_counter() - started
        self.progress("train")

    # -------------------------------------------------------------------------------- vectorised cells
    def step_together(self, group: Sequence[Cell]) -> None:
        """Each cell runs to its variation, the jobs vary as one batched computation, each cell runs to
        its end (step 3)."""
        together = self.prefetch and len(group) > 1
        exchanged, share = self._prefetch(group) if together else ([self.gather(c) for c in group], 0.0)
        steps = [generation(cell, together=True, stacked_fitness=self.stacked_fitness) for cell in group]
        pauses = [next(each) for each in steps]
        jobs = [pause.job for pause in pauses if isinstance(pause, VaryTogether)]
        started = time.perf_counter()
        self.problem.vary_together(jobs)
        training = (time.perf_counter() - started) / len(jobs)
        for cell, each, seconds in zip(group, steps, exchanged, strict=True):
            try:
                each.send(training)
            except StopIteration as end:
                self._finish(cell, end.value, seconds, share)
            else:
                raise RuntimeError("a generation varied together pauses once")

    # -------------------------------------------------------------------------------- exchanges
    def gather(self, cell: Cell) -> float:
        """Gather and adopt the neighbours' models for ``cell``'s next generation; the seconds it took."""
        self.progress("exchange", expected=self.exchange.timeout)
        started = time.perf_counter()
        cell.exchange.begin_generation()
        messages = self.transport.gather(
            cell.index,
            cell.neighbours,
            cell.generation,
            max_staleness=self.exchange.max_staleness,
            timeout=self.exchange.timeout,
        )
        accepted = cell.receive(messages, wanted=(cell.generation, 0))
        seconds = time.perf_counter() - started
        self.gathered(cell, accepted)
        self.progress("train")
        return seconds

    def _prefetch(self, group: Sequence[Cell]) -> tuple[list[float], float]:
        """Gather every cell's neighbours (the messages are those each would gather in its turn: the wanted
        generation's, which stay), then hand the problem the cells' fitness games in the order they will be
        played. The seconds each gather took, and each cell's share of the prefetch."""
        gathered = [self.gather(cell) for cell in group]
        started = time.perf_counter()
        self.problem.prefetch_fitness([cell.upcoming_fitness() for cell in group])
        return gathered, (time.perf_counter() - started) / max(1, len(group))

    def _finish(self, cell: Cell, timings: Timings, exchange_seconds: float, prefetch_seconds: float) -> None:
        timings["fitness"] += prefetch_seconds  # its share of the batched fitness (0 without one)
        self.finished(cell, timings, exchange_seconds)


__all__ = ["Finished", "Gathered", "Progress", "Scheduler"]
