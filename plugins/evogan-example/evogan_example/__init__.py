"""An evogan plugin written exactly as a third party would: copy this package to start your own.

It adds one selection operator (``linear_rank``) and one topology (``complete``). Both register through
evogan's hooks; recipes pick them by name:

    [selection]
    use = "linear_rank"
    pressure = 1.8

    [topology]
    use = "complete"
    cells = 3
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

import numpy as np
from pydantic import Field

from evogan import hookimpl
from evogan.api import ComponentOptions, Selection, Topology
from evogan.hookspecs import Register

if TYPE_CHECKING:
    from evogan.individual import Individual


class LinearRank(Selection["LinearRank.Options"]):
    """Linear ranking selection (Baker 1985): the best of n is drawn with weight ``pressure``, the worst
    with ``2 - pressure``, the rest in between, by rank rather than raw loss.

    ``Selection["LinearRank.Options"]`` tells a type checker what ``self.options`` holds.
    """

    name: ClassVar[str] = "linear_rank"
    description: ClassVar[str] = "linear ranking selection (example plugin)"

    class Options(ComponentOptions):
        pressure: float = Field(1.5, ge=1.0, le=2.0, description="expected copies of the best individual")

    def select(
        self, population: Sequence[Individual], k: int, *, rng: np.random.Generator
    ) -> list[Individual]:
        n = len(population)
        order = sorted(range(n), key=lambda i: (population[i].fitness.loss, i))  # best first
        if n == 1:
            return [population[0]] * k
        s = self.options.pressure
        weights = np.array([s - (2 * s - 2) * rank / (n - 1) for rank in range(n)])
        picks = rng.choice(n, size=k, p=weights / weights.sum())
        return [population[order[p]] for p in picks]


class Complete(Topology["Complete.Options"]):
    """Every cell neighbours every other cell (a panmictic grid)."""

    name: ClassVar[str] = "complete"
    description: ClassVar[str] = "complete graph: every cell sees all others (example plugin)"

    class Options(ComponentOptions):
        cells: int = Field(3, ge=1, description="number of cells")

    @property
    def cells(self) -> int:
        return self.options.cells

    def neighbours(self, cell: int) -> tuple[int, ...]:
        return tuple(c for c in range(self.options.cells) if c != cell)

    def describe(self) -> str:
        return f"complete graph of {self.options.cells}"


@hookimpl
def evogan_register_selections(register: Register) -> None:
    register(LinearRank)


@hookimpl
def evogan_register_topologies(register: Register) -> None:
    register(Complete)
