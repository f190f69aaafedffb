"""Differentiable augmentation (DiffAugment, Zhao et al. 2020): colour, translation and cutout applied to
every discriminator input in training, real and fake, so D cannot memorise a small data set and G's
gradient still flows through the transform. Each sample draws its own transform from the cell's stream.
``ada`` gives them with a probability each discriminator steers by ADA's heuristic (Karras et al. 2020).
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeVar

from pydantic import Field

from evogan.adversarial.contracts import Augment
from evogan.api import ComponentOptions
from evogan.hookspecs import Register, hookimpl
from evogan.lazy import lazy

if TYPE_CHECKING:
    import torch
    import torch.nn.functional as F
else:
    torch = lazy("torch", globals())
    F = lazy("torch.nn.functional", globals())

Policy = Literal["color", "translation", "cutout"]


class NoAugment(Augment[ComponentOptions]):
    """Discriminator inputs as they are (the default)."""

    name: ClassVar[str] = "none"
    description: ClassVar[str] = "no augmentation"
    default: ClassVar[bool] = True
    identity: ClassVar[bool] = True

    def __call__(
        self, images: torch.Tensor, *, stream: torch.Generator, state: Mapping[str, torch.Tensor] | None = None
    ) -> torch.Tensor:
        return images


class TransformOptions(ComponentOptions):
    policy: tuple[Policy, ...] = Field(
        ("color", "translation", "cutout"), min_length=1, description="transforms, applied in this order"
    )
    translation: float = Field(0.125, ge=0, le=0.5, description="largest shift, as a fraction of the image side")
    cutout: float = Field(0.5, gt=0, le=1, description="side of the square cut out, as a fraction of the image side")


class DiffAugmentOptions(TransformOptions):
    probability: float = Field(
        1.0, gt=0, le=1, description="chance that a sample gets each transform (DiffAugment: 1)"
    )


TransformsT = TypeVar("TransformsT", bound=TransformOptions)


class Transforms(Augment[TransformsT]):
    """DiffAugment's transforms on images (N, C, H, W) in [-1, 1], each given to a sample with the
    probability :meth:`probability` says."""

    @abc.abstractmethod
    def probability(self, state: Mapping[str, torch.Tensor] | None) -> float:
        """The chance that a sample gets each transform, for a discriminator with ``state``."""
        raise NotImplementedError

    def __call__(
        self, images: torch.Tensor, *, stream: torch.Generator, state: Mapping[str, torch.Tensor] | None = None
    ) -> torch.Tensor:
        x, p = images, self.probability(state)
        for name in self.options.policy:
            changed = TRANSFORMS[name](self, x, stream)
            if self.adaptive or p < 1:  # an adaptive p draws at any value: the same draws at every p
                chosen = _uniform(x, stream) < p
                changed = torch.where(chosen, changed, x)
            x = changed
        return x

    def color(self, x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        x = x + (_uniform(x, generator) - 0.5)  # brightness
        mean = x.mean(dim=1, keepdim=True)
        x = (x - mean) * (_uniform(x, generator) * 2) + mean  # saturation
        mean = x.mean(dim=(1, 2, 3), keepdim=True)
        return (x - mean) * (_uniform(x, generator) + 0.5) + mean  # contrast

    def translation(self, x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        n, _, h, w = x.shape
        sh, sw = int(h * self.options.translation + 0.5), int(w * self.options.translation + 0.5)
        dy, dx = _integers(-sh, sh + 1, n, x, generator), _integers(-sw, sw + 1, n, x, generator)
        rows = torch.arange(h, device=x.device).view(1, h, 1)
        cols = torch.arange(w, device=x.device).view(1, 1, w)
        rows = (rows + dy + 1).clamp(0, h + 1)  # + 1: the zero border added below; beyond it, zeros
        cols = (cols + dx + 1).clamp(0, w + 1)
        padded = F.pad(x, [1, 1, 1, 1])
        batch = torch.arange(n, device=x.device).view(n, 1, 1)
        return padded.permute(0, 2, 3, 1)[batch, rows, cols].permute(0, 3, 1, 2)

    def cutout(self, x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        n, _, h, w = x.shape
        ch, cw = int(h * self.options.cutout + 0.5), int(w * self.options.cutout + 0.5)
        top = _integers(0, h + (1 - ch % 2), n, x, generator) - ch // 2
        left = _integers(0, w + (1 - cw % 2), n, x, generator) - cw // 2
        rows = torch.arange(h, device=x.device).view(1, h, 1)
        cols = torch.arange(w, device=x.device).view(1, 1, w)
        inside = (rows >= top) & (rows < top + ch) & (cols >= left) & (cols < left + cw)
        return x * (~inside).unsqueeze(1).to(x.dtype)


def _uniform(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One uniform number per sample, shaped to broadcast over (C, H, W); drawn where the stream lives."""
    return torch.rand(x.shape[0], 1, 1, 1, generator=generator, device=generator.device).to(x.device, x.dtype)


def _integers(low: int, high: int, n: int, x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One integer in [low, high) per sample, shaped (n, 1, 1)."""
    return torch.randint(low, high, (n, 1, 1), generator=generator, device=generator.device).to(x.device)


class DiffAugment(Transforms[DiffAugmentOptions]):
    """DiffAugment's policies on images (N, C, H, W) in [-1, 1]."""

    name: ClassVar[str] = "diffaugment"
    description: ClassVar[str] = "DiffAugment: colour, translation and cutout on every D input in training"
    Options: ClassVar[type[DiffAugmentOptions]] = DiffAugmentOptions

    def probability(self, state: Mapping[str, torch.Tensor] | None) -> float:
        return self.options.probability


class AdaOptions(TransformOptions):
    target: float = Field(
        0.6, gt=0, lt=1, description="r_t = E[sign(D(real))] that p steers towards: above it p rises (ADA: 0.6)"
    )
    interval: int = Field(4, ge=1, description="D steps over which r_t is measured, p adjusted after each (ADA: 4)")
    ramp: int = Field(500_000, ge=1, description="real images in which p can go from 0 to 1 (ADA: 500k)")


class Ada(Transforms[AdaOptions]):
    """DiffAugment's transforms, each given to a sample with probability p, and p steered for each
    discriminator by ADA's overfitting heuristic (Karras et al. 2020): r_t, the mean sign of D's outputs
    on its augmented real batches over ``interval`` steps; then ``p += sign(r_t - target) * images / ramp``,
    clamped to [0, 1]. p starts at 0 and travels with its discriminator."""

    name: ClassVar[str] = "ada"
    description: ClassVar[str] = "DiffAugment's transforms with ADA's adaptive probability, one per discriminator"
    Options: ClassVar[type[AdaOptions]] = AdaOptions
    adaptive: ClassVar[bool] = True

    def start(self) -> dict[str, torch.Tensor]:
        return {
            "aug_p": torch.zeros((), dtype=torch.float64),  # the probability
            "aug_signs": torch.zeros((), dtype=torch.float64),  # sum of sign(D(real)) since the last adjustment
            "aug_images": torch.zeros((), dtype=torch.int64),  # ...over this many outputs
            "aug_steps": torch.zeros((), dtype=torch.int64),  # ...in this many D steps
        }

    def probability(self, state: Mapping[str, torch.Tensor] | None) -> float:
        return 0.0 if state is None else float(state["aug_p"])

    def observe(self, state: dict[str, torch.Tensor], real_logits: torch.Tensor) -> None:
        signs = real_logits.detach().sign().to("cpu", torch.float64)
        state["aug_signs"] += signs.sum()
        state["aug_images"] += signs.numel()
        state["aug_steps"] += 1
        if int(state["aug_steps"]) < self.options.interval:
            return
        r_t = state["aug_signs"] / state["aug_images"]
        state["aug_p"].add_(torch.sign(r_t - self.options.target) * state["aug_images"] / self.options.ramp)
        state["aug_p"].clamp_(0.0, 1.0)
        for key in ("aug_signs", "aug_images", "aug_steps"):
            state[key].zero_()

    def metrics(self, state: Mapping[str, torch.Tensor] | None) -> dict[str, float]:
        return {"aug_p": self.probability(state)}


TRANSFORMS: dict[str, Callable[[Transforms[Any], torch.Tensor, torch.Generator], torch.Tensor]] = {
    "color": Transforms.color,
    "translation": Transforms.translation,
    "cutout": Transforms.cutout,
}


@hookimpl
def evogan_register_augments(register: Register) -> None:
    register(NoAugment)
    register(DiffAugment)
    register(Ada)


__all__ = ["Ada", "DiffAugment", "NoAugment", "Transforms"]
