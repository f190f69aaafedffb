"""The exponential moving average of a network's weights, which evaluation uses in its place: the
generator average of StyleGAN2-ADA and StudioGAN (``problem.g_ema``), and ADAPT's sparse one (SEMA,
``sparsity.sema``), which also takes each new mask.

After every step ``avg = decay * avg + (1 - decay) * w`` per parameter; with a new mask the average is first
multiplied by it (pruned positions zero, grown ones start at zero: adapt.md 3.7). Buffers (BatchNorm
statistics) are not averaged: the evaluated copy takes the live network's.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping

import torch
from torch import nn


def start(network: nn.Module) -> dict[str, torch.Tensor]:
    """A new average: a copy of every parameter (already masked)."""
    return {name: p.detach().clone() for name, p in network.named_parameters()}


@torch.no_grad()
def update(
    average: dict[str, torch.Tensor],
    network: nn.Module,
    decay: float,
    new_masks: Mapping[str, torch.Tensor] | None = None,
) -> None:
    """One step of the average; ``new_masks`` when the generator's mask has just changed."""
    for name, p in network.named_parameters():
        avg = average[name]
        if new_masks is not None and name in new_masks:
            avg.mul_(new_masks[name].to(avg.device, avg.dtype))
        avg.mul_(decay).add_(p.detach(), alpha=1 - decay)


@torch.no_grad()
def averaged_copy(network: nn.Module, average: Mapping[str, torch.Tensor]) -> nn.Module:
    """A copy of ``network`` with the averaged weights (for evaluation and sampling; never trained)."""
    clone = copy.deepcopy(network)
    for name, p in clone.named_parameters():
        p.copy_(average[name])
        p.requires_grad_(False)
    return clone


__all__ = ["averaged_copy", "start", "update"]
