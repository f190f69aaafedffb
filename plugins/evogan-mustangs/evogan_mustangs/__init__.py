"""Mustangs (Toutouh et al., GECCO 2019): the generator loss is drawn uniformly per training step.

Mixing non-saturating BCE, least-squares and the 'heuristic' loss varies the generator's gradient signal
and, in spatial coevolution, diversifies the cells. The draw uses the cell's random stream handed to
:meth:`evogan.adversarial.contracts.Loss.generator_loss`, and nothing is stored between calls: the original's shared,
stateful loss object let one network's draw leak into another's loss.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import Field, field_validator

from evogan import hookimpl
from evogan.adversarial.contracts import Loss
from evogan.api import ComponentOptions
from evogan.hookspecs import Register
from evogan.lazy import lazy

if TYPE_CHECKING:
    import torch
    import torch.nn.functional as F
else:  # imported on first use: `evogan validate` and `components` read options without them
    torch = lazy("torch", globals())
    F = lazy("torch.nn.functional", globals())

LossName = Literal["bce", "mse", "heuristic"]
ALL_LOSSES: tuple[LossName, ...] = ("bce", "mse", "heuristic")


def bce(fake_logits: torch.Tensor) -> torch.Tensor:
    """Non-saturating BCE(D(G(z)), 1) = -mean(log sigmoid(logit))."""
    return F.binary_cross_entropy_with_logits(fake_logits, torch.ones_like(fake_logits))


def mse(fake_logits: torch.Tensor) -> torch.Tensor:
    """Least squares on D's probability, as Lipizzaner's MSE loss."""
    return (torch.sigmoid(fake_logits) - 1).square().mean()


def heuristic(fake_logits: torch.Tensor) -> torch.Tensor:
    """Lipizzaner's heuristic loss, -0.5 * mean(log D(G(z))): half the non-saturating BCE."""
    return -0.5 * F.logsigmoid(fake_logits).mean()


GENERATOR_LOSSES: dict[LossName, Callable[[torch.Tensor], torch.Tensor]] = {
    "bce": bce,
    "mse": mse,
    "heuristic": heuristic,
}


class MustangsOptions(ComponentOptions):
    losses: tuple[LossName, ...] = Field(
        ALL_LOSSES, min_length=1, description="generator losses drawn from uniformly at each training step"
    )

    @field_validator("losses")
    @classmethod
    def _distinct(cls, value: tuple[LossName, ...]) -> tuple[LossName, ...]:
        if len(set(value)) != len(value):
            raise ValueError("each loss may be listed once (a repeat would skew the uniform draw)")
        return value


class Mustangs(Loss[MustangsOptions]):
    """A generator loss drawn uniformly from ``losses`` per step; BCE for fitness and for the discriminator."""

    name: ClassVar[str] = "mustangs"
    description: ClassVar[str] = "Mustangs: generator loss drawn per step from bce/mse/heuristic; BCE for D"
    Options: ClassVar[type[MustangsOptions]] = MustangsOptions

    def choose(self, stream: torch.Generator | None) -> LossName:
        """The loss for one call: a uniform draw from ``stream``, or ``bce`` without one (fitness)."""
        if stream is None:
            return "bce"
        losses = self.options.losses
        return losses[int(torch.randint(len(losses), (1,), generator=stream))]

    def generator_loss(self, fake_logits: torch.Tensor, *, stream: torch.Generator | None = None) -> torch.Tensor:
        return GENERATOR_LOSSES[self.choose(stream)](fake_logits)

    def discriminator_loss(self, real_logits: torch.Tensor, fake_logits: torch.Tensor) -> torch.Tensor:
        return F.binary_cross_entropy_with_logits(
            real_logits, torch.ones_like(real_logits)
        ) + F.binary_cross_entropy_with_logits(fake_logits, torch.zeros_like(fake_logits))


@hookimpl
def evogan_register_losses(register: Register) -> None:
    register(Mustangs)


__all__ = ["ALL_LOSSES", "GENERATOR_LOSSES", "Mustangs", "MustangsOptions", "bce", "heuristic", "mse"]
