"""Networks in evaluation mode for a while: what the GAN problem's looped fitness and samples
(:mod:`evogan_gan.problem`) and its batched fitness (:mod:`evogan_gan.stacked_fitness`)
share, below both."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from evogan.lazy import lazy

if TYPE_CHECKING:
    import torch
    from torch import nn
else:  # imported on first use: the problem's module, which imports this one, is read without torch
    torch = lazy("torch", globals())


@contextmanager
def evaluating(*networks: nn.Module) -> Iterator[None]:
    """No gradients and eval mode (BatchNorm uses running statistics), restoring each network's mode."""
    modes = [network.training for network in networks]
    for network in networks:
        network.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        for network, mode in zip(networks, modes, strict=True):
            network.train(mode)


__all__ = ["evaluating"]
