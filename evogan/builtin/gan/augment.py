"""Differentiable augmentation (DiffAugment, Zhao et al. 2020): colour, translation and cutout applied to
every discriminator input in training, real and fake, so D cannot memorise a small data set and G's
gradient still flows through the transform. Each sample draws its own transform from the cell's stream.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import Field

from evogan.api import Augment, ComponentOptions
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

    def __call__(self, images: torch.Tensor, *, generator: torch.Generator) -> torch.Tensor:
        return images


class DiffAugmentOptions(ComponentOptions):
    policy: tuple[Policy, ...] = Field(
        ("color", "translation", "cutout"), min_length=1, description="transforms, applied in this order"
    )
    translation: float = Field(0.125, ge=0, le=0.5, description="largest shift, as a fraction of the image side")
    cutout: float = Field(0.5, gt=0, le=1, description="side of the square cut out, as a fraction of the image side")
    probability: float = Field(
        1.0, gt=0, le=1, description="chance that a sample gets each transform (DiffAugment: 1)"
    )


class DiffAugment(Augment[DiffAugmentOptions]):
    """DiffAugment's policies on images (N, C, H, W) in [-1, 1]."""

    name: ClassVar[str] = "diffaugment"
    description: ClassVar[str] = "DiffAugment: colour, translation and cutout on every D input in training"
    Options: ClassVar[type[DiffAugmentOptions]] = DiffAugmentOptions

    def __call__(self, images: torch.Tensor, *, generator: torch.Generator) -> torch.Tensor:
        x = images
        for name in self.options.policy:
            changed = TRANSFORMS[name](self, x, generator)
            if self.options.probability < 1:
                chosen = _uniform(x, generator) < self.options.probability
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


TRANSFORMS = {"color": DiffAugment.color, "translation": DiffAugment.translation, "cutout": DiffAugment.cutout}


@hookimpl
def evogan_register_augments(register: Register) -> None:
    register(NoAugment)
    register(DiffAugment)


__all__ = ["DiffAugment", "NoAugment"]
