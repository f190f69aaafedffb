"""One generation of one cell, top to bottom: fitness, selection, variation (with its exchange points),
replacement, migration, mixture, record.

:func:`generation` is the whole of it. It is a generator because a process steps several cells, and two
moments of a generation belong to all of them rather than to one cell; there it pauses and hands control
to the scheduler (:mod:`evogan.engine.scheduler`), which takes the cells' turns:

- :class:`ExchangePoint`: the variation reached an exchange inside the generation
  (``exchange.every_batches``); the scheduler publishes this cell's models, lets the other cells train to
  the same point, gathers the neighbours' models into this cell and resumes it.
- :class:`VaryTogether`: vectorised cells (``run.vectorize``) do not vary their own job; the scheduler
  varies every cell's job as one batched computation and resumes each with its share of the seconds.

Everything else happens here, in this order; the cell (:mod:`evogan.engine.cell`) holds the state and
the mechanics (fitness games, replacement, the mixture's ES, the record) each phase calls.
"""

from __future__ import annotations

import time
from collections.abc import Generator, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from evogan.api import Opponents, Role, Selection, Variation
from evogan.engine import migration
from evogan.engine.divergence import restore, snapshot
from evogan.engine.migration import migrate
from evogan.individual import Individual
from evogan.recipe import Recipe
from evogan.rng import CellRandom


@dataclass(frozen=True)
class ExchangePoint:
    """The cell trained ``batches`` batches into its generation and waits for its neighbours' models;
    resume it with ``None``."""

    batches: int


@dataclass(frozen=True)
class VaryTogether:
    """The cell's variation ``job``, to be varied with other cells' jobs; resume the cell with the seconds
    its share took."""

    job: Variation


Pause = ExchangePoint | VaryTogether
Timings = dict[str, float]
#: what :func:`generation` is: it yields pauses, receives the variation's seconds after a
#: :class:`VaryTogether` (None after an :class:`ExchangePoint`), returns the per-phase timings
Steps = Generator[Pause, float | None, Timings]


def generation(cell: Cell, *, together: bool = False, stacked_fitness: bool = False) -> Steps:
    """Run ``cell``'s next generation and append its record to the cell's logbook.

    :param together: pause at the variation (:class:`VaryTogether`) instead of varying here.
    :param stacked_fitness: score the fitness games through :meth:`Problem.stacked_fitness` where the
        problem can (vectorised cells).
    """
    rnd = cell.start_generation(stacked_fitness=stacked_fitness)
    laps = _Laps()
    population = cell.settings.recipe.population
    first, second = cell.roles

    # 1. Fitness: the neighbourhood (own population and neighbours' copies) plays all-vs-all on one batch.
    pool, data = cell._fitness_inputs(rnd)
    cell.forget_outputs()  # the re-evaluations below reuse what this one computes on the same batch
    cell.evaluate(pool[first], pool[second], data, rnd)
    laps.lap("fitness")

    # 2. Selection: who varies (offspring, or the population itself) and whom each role faces.
    members, faced, incumbents = select(cell, pool, rnd)
    # what a member that diverges in training is restored from: with selection on the incumbents,
    # which training leaves alone; with selection off a copy, as training changes them in place
    before = incumbents or {role: snapshot(cell.population(role), cell.problem) for role in cell.roles}
    laps.lap("selection")

    # 3. Variation: the problem trains or mutates the members, pausing at the exchange points.
    job = variation_job(cell, members, faced, incumbents, pool, rnd)
    with cell.training(members):
        laps.timings["training"] = yield from vary(cell, job, together=together)
    laps.restart()
    restored = restore(
        cell.problem,
        cell.index,
        members,
        before,
        {peer: slots for peer, slots in cell.foreign.items() if peer in cell.neighbours},
        aligned=not population.selection,
        lr_factor=population.restore_lr,
    )
    cell.unrestored = None in restored
    if restored:  # with selection off the pool held the diverged individuals themselves
        pool = {role: cell.neighbourhood(role) for role in cell.roles}

    # 4. Replacement: offspring against incumbents on the same batch and opponents; without selection
    # the varied population is scored again.
    replaced = cell._replace(members, pool, data, rnd) if population.selection else {}
    if not population.selection:
        cell.evaluate(cell.population(first), pool[second], data, rnd, score=(first,))
        cell.evaluate(pool[first], cell.population(second), data, rnd, score=(second,))
    laps.lap("replacement")
    cell.forget_outputs()

    # 5. Migration (every ``population.migration_every`` generations) and 6. the mixture's ES step.
    extra: dict[str, Any] = {}
    every = population.migration_every
    if every:  # records and timings of runs without migration stay as they were
        extra["migrated_from"] = migrate(cell, pool, data, rnd) if cell.generation % every == 0 else None
        laps.lap("migration")
    mixture_metrics = cell._evolve_mixture(rnd)
    laps.lap("mixture")

    # 7. The record: metrics.jsonl, the log and evogan_generation_end get it (through the driver).
    cell._record(pool, replaced, mixture_metrics, {**extra, "diverged": len(restored), "restored_from": restored})
    return laps.timings


def select(
    cell: Cell, pool: Mapping[Role, list[Individual]], rnd: CellRandom
) -> tuple[dict[Role, list[Individual]], dict[Role, list[Individual]], dict[Role, Sequence[Individual]]]:
    """Who varies this generation, whom each role faces, and the incumbents offspring compete with.

    With ``population.selection`` the members are clones of those the selection picks from the
    neighbourhood; Lipizzaner's offspring train against the other role's offspring, and
    ``population.opponents = "neighbourhood"`` adds the neighbours' copies. Without it the population
    itself varies against the whole neighbourhood and there are no incumbents.
    """
    population = cell.settings.recipe.population
    roles = cell.roles
    if not population.selection:
        members = {role: cell.population(role) for role in roles}
        return members, {roles[0]: pool[roles[1]], roles[1]: pool[roles[0]]}, {}
    pick, clone = cell.settings.selection.select, cell.problem.make_optimizer
    members = {role: [ind.clone(clone) for ind in pick(pool[role], population.size, rng=rnd.numpy)] for role in roles}
    for individual in (*members[roles[0]], *members[roles[1]]):
        individual.origin = cell.index
    copies = {role: pool[role][len(cell.population(role)) :] for role in roles}
    extra = population.opponents == "neighbourhood"
    faced = {
        role: [*members[other], *(copies[other] if extra else ())]
        for role, other in zip(roles, roles[::-1], strict=True)
    }
    return members, faced, dict(cell.populations)


def variation_job(
    cell: Cell,
    members: Mapping[Role, list[Individual]],
    faced: Mapping[Role, list[Individual]],
    incumbents: Mapping[Role, Sequence[Individual]],
    pool: Mapping[Role, Sequence[Individual]],
    rnd: CellRandom,
) -> Variation:
    """What the problem's :meth:`~evogan.api.Problem.vary` gets: members, mates, opponents, streams."""
    settings = cell.settings
    progress = (cell.generation - 1) / max(1, settings.recipe.run.generations)
    opponents = {
        role: Opponents(
            own=members[other],
            neighbourhood=faced[role],
            weights=cell._cell_weights(faced[role]),
            progress=progress,
        )
        for role, other in zip(cell.roles, cell.roles[::-1], strict=True)
    }
    return Variation(
        cell_index=cell.index,
        generation=cell.generation,
        members=members,
        pool=pool,
        opponents=opponents,
        incumbents=incumbents,
        rnd=rnd,
        exchange_every=settings.recipe.exchange.every_batches,
        problem=cell.problem,
    )


def vary(cell: Cell, job: Variation, *, together: bool) -> Generator[Pause, float | None, float]:
    """The variation phase; its seconds (training only: the pauses are the scheduler's)."""
    if together:
        seconds = yield VaryTogether(job)
        assert seconds is not None, "a VaryTogether pause is resumed with the seconds its share took"
        return seconds
    training = 0.0
    started = time.perf_counter()
    steps: Iterator[int] = cell.varying(job)  # a problem whose vary is no generator varies right here
    while (batches := next(steps, None)) is not None:
        training += time.perf_counter() - started
        yield ExchangePoint(batches)
        started = time.perf_counter()
    return training + time.perf_counter() - started


def run_alone(steps: Steps) -> Timings:
    """Drive a generation to its end without a scheduler: no exchange inside it, nothing varied with others."""
    try:
        pause = next(steps)
        while True:
            if isinstance(pause, VaryTogether):
                raise RuntimeError("a generation varied together needs the scheduler")
            pause = steps.send(None)
    except StopIteration as end:
        return end.value


class _Laps:
    """Seconds per phase; time spent paused (in the scheduler) is nobody's phase."""

    def __init__(self) -> None:
        self.timings: Timings = {}
        self.clock = time.perf_counter()

    def lap(self, phase: str) -> None:
        now = time.perf_counter()
        self.timings[phase] = self.timings.get(phase, 0.0) + now - self.clock
        self.clock = now

    def restart(self) -> None:
        self.clock = time.perf_counter()


# ------------------------------------------------------------------------ what a generation asks of its cell
class _Settings(Protocol):
    @property
    def seed(self) -> int: ...
    @property
    def recipe(self) -> Recipe: ...
    @property
    def selection(self) -> Selection: ...


class Cell(migration.Cell, Protocol):
    """What a generation asks of its cell (:class:`evogan.engine.cell.Cell` has it; named here as a
    protocol because the cell runs its own generation through this module)."""

    generation: int
    neighbours: tuple[int, ...]
    populations: dict[Role, list[Individual]]
    unrestored: bool

    @property
    def settings(self) -> _Settings: ...
    def start_generation(self, *, stacked_fitness: bool = ...) -> CellRandom: ...
    def _fitness_inputs(self, rnd: CellRandom) -> tuple[dict[Role, list[Individual]], Any]: ...
    def forget_outputs(self) -> None: ...
    def neighbourhood(self, role: Role) -> list[Individual]: ...
    def training(self, members: Mapping[Role, list[Individual]]) -> AbstractContextManager[None]: ...
    def varying(self, job: Variation) -> Iterator[int]: ...
    def _cell_weights(self, individuals: Sequence[Individual]) -> list[float]: ...
    def _replace(self, offspring: Any, pool: Any, data: Any, rnd: CellRandom) -> dict[str, bool]: ...
    def _evolve_mixture(self, rnd: CellRandom) -> dict[str, float]: ...
    def _record(self, pool: Any, replaced: Any, mixture_metrics: Any, extra: Any) -> None: ...


__all__ = [
    "ExchangePoint",
    "Pause",
    "Steps",
    "Timings",
    "VaryTogether",
    "generation",
    "run_alone",
    "select",
    "variation_job",
    "vary",
]
