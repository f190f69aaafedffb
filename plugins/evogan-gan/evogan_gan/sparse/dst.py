"""Dynamic sparse training: global magnitude pruning, random (SET) or gradient (RigL) regrowth.

All functions treat the masked layers of one network as one pool (global thresholds, as the reference's
``global_magnitude_death`` / ``global_gradient_growth``), so per-layer densities drift while the total
active count stays exact. Grown weights start at 0 with a zero first moment; a weight pruned in an
update may be regrown in the same update, and then also restarts from 0 (the reference zeroes pruned
weights before growing). Their second moment (``moments="layer"``) starts at the mean of their layer's
active weights: Adam's bias correction is per tensor (about 1 once a layer has trained), so from a zero
second moment a grown weight's first step is (1 - beta1) / sqrt(1 - beta2) learning rates (16 at betas
(0.5, 0.999), still about 3 after 100 steps) where a settled weight's is about one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Literal

import torch

from evogan_gan.sparse.masks import active_count, reset_positions

Growth = Literal["random", "gradient"]
Moments = Literal["layer", "zero"]
#: Per-element optimizer state holding a running mean of squared gradients (Adam/AdamW, AMSGrad, RMSprop).
SECOND_MOMENTS = ("exp_avg_sq", "max_exp_avg_sq", "square_avg")


def cosine_fraction(step: int, total_steps: int, start: float = 0.5, end: float = 0.005) -> float:
    """Cosine decay from ``start`` at step 0 to ``end`` at ``total_steps``, constant afterwards.

    Same curve as ``CosineAnnealingLR`` (the reference's ``CosineDecay``) over one half period; clamped so
    a run longer than the horizon does not climb back up.
    """
    progress = min(max(step, 0), total_steps) / total_steps if total_steps > 0 else 1.0
    return end + (start - end) * (1 + math.cos(math.pi * progress)) / 2


def _flat(tensors: Mapping[str, torch.Tensor], names: list[str]) -> torch.Tensor:
    return torch.cat([tensors[name].reshape(-1) for name in names])


def _split(flat: torch.Tensor, like: Mapping[str, torch.Tensor], names: list[str]) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    offset = 0
    for name in names:
        n = like[name].numel()
        out[name] = flat[offset : offset + n].view(like[name].shape).clone()
        offset += n
    return out


def prune_magnitude(
    params: Mapping[str, torch.Tensor], masks: Mapping[str, torch.Tensor], count: int
) -> dict[str, torch.Tensor]:
    """New masks with the ``count`` active weights of smallest |w| (over all layers) switched off."""
    names = list(masks)
    if count <= 0:
        return {name: masks[name].clone() for name in names}
    active = active_count(masks)
    if count > active:
        raise ValueError(f"cannot prune {count} of {active} active weights")
    scores = _flat(
        {n: torch.where(masks[n], params[n].detach().abs().float(), torch.inf) for n in names}, names
    )
    flat = _flat(masks, names).clone()
    flat[torch.topk(scores, count, largest=False).indices] = False
    return _split(flat, masks, names)


def grow(
    params: Mapping[str, torch.Tensor],
    masks: Mapping[str, torch.Tensor],
    count: int,
    *,
    growth: Growth,
    generator: torch.Generator,
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """``(new masks, grown positions)`` with ``count`` inactive positions switched on.

    ``gradient`` ranks inactive positions by |grad| of the latest step (RigL); a parameter without a
    gradient scores 0 there. ``random`` draws them uniformly from ``generator`` (SET).
    """
    names = list(masks)
    if count <= 0:
        return ({n: masks[n].clone() for n in names}, {n: torch.zeros_like(masks[n]) for n in names})
    inactive = sum(masks[n].numel() for n in names) - active_count(masks)
    if count > inactive:
        raise ValueError(f"cannot grow {count} weights: only {inactive} are inactive")
    scores: dict[str, torch.Tensor] = {}
    for name in names:
        mask = masks[name]
        if growth == "gradient":
            grad = params[name].grad
            score = grad.detach().abs().float() if grad is not None else torch.zeros(mask.shape)
        elif growth == "random":
            score = torch.rand(mask.shape, generator=generator, device=generator.device)
        else:
            raise ValueError(f"unknown growth {growth!r}")
        scores[name] = torch.where(mask, -torch.inf, score.to(mask.device))
    flat_grown = torch.zeros(
        sum(masks[n].numel() for n in names), dtype=torch.bool, device=masks[names[0]].device
    )
    flat_grown[torch.topk(_flat(scores, names), count).indices] = True
    grown = _split(flat_grown, masks, names)
    return {n: masks[n] | grown[n] for n in names}, grown


@torch.no_grad()
def seed_second_moments(
    params: Mapping[str, torch.Tensor],
    grown: Mapping[str, torch.Tensor],
    masks: Mapping[str, torch.Tensor],
    optimizer: torch.optim.Optimizer | None,
) -> None:
    """Give each grown position the mean second moment of its layer's other active weights (none there:
    left at 0), so its first optimizer steps are the size of its neighbours'."""
    if optimizer is None:
        return
    for name, where in grown.items():
        state = optimizer.state.get(params[name], {})
        others = masks[name] & ~where
        for key in SECOND_MOMENTS:
            value = state.get(key)
            if isinstance(value, torch.Tensor) and value.shape == where.shape and bool(others.any()):
                value.masked_fill_(where, float(value[others].mean()))


def _restart(
    params: Mapping[str, torch.Tensor],
    grown: Mapping[str, torch.Tensor],
    masks: Mapping[str, torch.Tensor],
    reset: Mapping[str, torch.Tensor],
    optimizer: torch.optim.Optimizer | None,
    moments: Moments,
) -> None:
    """Zero the ``reset`` positions (weights and optimizer state), then seed the grown ones' moments."""
    reset_positions(params, reset, optimizer)
    if moments == "layer":
        seed_second_moments(params, grown, masks, optimizer)


def prune_and_grow(
    params: Mapping[str, torch.Tensor],
    masks: Mapping[str, torch.Tensor],
    fraction: float,
    *,
    growth: Growth,
    generator: torch.Generator,
    optimizer: torch.optim.Optimizer | None = None,
    moments: Moments = "layer",
) -> tuple[dict[str, torch.Tensor], int]:
    """One DST update: prune ``round(fraction * active)`` by magnitude, regrow as many; returns
    ``(new masks, number replaced)``. Weights and optimizer state are updated in place."""
    masks = {n: m.to(params[n].device) for n, m in masks.items()}  # a mask restored on the CPU meets CUDA weights
    count = round(fraction * active_count(masks))
    pruned = prune_magnitude(params, masks, count)
    new, grown = grow(params, pruned, count, growth=growth, generator=generator)
    _restart(params, grown, new, {n: grown[n] | ~new[n] for n in new}, optimizer, moments)
    return new, count


def resize(
    params: Mapping[str, torch.Tensor],
    masks: Mapping[str, torch.Tensor],
    target: int,
    *,
    growth: Growth,
    generator: torch.Generator,
    optimizer: torch.optim.Optimizer | None = None,
    moments: Moments = "layer",
) -> dict[str, torch.Tensor]:
    """Masks with exactly ``target`` active weights: grow (``growth``) or prune by global magnitude."""
    active = active_count(masks)
    if target > active:
        new, grown = grow(params, masks, target - active, growth=growth, generator=generator)
        _restart(params, grown, new, grown, optimizer, moments)
        return new
    new = prune_magnitude(params, masks, active - target)
    reset_positions(params, {n: ~new[n] for n in new}, optimizer)
    return new


__all__ = [
    "SECOND_MOMENTS",
    "Growth",
    "Moments",
    "cosine_fraction",
    "grow",
    "prune_and_grow",
    "prune_magnitude",
    "resize",
    "seed_second_moments",
]
