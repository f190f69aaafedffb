"""SNGAN's "standard CNN" pair for 32x32 images (Miyato et al. 2018, Table 3; CIFAR-10 / STL-10 at 32x32).

Not the SNGAN ResNet of ADAPT's results: the standard CNN is about 4x cheaper per sample, which a CPU can afford,
and keeps what the balance ratio depends on, spectral norm on every D layer and raw hinge-loss logits. Masks of D
apply to ``parametrizations.weight.original``, as the reference masks ``weight_orig``. The networks are built on
the meta device, then their weights (Xavier-uniform) and power-iteration vectors are drawn from the caller's
``torch.Generator``; the global RNG is never touched.
"""

from __future__ import annotations

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
        from evogan_gan.image_layers import skeleton
        from evogan_gan.sngan_layers import materialise, sngan_discriminator, sngan_generator

        self.check(sample_shape)
        o, channels = self.options, sample_shape[0]

        def layers() -> nn.Module:
            if role == "generator":
                return sngan_generator(o.latent_size, o.ngf, channels)
            return sngan_discriminator(o.ndf, channels, o.leak, o.spectral_norm)

        net = skeleton((self.name, role, channels, o.model_dump_json()), layers)
        return materialise(net, generator)


@hookimpl
def evogan_register_networks(register: Register) -> None:
    register(Sngan32)
