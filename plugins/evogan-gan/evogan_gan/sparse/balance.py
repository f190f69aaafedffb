"""The balance ratio (BR) of Wang et al. 2023, section 2 of adapt.md.

    BR = mean_i [ (fG_i - fD_i) / (r_i - fD_i) ]

over a window of samples taken every ``br_freq`` generator steps, with fD = mean D(G_pre(z)) (the G step's
own logits), fG = mean D(G_post(z)) (same z, after the G update and its mask) and r = mean D(x_real).
BR near 0: D too strong, G cannot close the gap; large BR: D too weak.

Guard (the reference leaves the denominator unguarded): a denominator with |r - fD| < ``eps`` is replaced
by ``eps`` with its sign (+eps at exactly 0), and every per-sample ratio is clipped to [-clip, clip], so
one sample taken while D cannot tell real from fake moves a 100-sample mean by at most clip/100.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from evogan_gan.sparse.defaults import DEFAULT_CLIP, DEFAULT_EPS

if TYPE_CHECKING:
    from torch import nn

    from evogan.adversarial import AdversarialProblem
    from evogan.adversarial.contracts import GeneratorStep



def window_size(da_iters: int, br_freq: int) -> int:
    """Samples kept: the last ``da_iters`` generator steps at one sample every ``br_freq`` (reference)."""
    return max(1, da_iters // br_freq)


def sample_ratio(
    f_g: float, f_d: float, r: float, *, eps: float = DEFAULT_EPS, clip: float = DEFAULT_CLIP
) -> float:
    """One sample's guarded ratio ``(fG - fD) / (r - fD)``."""
    beta = r - f_d
    if abs(beta) < eps:
        beta = math.copysign(eps, beta) if beta != 0 else eps
    return max(-clip, min(clip, (f_g - f_d) / beta))


def balance_ratio(
    window: Sequence[Sequence[float]], *, eps: float = DEFAULT_EPS, clip: float = DEFAULT_CLIP
) -> float:
    """Mean of per-sample ratios over ``window`` of ``(fG, fD, r)`` triples (not a ratio of means)."""
    if not window:
        raise ValueError("balance ratio of an empty window")
    return sum(sample_ratio(f_g, f_d, r, eps=eps, clip=clip) for f_g, f_d, r in window) / len(window)


def push(window: list[list[float]], sample: Sequence[float], size: int) -> None:
    """Append ``sample``; drop the oldest entries beyond ``size`` (a deque kept as a plain list, so it
    survives ``torch.save(weights_only=True)``)."""
    window.append([float(v) for v in sample])
    del window[: max(0, len(window) - size)]


def calibrated_band(history: Sequence[float], width: float, min_width: float) -> tuple[float, float]:
    """The calibrated band ``[c - h, c + h]``: ``c`` the median of ``history`` (the warm-up's window BRs),
    ``h = max(width * |c|, min_width)``. The paper's [0.45, 0.55] is this rule at c = 0.5, width 0.1."""
    if not history:
        raise ValueError("calibrated band from an empty history")
    centre = float(statistics.median(history))
    half = max(width * abs(centre), min_width)
    return centre - half, centre + half


@torch.no_grad()
def measure(
    problem: AdversarialProblem[Any], discriminator: nn.Module, generator: nn.Module, step: GeneratorStep
) -> list[float]:
    """One ``[fG, fD, r]`` sample after a generator step: 1 G forward and 2 D forwards, no backward.

    ``r`` uses the G step's real batch with the current D (the reference re-evaluates the last batch of the
    D phase; in evogan's loop that D is the same network, the batch is the next one).
    """
    fake, real = problem.discriminator_logits(discriminator, generator, step.z, step.real)
    means = torch.stack(
        [fake.float().mean(), step.fake_logits_pre.float().mean().to(fake.device), real.float().mean()]
    )
    return [float(v) for v in means.tolist()]  # one device sync


__all__ = [
    "DEFAULT_CLIP",
    "DEFAULT_EPS",
    "balance_ratio",
    "calibrated_band",
    "measure",
    "push",
    "sample_ratio",
    "window_size",
]
