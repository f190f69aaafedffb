"""Generator/discriminator pairs for images: Lipizzaner's MNIST MLP and DCGAN-style conv nets (64x64, 32x32).

Networks are built on the meta device and every parameter is then drawn from the caller's
``torch.Generator``, so the same seed gives the same weights and the global RNG is never touched.
Discriminators end in a raw logit per sample (no sigmoid): the losses use BCE-with-logits.
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch
from pydantic import Field
from torch import nn

from evogan.api import ComponentOptions, Networks, Role
from evogan.errors import UserError
from evogan.hookspecs import Register, hookimpl


# --------------------------------------------------------------------------------------------- init
def _materialise(module: nn.Module, generator: torch.Generator, *, dcgan: bool) -> nn.Module:
    """Allocate a meta-built module on the generator's device and draw all its parameters from it.

    ``dcgan``: conv weights N(0, 0.02), batch-norm scales N(1, 0.02), biases 0 (Radford et al.).
    Otherwise PyTorch's default for linear layers, U(-1/sqrt(fan_in), 1/sqrt(fan_in)), seeded.
    """
    module = module.to_empty(device=generator.device)
    with torch.no_grad():
        for layer in module.modules():
            if isinstance(layer, nn.modules.batchnorm._BatchNorm):
                layer.reset_running_stats()
                nn.init.normal_(layer.weight, 1.0, 0.02, generator=generator)
                nn.init.zeros_(layer.bias)
            elif isinstance(layer, nn.Conv2d | nn.ConvTranspose2d | nn.Linear):
                if dcgan:
                    nn.init.normal_(layer.weight, 0.0, 0.02, generator=generator)
                    if layer.bias is not None:
                        nn.init.zeros_(layer.bias)
                else:
                    bound = 1.0 / math.sqrt(layer.weight[0].numel())
                    nn.init.uniform_(layer.weight, -bound, bound, generator=generator)
                    if layer.bias is not None:
                        nn.init.uniform_(layer.bias, -bound, bound, generator=generator)
    return module


class _Logits(nn.Module):
    """Flattens a discriminator's (N, 1, ...) output to one logit per sample."""

    per_sample = True  # acts on each sample alone (stacked training runs it on all rows at once)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(x.shape[0])


class _Image(nn.Module):
    """Reshapes flat generator output to images."""

    per_sample = True  # acts on each sample alone (stacked training runs it on all rows at once)

    def __init__(self, shape: tuple[int, ...]) -> None:
        super().__init__()
        self.shape = shape

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(x.shape[0], *self.shape)


class _Noise(nn.Module):
    """Accepts flat (N, z) noise as well as (N, z, 1, 1) for the conv generators."""

    per_sample = True  # acts on each sample alone (stacked training runs it on all rows at once)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return z.reshape(z.shape[0], -1, 1, 1)


def _check_image(name: str, sample_shape: tuple[int, ...], size: int, channels: tuple[int, ...]) -> None:
    if len(sample_shape) != 3 or sample_shape[0] not in channels or sample_shape[1:] != (size, size):
        wanted = " or ".join(f"({c}, {size}, {size})" for c in channels)
        raise UserError(
            f"network {name} needs images of shape {wanted}, the dataset gives {tuple(sample_shape)}"
        )


# --------------------------------------------------------------------------------------------- MLP
class MnistMlpOptions(ComponentOptions):
    latent_size: int = Field(64, ge=1, description="length of the noise vector z")
    hidden: int = Field(256, ge=1, description="width of both hidden layers")


class MnistMlp(Networks[MnistMlpOptions]):
    name: ClassVar[str] = "mnist_mlp"
    description: ClassVar[str] = (
        "Lipizzaner's MNIST MLP pair: z 64, 64-256-256-784 / 784-256-256-1, LeakyReLU"
    )
    Options: ClassVar[type[MnistMlpOptions]] = MnistMlpOptions
    shape: ClassVar[tuple[int, int, int]] = (1, 28, 28)

    def latent_shape(self) -> tuple[int, ...]:
        return (self.options.latent_size,)

    def check(self, sample_shape: tuple[int, ...]) -> None:
        _check_image(self.name, sample_shape, 28, (1,))

    def build(self, role: Role, sample_shape: tuple[int, ...], *, generator: torch.Generator) -> nn.Module:
        self.check(sample_shape)
        z, h, pixels = self.options.latent_size, self.options.hidden, math.prod(self.shape)
        with torch.device("meta"):
            if role == "generator":
                net = nn.Sequential(
                    nn.Linear(z, h), nn.LeakyReLU(0.2),
                    nn.Linear(h, h), nn.LeakyReLU(0.2),
                    nn.Linear(h, pixels), nn.Tanh(),
                    _Image(self.shape),
                )  # fmt: skip
            else:
                net = nn.Sequential(
                    nn.Flatten(),
                    nn.Linear(pixels, h), nn.LeakyReLU(0.2),
                    nn.Linear(h, h), nn.LeakyReLU(0.2),
                    nn.Linear(h, 1),
                    _Logits(),
                )  # fmt: skip
        return _materialise(net, generator, dcgan=False)


# --------------------------------------------------------------------------------------------- DCGAN
def dcgan_generator(latent: int, width: int, channels: int, size: int) -> nn.Sequential:
    """ConvT z -> 4x4 with ``width * size/8`` maps, then halve maps / double side until ``size``."""
    mult = size // 8
    layers: list[nn.Module] = [
        _Noise(),
        nn.ConvTranspose2d(latent, width * mult, 4, 1, 0, bias=False),
        nn.BatchNorm2d(width * mult),
        nn.ReLU(True),
    ]
    while mult > 1:
        layers += [
            nn.ConvTranspose2d(width * mult, width * mult // 2, 4, 2, 1, bias=False),
            nn.BatchNorm2d(width * mult // 2),
            nn.ReLU(True),
        ]
        mult //= 2
    layers += [nn.ConvTranspose2d(width, channels, 4, 2, 1, bias=False), nn.Tanh()]
    return nn.Sequential(*layers)


def dcgan_discriminator(width: int, channels: int, size: int) -> nn.Sequential:
    """The mirror image: stride-2 convs halve the side down to 4x4, then a 4x4 conv to one logit."""
    layers: list[nn.Module] = [nn.Conv2d(channels, width, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, True)]
    mult, side = 1, size // 2
    while side > 4:
        layers += [
            nn.Conv2d(width * mult, width * mult * 2, 4, 2, 1, bias=False),
            nn.BatchNorm2d(width * mult * 2),
            nn.LeakyReLU(0.2, True),
        ]
        mult, side = mult * 2, side // 2
    layers += [nn.Conv2d(width * mult, 1, 4, 1, 0, bias=False), _Logits()]
    return nn.Sequential(*layers)


class ConvOptions(ComponentOptions):
    latent_size: int = Field(100, ge=1, description="length of the noise vector z (shape z x 1 x 1)")
    ngf: int = Field(64, ge=1, description="generator width: feature maps of its last hidden layer")
    ndf: int = Field(64, ge=1, description="discriminator width: feature maps of its first layer")


class Dcgan64(Networks[ConvOptions]):
    name: ClassVar[str] = "dcgan64"
    description: ClassVar[str] = "DCGAN pair for 64x64 images (1 or 3 channels): z 100, ngf = ndf = 64, BN"
    Options: ClassVar[type[ConvOptions]] = ConvOptions
    size: ClassVar[int] = 64

    def latent_shape(self) -> tuple[int, ...]:
        return (self.options.latent_size, 1, 1)

    def check(self, sample_shape: tuple[int, ...]) -> None:
        _check_image(self.name, sample_shape, self.size, (1, 3))

    def build(self, role: Role, sample_shape: tuple[int, ...], *, generator: torch.Generator) -> nn.Module:
        self.check(sample_shape)
        channels = sample_shape[0]
        with torch.device("meta"):
            if role == "generator":
                net = dcgan_generator(self.options.latent_size, self.options.ngf, channels, self.size)
            else:
                net = dcgan_discriminator(self.options.ndf, channels, self.size)
        return _materialise(net, generator, dcgan=True)


class Conv32(Dcgan64):
    name: ClassVar[str] = "conv32"
    description: ClassVar[str] = "DCGAN-like pair for 32x32 images such as CIFAR-10: 4x4 start, 3 up-convs"
    size: ClassVar[int] = 32


@hookimpl
def evogan_register_networks(register: Register) -> None:
    for networks in (MnistMlp, Dcgan64, Conv32):
        register(networks)
