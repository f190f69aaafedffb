"""Built-in selection operators."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

import numpy as np
from pydantic import Field

from evogan.api import ComponentOptions, Selection
from evogan.hookspecs import Register, hookimpl

if TYPE_CHECKING:
    from evogan.individual import Individual


class Tournament(Selection["Tournament.Options"]):
    """Tournament selection as in Lipizzaner: for each of ``k`` winners, draw ``size`` contestants
    *without* replacement and keep the lowest loss (Miller and Goldberg 1995).

    DEAP's ``selTournament`` samples with replacement from the global ``random`` module; this one takes
    the cell's generator, so runs are reproducible per cell.
    """

    name: ClassVar[str] = "tournament"
    description: ClassVar[str] = "k tournaments of `size` contestants drawn without replacement"

    class Options(ComponentOptions):
        size: int = Field(2, ge=1, description="contestants per tournament")

    def select(
        self, population: Sequence[Individual], k: int, *, rng: np.random.Generator
    ) -> list[Individual]:
        size = min(self.options.size, len(population))
        winners = []
        for _ in range(k):
            contestants = rng.choice(len(population), size=size, replace=False)
            best = min(contestants, key=lambda i: (population[i].fitness.loss, i))
            winners.append(population[best])
        return winners


class Best(Selection[ComponentOptions]):
    """Truncation: the ``k`` lowest losses (deterministic; ties keep population order)."""

    name: ClassVar[str] = "truncation"
    description: ClassVar[str] = "the k individuals with the lowest loss"

    def select(
        self, population: Sequence[Individual], k: int, *, rng: np.random.Generator
    ) -> list[Individual]:
        ranked = sorted(range(len(population)), key=lambda i: (population[i].fitness.loss, i))
        return [population[ranked[i % len(ranked)]] for i in range(k)]


@hookimpl
def evogan_register_selections(register: Register) -> None:
    register(Tournament)
    register(Best)
