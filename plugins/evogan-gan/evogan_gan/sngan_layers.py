"""The layers of :mod:`evogan_gan.sngan` (the architecture is described there): module classes,
builders and the seeded initialisation need torch when defined, so they are imported when a network is
built, not when a recipe is read."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils import parametrize
from torch.nn.utils.parametrizations import spectral_norm

# Logits: (N, 1) -> (N,), as the DCGAN critic
from evogan_gan.image_layers import Logits, seed_power_iteration, trainable_weight


class _Reshape(nn.Module):
    """Flat (N, C*H*W) -> (N, C, H, W) after the generator's first linear layer."""

    per_sample = True  # acts on each sample alone (stacked training runs it on all rows at once)

    def __init__(self, channels: int, side: int) -> None:
        super().__init__()
        self.channels, self.side = channels, side

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(x.shape[0], self.channels, self.side, self.side)


class _Flat(nn.Module):
    """Accepts (N, z) as well as (N, z, 1, 1) noise."""

    per_sample = True  # acts on each sample alone (stacked training runs it on all rows at once)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return z.reshape(z.shape[0], -1)


def sngan_generator(latent: int, width: int, channels: int) -> nn.Sequential:
    """Miyato et al.'s standard-CNN generator for 32x32 (M_g = 4): widths 8w, 4w, 2w, w with w = 64."""
    return nn.Sequential(
        _Flat(),
        nn.Linear(latent, 4 * 4 * 8 * width),
        _Reshape(8 * width, 4),
        nn.BatchNorm2d(8 * width), nn.ReLU(True),
        nn.ConvTranspose2d(8 * width, 4 * width, 4, 2, 1), nn.BatchNorm2d(4 * width), nn.ReLU(True),
        nn.ConvTranspose2d(4 * width, 2 * width, 4, 2, 1), nn.BatchNorm2d(2 * width), nn.ReLU(True),
        nn.ConvTranspose2d(2 * width, width, 4, 2, 1), nn.BatchNorm2d(width), nn.ReLU(True),
        nn.Conv2d(width, channels, 3, 1, 1), nn.Tanh(),
    )  # fmt: skip


def sngan_discriminator(width: int, channels: int, leak: float, normalise: bool) -> nn.Sequential:
    """The standard-CNN critic; ``normalise`` wraps every conv/linear in spectral norm."""

    def sn(module: nn.Module) -> nn.Module:
        return spectral_norm(module) if normalise else module

    def act() -> nn.Module:
        return nn.LeakyReLU(leak, True)

    w = width
    return nn.Sequential(
        sn(nn.Conv2d(channels, w, 3, 1, 1)), act(),
        sn(nn.Conv2d(w, w, 4, 2, 1)), act(),
        sn(nn.Conv2d(w, 2 * w, 3, 1, 1)), act(),
        sn(nn.Conv2d(2 * w, 2 * w, 4, 2, 1)), act(),
        sn(nn.Conv2d(2 * w, 4 * w, 3, 1, 1)), act(),
        sn(nn.Conv2d(4 * w, 4 * w, 4, 2, 1)), act(),
        sn(nn.Conv2d(4 * w, 8 * w, 3, 1, 1)), act(),
        nn.Flatten(),
        sn(nn.Linear(4 * 4 * 8 * w, 1)),
        Logits(),
    )  # fmt: skip


@torch.no_grad()
def materialise(module: nn.Module, generator: torch.Generator) -> nn.Module:
    """Allocate a copy of a skeleton on the generator's device; draw weights, biases and u/v from it.

    Conv, ConvT and Linear weights: Xavier-uniform (gain 1), biases 0; BatchNorm: scale 1, shift 0,
    fresh running statistics. Spectral-norm layers get unit-norm Gaussian ``u``, ``v`` and 15 power
    iterations, so sigma is accurate from the first step (what the parametrization's constructor does
    with the global RNG).
    """
    module = module.to_empty(device=generator.device)
    for layer in module.modules():
        if isinstance(layer, nn.modules.batchnorm._BatchNorm):
            layer.reset_running_stats()
            nn.init.ones_(layer.weight)
            nn.init.zeros_(layer.bias)
        elif isinstance(layer, nn.Conv2d | nn.ConvTranspose2d | nn.Linear):
            nn.init.xavier_uniform_(trainable_weight(layer), generator=generator)
            if layer.bias is not None:
                nn.init.zeros_(layer.bias)
            if parametrize.is_parametrized(layer, "weight"):
                seed_power_iteration(layer, generator)
    return module


__all__ = ["materialise", "sngan_discriminator", "sngan_generator"]
