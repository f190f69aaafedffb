"""Built-in pairings: who each generator step and each discriminator step of a cell trains against.

With selection on, ``own`` and ``neighbourhood`` are both the cell's offspring (see
:class:`evogan.api.Opponents`), so every pairing that only separates the two then behaves as the reference.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar, Literal

import numpy as np

from evogan.api import Faced, Opponents, Pairing
from evogan.hookspecs import Register, hookimpl

if TYPE_CHECKING:
    from evogan.individual import Individual


def _draw(pool: Sequence[Individual], rng: np.random.Generator) -> Individual:
    return pool[int(rng.integers(len(pool)))]


class Drawn(Pairing):
    """One opponent per step, drawn uniformly from the pool each role names (``own`` or
    ``neighbourhood`` of :class:`evogan.api.Opponents`)."""

    generator_pool: ClassVar[Literal["own", "neighbourhood"]] = "neighbourhood"
    discriminator_pool: ClassVar[Literal["own", "neighbourhood"]] = "neighbourhood"

    def generator_opponents(self, discriminators: Opponents, *, rng: np.random.Generator) -> Faced:
        return [(_draw(getattr(discriminators, self.generator_pool), rng), 1.0)]

    def discriminator_opponent(self, generators: Opponents, *, rng: np.random.Generator) -> Individual:
        return _draw(getattr(generators, self.discriminator_pool), rng)


class Reference(Drawn):
    """Lipizzaner's pairing (Schmiedlechner et al. 2018; Al-Dujaili et al. 2018)."""

    name: ClassVar[str] = "reference"
    description: ClassVar[str] = (
        "Lipizzaner (Schmiedlechner et al. 2018, Al-Dujaili et al. 2018): each generator step faces one "
        "discriminator drawn uniformly from the neighbourhood (the cell's own, live, or a neighbour's "
        "copy, frozen for the generation) and each discriminator step one generator drawn the same way; "
        "with selection on, drawn from the offspring. The default, and what the paper recipes use."
    )
    default: ClassVar[bool] = True


class OwnPair(Drawn):
    """Each cell trains only its own pair; neighbours act through selection and the mixture alone."""

    name: ClassVar[str] = "own_pair"
    description: ClassVar[str] = (
        "each cell trains only its own pair (G against its own live D, D against its own live G), as a "
        "lone GAN (Goodfellow et al. 2014); neighbours act only through selection, replacement and the "
        "mixture. The control that separates the grid's communication from its training."
    )
    generator_pool = "own"
    discriminator_pool = "own"


class GeneratorNeighbourhood(Drawn):
    """G against a drawn neighbourhood D; D only against its own live G."""

    name: ClassVar[str] = "g_neighbourhood"
    description: ClassVar[str] = (
        "each generator step faces one discriminator drawn uniformly from the neighbourhood (as the "
        "reference); each discriminator step faces only the cell's own live generator. Reasoning: a "
        "generator gains from several critics (multi-discriminator GANs: GMAN, Durugkar et al. 2017), "
        "while a discriminator that spends most steps on neighbours' frozen generators stops modelling "
        "its own generator (issue 9's ablation on the 25-mode grid)."
    )
    discriminator_pool = "own"


class GeneratorMixture(Pairing):
    """G's loss averaged over every neighbourhood D with the mixture weights; D only against its own G."""

    name: ClassVar[str] = "g_mixture"
    description: ClassVar[str] = (
        "each generator step's loss is the mixture-weighted mean over all the neighbourhood's "
        "discriminators on the same batch and noise (one G forward, one D forward each): GMAN's mean "
        "over discriminators (Durugkar et al. 2017), weighted by the cell's mixture weights instead of "
        "drawing one critic at random; each discriminator step faces only the cell's own live generator."
    )

    def generator_opponents(self, discriminators: Opponents, *, rng: np.random.Generator) -> Faced:
        pairs = list(zip(discriminators.neighbourhood, discriminators.weights, strict=True))
        own = {id(individual) for individual in discriminators.own}
        # The cell's own discriminator first: it is the principal opponent a sparsity controller hears of.
        return sorted(pairs, key=lambda pair: id(pair[0]) not in own)

    def discriminator_opponent(self, generators: Opponents, *, rng: np.random.Generator) -> Individual:
        return _draw(generators.own, rng)


@hookimpl
def evogan_register_pairings(register: Register) -> None:
    for pairing in (Reference, OwnPair, GeneratorNeighbourhood, GeneratorMixture):
        register(pairing)
