"""SNGAN's "standard CNN" pair for 32x32 images (Miyato et al. 2018, Table 3; CIFAR-10 / STL-10 at 32x32).

We ship the standard CNN rather than the SNGAN ResNet that ADAPT's SNGAN results use ("lottery"
backbone): it is about 4x cheaper per sample, which is what a CPU box can afford, and it keeps the two
ingredients the balance ratio depends on, spectral norm on every D layer and raw hinge-loss logits.

- G: z (128) -> Linear -> 4x4x512 -> three 4x4 stride-2 ConvT (256, 128, 64; BN, ReLU) -> 3x3 conv, tanh.
- D: 3x3 conv 64 / 4x4 s2 conv 64 / 3x3 128 / 4x4 s2 128 / 3x3 256 / 4x4 s2 256 / 3x3 512, LeakyReLU(0.1),
  then Linear(4x4x512 -> 1). Spectral norm (``torch.nn.utils.parametrizations.spectral_norm``) on every
  conv and linear of D, so sparsity masks apply to ``parametrizations.weight.original``, as the reference
  masks ``weight_orig``.

Everything random at build time is drawn from the caller's ``torch.Generator``: the networks are built on
the meta device, then weights (Xavier-uniform, as the SNGAN/GAN-LTH code) and the spectral norm's power
iteration vectors ``u``, ``v`` are drawn from it; the global RNG is never touched.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from pydantic import Field
from torch import nn
from torch.nn.utils import parametrize
from torch.nn.utils.parametrizations import spectral_norm

from evogan.api import ComponentOptions, Networks, Role
from evogan.errors import UserError
from evogan.hookspecs import Register, hookimpl

#: Power iterations run on the freshly drawn weights, as the parametrization's own constructor does.
_INIT_POWER_ITERATIONS = 15


class _Logits(nn.Module):
    """One raw logit per sample: (N, 1) -> (N,)."""

    per_sample = True  # acts on each sample alone (stacked training runs it on all rows at once)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(x.shape[0])


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
        _Logits(),
    )  # fmt: skip


@torch.no_grad()
def materialise(module: nn.Module, generator: torch.Generator) -> nn.Module:
    """Allocate a meta-built module on the generator's device; draw weights, biases and u/v from it.

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
            nn.init.xavier_uniform_(_trainable_weight(layer), generator=generator)
            if layer.bias is not None:
                nn.init.zeros_(layer.bias)
            if parametrize.is_parametrized(layer, "weight"):
                _seed_power_iteration(layer, generator)
    return module


def _trainable_weight(layer: nn.Module) -> torch.Tensor:
    """The tensor the optimizer updates: ``parametrizations.weight.original`` under spectral norm."""
    if parametrize.is_parametrized(layer, "weight"):
        return layer.get_parameter("parametrizations.weight.original")
    return layer.get_parameter("weight")


def _seed_power_iteration(layer: nn.Module, generator: torch.Generator) -> None:
    """Draw spectral norm's ``u`` and ``v`` from ``generator`` and refine them on the current weight."""
    parametrizations = layer.get_submodule("parametrizations.weight")
    assert isinstance(parametrizations, nn.ModuleList)
    for parametrization in parametrizations:
        u, v = getattr(parametrization, "_u", None), getattr(parametrization, "_v", None)
        if not isinstance(u, torch.Tensor) or not isinstance(v, torch.Tensor):
            continue
        for vector in (u, v):
            vector.normal_(0.0, 1.0, generator=generator)
            vector.div_(vector.norm().clamp_min(1e-12))
    training = layer.training
    layer.train()
    for _ in range(_INIT_POWER_ITERATIONS):  # each access in train mode runs one power iteration
        _ = layer.weight
    layer.train(training)


class SnganOptions(ComponentOptions):
    latent_size: int = Field(128, ge=1, description="length of the noise vector z (SNGAN: 128)")
    ngf: int = Field(64, ge=1, description="generator width w: feature maps 8w, 4w, 2w, w")
    ndf: int = Field(64, ge=1, description="discriminator width w: feature maps w, 2w, 4w, 8w")
    leak: float = Field(0.1, ge=0, description="LeakyReLU slope of the discriminator (SNGAN: 0.1)")
    spectral_norm: bool = Field(True, description="spectral norm on every discriminator layer")


class Sngan32(Networks[SnganOptions]):
    name: ClassVar[str] = "sngan32"
    description: ClassVar[str] = (
        "SNGAN standard CNN for 32x32 images (Miyato et al. 2018): z 128, BN generator, spectral-norm critic"
    )
    Options: ClassVar[type[SnganOptions]] = SnganOptions
    size: ClassVar[int] = 32

    def latent_shape(self) -> tuple[int, ...]:
        return (self.options.latent_size,)

    def check(self, sample_shape: tuple[int, ...]) -> None:
        if len(sample_shape) != 3 or sample_shape[0] not in (1, 3) or sample_shape[1:] != (32, 32):
            raise UserError(
                f"network {self.name} needs images of shape (3, 32, 32) or (1, 32, 32), "
                f"the dataset gives {tuple(sample_shape)}"
            )

    def build(self, role: Role, sample_shape: tuple[int, ...], *, generator: torch.Generator) -> nn.Module:
        self.check(sample_shape)
        o, channels = self.options, sample_shape[0]
        with torch.device("meta"):
            if role == "generator":
                net = sngan_generator(o.latent_size, o.ngf, channels)
            else:
                net = sngan_discriminator(o.ndf, channels, o.leak, o.spectral_norm)
        return materialise(net, generator)


@hookimpl
def evogan_register_networks(register: Register) -> None:
    register(Sngan32)
