"""The layers of :mod:`evogan_gan.image_networks`: module classes and builders need torch when
defined, so they live here and are imported when a network is built, not when a recipe is read."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Hashable

import torch
from torch import nn
from torch.nn.utils import parametrize
from torch.nn.utils.parametrizations import _SpectralNorm  # its power iterations, run at build

#: Power iterations run on freshly drawn weights, as spectral norm's own constructor does.
_INIT_POWER_ITERATIONS = 15


# --------------------------------------------------------------------------------------------- init
_SKELETONS: dict[Hashable, nn.Module] = {}


def skeleton(key: Hashable, build: Callable[[], nn.Module]) -> nn.Module:
    """A fresh copy of the module ``build`` returns, built once per ``key`` in this process.

    A cell builds networks every generation (each neighbour copy it adopts), and registering spectral norm
    costs a power iteration and a forward per layer; a deep copy of the skeleton costs about a millisecond.
    ``materialise`` then draws every value, so the skeleton's own are never used. It is built on the CPU,
    not the meta device: on meta, spectral norm's first ``normal_`` imports ``torch._dynamo`` (seconds, once
    per process) and each of its operations runs through Python references (0.1-0.6 s per layer, issue
    39). Its initialisation draws from a fork of the global RNG, which it leaves as it was.
    """
    if key not in _SKELETONS:
        with torch.random.fork_rng(devices=[]), torch.device("cpu"):
            _SKELETONS[key] = build()
    return copy.deepcopy(_SKELETONS[key])


def materialise(module: nn.Module, generator: torch.Generator, *, dcgan: bool) -> nn.Module:
    """Allocate a copy of a skeleton on the generator's device and draw all its parameters from it.

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
                weight = trainable_weight(layer)
                if dcgan:
                    nn.init.normal_(weight, 0.0, 0.02, generator=generator)
                    if layer.bias is not None:
                        nn.init.zeros_(layer.bias)
                else:
                    bound = 1.0 / math.sqrt(weight[0].numel())
                    nn.init.uniform_(weight, -bound, bound, generator=generator)
                    if layer.bias is not None:
                        nn.init.uniform_(layer.bias, -bound, bound, generator=generator)
                if parametrize.is_parametrized(layer, "weight"):
                    seed_power_iteration(layer, generator)
    return module


def trainable_weight(layer: nn.Module) -> torch.Tensor:
    """The tensor the optimizer updates: ``parametrizations.weight.original`` under spectral norm."""
    if parametrize.is_parametrized(layer, "weight"):
        return layer.get_parameter("parametrizations.weight.original")
    return layer.get_parameter("weight")


def seed_power_iteration(layer: nn.Module, generator: torch.Generator) -> None:
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
    sn = parametrizations[0]
    if len(parametrizations) == 1 and isinstance(sn, _SpectralNorm):
        # Spectral norm alone: its power iterations on the weight matrix, without the normalised weight that
        # each access to ``layer.weight`` also computes (15 of them were most of a build). The same
        # operations on u and v as the accesses below run, so the same values.
        original = trainable_weight(layer)
        if original.ndim > 1:
            sn._power_method(sn._reshape_weight_to_matrix(original), _INIT_POWER_ITERATIONS * sn.n_power_iterations)
        return
    training = layer.training
    layer.train()
    for _ in range(_INIT_POWER_ITERATIONS):  # each access in train mode runs one power iteration
        _ = layer.weight
    layer.train(training)


class Logits(nn.Module):
    """Flattens a discriminator's (N, 1, ...) output to one logit per sample."""

    per_sample = True  # acts on each sample alone (stacked training runs it on all rows at once)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(x.shape[0])


class Image(nn.Module):
    """Reshapes flat generator output to images."""

    per_sample = True  # acts on each sample alone (stacked training runs it on all rows at once)

    def __init__(self, shape: tuple[int, ...]) -> None:
        super().__init__()
        self.shape = shape

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(x.shape[0], *self.shape)


class Noise(nn.Module):
    """Accepts flat (N, z) noise as well as (N, z, 1, 1) for the conv generators."""

    per_sample = True  # acts on each sample alone (stacked training runs it on all rows at once)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return z.reshape(z.shape[0], -1, 1, 1)


# --------------------------------------------------------------------------------------------- DCGAN
def dcgan_generator(latent: int, width: int, channels: int, size: int, start: int = 4) -> nn.Sequential:
    """ConvT z -> ``start`` x ``start`` (4 for 32 and 64, 7 for 28), then halve the maps and double the
    side until ``size``; the last hidden layer holds ``width`` maps."""
    mult = size // (2 * start)
    layers: list[nn.Module] = [
        Noise(),
        nn.ConvTranspose2d(latent, width * mult, start, 1, 0, bias=False),
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


def dcgan_discriminator(width: int, channels: int, size: int, start: int = 4) -> nn.Sequential:
    """The mirror image: stride-2 convs halve the side down to ``start``, then a ``start`` x ``start``
    conv to one logit."""
    layers: list[nn.Module] = [nn.Conv2d(channels, width, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, True)]
    mult, side = 1, size // 2
    while side > start:
        layers += [
            nn.Conv2d(width * mult, width * mult * 2, 4, 2, 1, bias=False),
            nn.BatchNorm2d(width * mult * 2),
            nn.LeakyReLU(0.2, True),
        ]
        mult, side = mult * 2, side // 2
    layers += [nn.Conv2d(width * mult, 1, start, 1, 0, bias=False), Logits()]
    return nn.Sequential(*layers)


__all__ = [
    "Image",
    "Logits",
    "Noise",
    "dcgan_discriminator",
    "dcgan_generator",
    "materialise",
    "seed_power_iteration",
    "trainable_weight",
]
