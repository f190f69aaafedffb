"""Built-in hyper-parameter mutations."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import ClassVar

import numpy as np
from pydantic import Field

from evogan.adversarial.contracts import Mutation
from evogan.api import ComponentOptions
from evogan.hookspecs import Register, hookimpl


class GaussianLearningRate(Mutation["GaussianLearningRate.Options"]):
    """Lipizzaner's learning-rate mutation (Schmiedlechner et al. 2018).

    With probability ``probability``: ``delta ~ N(-lr0/10, lr0)`` and ``lr = max(0, lr + alpha * delta)``,
    where ``lr0`` is the problem's initial learning rate. With the paper's constants this acts as a slow
    linear decay rather than a search (see the reference notes); ``lognormal_lr`` is the alternative.
    """

    name: ClassVar[str] = "gaussian_lr"
    description: ClassVar[str] = "Lipizzaner's additive Gaussian learning-rate mutation"

    class Options(ComponentOptions):
        probability: float = Field(0.5, ge=0, le=1, description="chance that a step mutates the rate")
        alpha: float = Field(1e-4, ge=0, description="scale of the Gaussian step")
        initial_lr: float | None = Field(None, gt=0, description="lr0; default: the problem's learning rate")

    def mutate(self, hyper: Mapping[str, float], *, rng: np.random.Generator) -> dict[str, float]:
        out = dict(hyper)
        if rng.random() < self.options.probability:
            lr0 = self.options.initial_lr or hyper.get("lr0", hyper["lr"])
            delta = rng.normal(-lr0 / 10, lr0)
            out["lr"] = max(0.0, hyper["lr"] + self.options.alpha * delta)
        return out


class LogNormalLearningRate(Mutation["LogNormalLearningRate.Options"]):
    """Multiplicative mutation ``lr *= exp(sigma * N(0, 1))``, clipped to ``[min_lr, max_lr]``: a real
    search over scales, unlike the additive rule."""

    name: ClassVar[str] = "lognormal_lr"
    description: ClassVar[str] = "multiplicative log-normal learning-rate mutation"

    class Options(ComponentOptions):
        probability: float = Field(0.01, ge=0, le=1, description="chance that a step mutates the rate")
        sigma: float = Field(0.1, gt=0, description="standard deviation of log(lr) per mutation")
        min_lr: float = Field(1e-6, gt=0, description="lower clip")
        max_lr: float = Field(1e-2, gt=0, description="upper clip")

    def mutate(self, hyper: Mapping[str, float], *, rng: np.random.Generator) -> dict[str, float]:
        out = dict(hyper)
        if rng.random() < self.options.probability:
            lr = hyper["lr"] * math.exp(self.options.sigma * rng.standard_normal())
            out["lr"] = min(self.options.max_lr, max(self.options.min_lr, lr))
        return out


class NoMutation(Mutation[ComponentOptions]):
    """Leaves hyper-parameters alone."""

    name: ClassVar[str] = "none"
    description: ClassVar[str] = "no hyper-parameter mutation"

    def mutate(self, hyper: Mapping[str, float], *, rng: np.random.Generator) -> dict[str, float]:
        return dict(hyper)


@hookimpl
def evogan_register_mutations(register: Register) -> None:
    register(GaussianLearningRate)
    register(LogNormalLearningRate)
    register(NoMutation)
