"""Adversarial losses on discriminator logits (the discriminators return raw logits)."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from evogan.adversarial.contracts import Loss
from evogan.lazy import lazy

if TYPE_CHECKING:
    import torch
    import torch.nn.functional as F
else:  # imported on first use: `evogan validate` and `components` read options without them
    torch = lazy("torch", globals())
    F = lazy("torch.nn.functional", globals())


class BCE(Loss):
    """Binary cross-entropy; the generator uses the non-saturating form BCE(D(G(z)), 1) (Goodfellow 2014)."""

    name: ClassVar[str] = "bce"
    stackable: ClassVar[bool] = True
    description: ClassVar[str] = "binary cross-entropy, non-saturating generator loss"

    def generator_loss(
        self, fake_logits: torch.Tensor, *, stream: torch.Generator | None = None
    ) -> torch.Tensor:
        return F.binary_cross_entropy_with_logits(fake_logits, torch.ones_like(fake_logits))

    def discriminator_loss(self, real_logits: torch.Tensor, fake_logits: torch.Tensor) -> torch.Tensor:
        return F.binary_cross_entropy_with_logits(
            real_logits, torch.ones_like(real_logits)
        ) + F.binary_cross_entropy_with_logits(fake_logits, torch.zeros_like(fake_logits))


class Minimax(BCE):
    """The original minimax loss: the generator minimises log(1 - D(G(z)))."""

    name: ClassVar[str] = "minimax"
    description: ClassVar[str] = "saturating minimax generator loss, BCE discriminator"

    def generator_loss(
        self, fake_logits: torch.Tensor, *, stream: torch.Generator | None = None
    ) -> torch.Tensor:
        return -F.binary_cross_entropy_with_logits(fake_logits, torch.zeros_like(fake_logits))


class Heuristic(BCE):
    """Lipizzaner's 'heuristic' generator loss: -0.5 * mean(log D(G(z)))."""

    name: ClassVar[str] = "heuristic"
    description: ClassVar[str] = "-0.5 log D(G(z)) generator loss, BCE discriminator"

    def generator_loss(
        self, fake_logits: torch.Tensor, *, stream: torch.Generator | None = None
    ) -> torch.Tensor:
        return -0.5 * F.logsigmoid(fake_logits).mean()


class LeastSquares(Loss):
    """Least squares on D's probability, as Lipizzaner's MSE loss (Mao et al. 2017 use raw outputs)."""

    name: ClassVar[str] = "mse"
    stackable: ClassVar[bool] = True
    description: ClassVar[str] = "least-squares GAN loss on sigmoid outputs"

    def generator_loss(
        self, fake_logits: torch.Tensor, *, stream: torch.Generator | None = None
    ) -> torch.Tensor:
        return ((torch.sigmoid(fake_logits) - 1) ** 2).mean()

    def discriminator_loss(self, real_logits: torch.Tensor, fake_logits: torch.Tensor) -> torch.Tensor:
        return ((torch.sigmoid(real_logits) - 1) ** 2).mean() + (torch.sigmoid(fake_logits) ** 2).mean()


class Hinge(Loss):
    """Hinge loss (Lim and Ye 2017; SNGAN, ADAPT): D maximises margins, G raises the fake logit."""

    name: ClassVar[str] = "hinge"
    stackable: ClassVar[bool] = True
    description: ClassVar[str] = "hinge loss (SNGAN / ADAPT)"

    def generator_loss(
        self, fake_logits: torch.Tensor, *, stream: torch.Generator | None = None
    ) -> torch.Tensor:
        return -fake_logits.mean()

    def discriminator_loss(self, real_logits: torch.Tensor, fake_logits: torch.Tensor) -> torch.Tensor:
        return F.relu(1 - real_logits).mean() + F.relu(1 + fake_logits).mean()


class Wasserstein(Hinge):
    """The WGAN loss (Arjovsky, Chintala and Bottou 2017): the critic widens mean D(real) - mean D(fake),
    the generator raises D(G(z)). It needs a Lipschitz critic: as Lipizzaner's ``lipizzaner_wgan``, set
    ``problem.clip_weights = 0.01``, ``optimizer = "rmsprop"`` and the critic schedule
    (``recipes/mnist-wgan.toml``)."""

    name: ClassVar[str] = "wasserstein"
    description: ClassVar[str] = "WGAN critic loss (pair with clip_weights, rmsprop, critic_burst)"

    # The generator's loss is the hinge loss's, -mean D(G(z)); only the critic's differs.
    def discriminator_loss(self, real_logits: torch.Tensor, fake_logits: torch.Tensor) -> torch.Tensor:
        return fake_logits.mean() - real_logits.mean()


LOSSES = (BCE, Minimax, Heuristic, LeastSquares, Hinge, Wasserstein)
