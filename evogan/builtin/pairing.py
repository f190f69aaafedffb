"""Built-in pairings: who each generator step and each discriminator step of a cell trains against.

With selection on, ``own`` and ``neighbourhood`` are both the cell's offspring (see
:class:`evogan.api.Opponents`), so every pairing that only separates the two then behaves as the reference.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar, Literal

import numpy as np
from pydantic import Field, model_validator

from evogan.adversarial.contracts import Faced, Pairing
from evogan.api import ComponentOptions, Opponents
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


def _neighbours(opponents: Opponents) -> tuple[list[Individual], list[float]]:
    """The neighbourhood members that are not the cell's own, with their mixture weights."""
    own = {id(individual) for individual in opponents.own}
    pairs = [(i, w) for i, w in zip(opponents.neighbourhood, opponents.weights, strict=True) if id(i) not in own]
    return [i for i, _ in pairs], [w for _, w in pairs]


class NeighbourShare(Pairing["NeighbourShare.Options"]):
    """Each cell trains its own pair and couples to its neighbours for a set share of the steps, a share
    that may fade as the run goes on."""

    name: ClassVar[str] = "neighbour_share"
    description: ClassVar[str] = (
        "each cell trains its own pair (as own_pair) and faces its neighbours for a set share of the "
        "steps: a generator step faces a neighbour's discriminator (drawn uniformly) with probability "
        "generator_share, a discriminator step a neighbour's generator with probability "
        "discriminator_share, so the critics a generator meets have seen its samples; both shares may "
        "fade to zero as training goes on (fade, fade_until). Reasoning: under g_neighbourhood most "
        "generator steps face critics that never trained on that generator, and on MNIST the grid's "
        "generators got worse the longer they trained (benchmarks/RESULTS.md, issue 35)."
    )

    class Options(ComponentOptions):
        generator_share: float = Field(
            0.25, ge=0, le=1, description="chance that a generator step faces a neighbour's discriminator"
        )
        discriminator_share: float = Field(
            0.0, ge=0, le=1, description="chance that a discriminator step faces a neighbour's generator"
        )
        blend: bool = Field(
            False,
            description="a generator step faces its own discriminator and every neighbour's at once, the "
            "neighbours' weighted by the mixture and together by generator_share (costs a D forward each), "
            "instead of drawing one",
        )
        fade: Literal["none", "linear", "cosine"] = Field(
            "none", description="how both shares fall to zero over the run: not, linearly or on a half cosine"
        )
        fade_until: float = Field(
            1.0, gt=0, le=1, description="the fraction of the run's generations at which a fading share reaches 0"
        )
        adapt_faced: bool = Field(
            False,
            description="a neighbour's discriminator that a generator step faces first takes one discriminator "
            "step against that generator's samples (on the cell's copy, which the next exchange replaces), so "
            "the generator cannot settle on samples a frozen critic never learned to reject; costs a D step "
            "per such G step, trains looped (benchmarks/RESULTS.md, issue 35: neighbours' frozen critics "
            "judged 98 % of a g_neighbourhood generator's samples real)",
        )

        @model_validator(mode="after")
        def _blend_keeps_its_own_critic(self) -> NeighbourShare.Options:
            if self.blend and self.generator_share == 1.0:
                raise ValueError("blend with generator_share = 1 never faces the own discriminator: use g_mixture")
            return self

    @property
    def adapts_faced(self) -> bool:
        """Read by the GAN problem's training loop (see ``adapt_faced``)."""
        return self.options.adapt_faced

    def scale(self, progress: float) -> float:
        """The factor on both shares at ``progress`` (0 at the run's start, towards 1 at its end)."""
        options = self.options
        if options.fade == "none":
            return 1.0
        done = min(1.0, progress / options.fade_until)
        return 1.0 - done if options.fade == "linear" else 0.5 * (1.0 + math.cos(math.pi * done))

    def generator_opponents(self, discriminators: Opponents, *, rng: np.random.Generator) -> Faced:
        share = self.options.generator_share * self.scale(discriminators.progress)
        neighbours, weights = _neighbours(discriminators)
        own = _draw(discriminators.own, rng)
        if not neighbours or share == 0.0:
            return [(own, 1.0)]
        if self.options.blend:
            total = sum(weights)
            return [(own, 1.0 - share), *((n, share * w / total) for n, w in zip(neighbours, weights, strict=True))]
        return [(_draw(neighbours, rng), 1.0)] if rng.random() < share else [(own, 1.0)]

    def discriminator_opponent(self, generators: Opponents, *, rng: np.random.Generator) -> Individual:
        share = self.options.discriminator_share * self.scale(generators.progress)
        neighbours, _ = _neighbours(generators)
        if neighbours and share > 0.0 and rng.random() < share:
            return _draw(neighbours, rng)
        return _draw(generators.own, rng)


@hookimpl
def evogan_register_pairings(register: Register) -> None:
    for pairing in (Reference, OwnPair, GeneratorNeighbourhood, GeneratorMixture, NeighbourShare):
        register(pairing)
