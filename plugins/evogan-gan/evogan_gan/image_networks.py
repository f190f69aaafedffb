"""Generator/discriminator pairs for images: Lipizzaner's MNIST MLP and DCGAN-style conv nets (64x64, 32x32).

Networks are built on the meta device and every parameter is then drawn from the caller's
``torch.Generator``, so the same seed gives the same weights and the global RNG is never touched.
Discriminators end in a raw logit per sample (no sigmoid): the losses use BCE-with-logits.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, ClassVar

from pydantic import Field

from evogan.adversarial.contracts import Networks
from evogan.api import ComponentOptions, Role
from evogan.errors import UserError
from evogan.hookspecs import Register, hookimpl
from evogan.lazy import lazy

if TYPE_CHECKING:
    import torch
    from torch import nn
else:  # imported on first use: `evogan validate` and `components` read options without them
    torch = lazy("torch", globals())
    nn = lazy("torch.nn", globals())


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
    spectral_norm: bool = Field(
        False,
        description="spectral norm on every discriminator layer (Miyato et al. 2018): what lets the pair "
        "train with masked weights (benchmarks/RESULTS.md, 'Sparse training that keeps its quality')",
    )


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
        from torch.nn.utils.parametrizations import spectral_norm

        from evogan_gan.image_layers import Image, Logits, materialise, skeleton

        z, h, pixels = self.options.latent_size, self.options.hidden, math.prod(self.shape)

        def layers() -> nn.Module:
            if role == "generator":
                return nn.Sequential(
                    nn.Linear(z, h), nn.LeakyReLU(0.2),
                    nn.Linear(h, h), nn.LeakyReLU(0.2),
                    nn.Linear(h, pixels), nn.Tanh(),
                    Image(self.shape),
                )  # fmt: skip
            sn = spectral_norm if self.options.spectral_norm else (lambda layer: layer)
            return nn.Sequential(
                nn.Flatten(),
                sn(nn.Linear(pixels, h)), nn.LeakyReLU(0.2),
                sn(nn.Linear(h, h)), nn.LeakyReLU(0.2),
                sn(nn.Linear(h, 1)),
                Logits(),
            )  # fmt: skip

        net = skeleton((self.name, role, self.options.model_dump_json()), layers)
        return materialise(net, generator, dcgan=False)


# --------------------------------------------------------------------------------------------- DCGAN
class ConvOptions(ComponentOptions):
    latent_size: int = Field(100, ge=1, description="length of the noise vector z (shape z x 1 x 1)")
    ngf: int = Field(64, ge=1, description="generator width: feature maps of its last hidden layer")
    ndf: int = Field(64, ge=1, description="discriminator width: feature maps of its first layer")


class Dcgan64(Networks[ConvOptions]):
    name: ClassVar[str] = "dcgan64"
    description: ClassVar[str] = "DCGAN pair for 64x64 images (1 or 3 channels): z 100, ngf = ndf = 64, BN"
    Options: ClassVar[type[ConvOptions]] = ConvOptions
    size: ClassVar[int] = 64
    start: ClassVar[int] = 4  # the side of the first (generator) and last (discriminator) feature maps

    def latent_shape(self) -> tuple[int, ...]:
        return (self.options.latent_size, 1, 1)

    def check(self, sample_shape: tuple[int, ...]) -> None:
        _check_image(self.name, sample_shape, self.size, (1, 3))

    def build(self, role: Role, sample_shape: tuple[int, ...], *, generator: torch.Generator) -> nn.Module:
        from evogan_gan.image_layers import dcgan_discriminator, dcgan_generator, materialise, skeleton

        self.check(sample_shape)
        channels, o = sample_shape[0], self.options

        def layers() -> nn.Module:
            if role == "generator":
                return dcgan_generator(o.latent_size, o.ngf, channels, self.size, self.start)
            return dcgan_discriminator(o.ndf, channels, self.size, self.start)

        net = skeleton((self.name, role, channels, o.model_dump_json()), layers)
        return materialise(net, generator, dcgan=True)


class Conv32(Dcgan64):
    name: ClassVar[str] = "conv32"
    description: ClassVar[str] = "DCGAN-like pair for 32x32 images such as CIFAR-10: 4x4 start, 3 up-convs"
    size: ClassVar[int] = 32


class Conv28(Dcgan64):
    name: ClassVar[str] = "conv28"
    description: ClassVar[str] = "DCGAN-like pair for 28x28 images such as MNIST: 7x7 start, 2 up-convs"
    size: ClassVar[int] = 28
    start: ClassVar[int] = 7


@hookimpl
def evogan_register_networks(register: Register) -> None:
    for networks in (MnistMlp, Dcgan64, Conv32, Conv28):
        register(networks)
