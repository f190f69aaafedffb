"""Metrics on feature sets that separate fidelity from diversity: KID (Binkowski et al. 2018), improved
precision and recall (Kynkaanniemi et al. 2019) and density and coverage (Naeem et al. 2020).

Each compares generated features against the real reference features a metric keeps; all work in float64
on the features' device, with distances in chunks so memory stays bounded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from evogan.lazy import lazy

if TYPE_CHECKING:
    import torch
else:
    torch = lazy("torch", globals())

CHUNK = 4096  # rows of a distance matrix computed at once


# One real subset's kernel sums, (sum of k_xx, sum of its diagonal): the same on every score of a run
KernelSums = tuple["torch.Tensor", "torch.Tensor"]


def kid(
    real: torch.Tensor,
    fake: torch.Tensor,
    *,
    subsets: int = 100,
    subset_size: int = 1000,
    memo: dict[tuple[int, ...], KernelSums] | None = None,
) -> tuple[float, float]:
    """Kernel Inception Distance: the unbiased MMD^2 with the kernel ``(x.y / d + 1)^3``, mean and standard
    deviation over ``subsets`` random subsets of ``subset_size`` (fewer when either set is smaller: then every
    subset is the whole set and one is enough). Subsets come from a fixed seed, so scores are repeatable.

    ``memo``: a dict kept with ``real`` across calls. The subsets are drawn the same way on every call with
    the same sizes, so the real side's kernel sums are computed once and then looked up (a run scores its
    mixtures against one reference hundreds of times); the values are the same to the last bit."""
    real, fake = real.double(), fake.to(real.device).double()  # scored where the reference lives
    size = min(subset_size, real.shape[0], fake.shape[0])
    if size < 2:
        raise ValueError(f"KID needs at least 2 samples per set, got {real.shape[0]} and {fake.shape[0]}")
    whole = size == real.shape[0] == fake.shape[0]
    draw = torch.Generator().manual_seed(0)
    memo = {} if memo is None else memo
    # when every subset holds the whole fake set, its sums once
    fake_sums = _kernel_sums(fake, fake) if size == fake.shape[0] else None
    values = []
    for index in range(1 if whole else subsets):
        x = real if size == real.shape[0] else real[torch.randperm(real.shape[0], generator=draw)[:size]]
        y = fake if fake_sums is not None else fake[torch.randperm(fake.shape[0], generator=draw)[:size]]
        key = (real.shape[0], fake.shape[0], size, index)
        if key not in memo:
            memo[key] = _kernel_sums(x, x)
        values.append(_mmd2(memo[key], fake_sums if fake_sums is not None else _kernel_sums(y, y), x, y))
    spread = torch.tensor(values, dtype=torch.float64)
    return float(spread.mean()), float(spread.std(unbiased=False)) if len(values) > 1 else 0.0


def _kernel(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a @ b.T / a.shape[1] + 1) ** 3


def _kernel_sums(a: torch.Tensor, b: torch.Tensor) -> KernelSums:
    k = _kernel(a, b)
    return k.sum(), k.diagonal().sum()


def _mmd2(xx: KernelSums, yy: KernelSums, x: torch.Tensor, y: torch.Tensor) -> float:
    m = x.shape[0]
    off_diagonal = (xx[0] - xx[1] + yy[0] - yy[1]) / (m * (m - 1))
    return float(off_diagonal - 2 * _kernel(x, y).mean())


def distances(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Euclidean distances between the rows of ``a`` and ``b`` (float64)."""
    a, b = a.double(), b.double()
    return torch.cat([torch.cdist(part, b) for part in a.split(CHUNK)]) if a.shape[0] else a.new_zeros(0, b.shape[0])


def nearest_radii(features: torch.Tensor, k: int) -> torch.Tensor:
    """Each sample's distance to its ``k``-th nearest neighbour in its own set (itself excluded)."""
    if features.shape[0] <= k:
        raise ValueError(f"{k} nearest neighbours need more than {k} samples, got {features.shape[0]}")
    every = features.double()
    return torch.cat([torch.cdist(part, every).kthvalue(k + 1, dim=1).values for part in every.split(CHUNK)])


def prdc(
    real: torch.Tensor, fake: torch.Tensor, *, k: int = 5, real_radii: torch.Tensor | None = None
) -> dict[str, float]:
    """Precision (the share of fakes inside some real sample's k-NN ball), recall (the share of reals inside
    some fake's ball), density (balls containing each fake, over k, averaged) and coverage (the share of
    reals whose own ball holds a fake). ``real_radii``: the reals' k-NN radii, when already known."""
    fake = fake.to(real.device)  # scored where the reference lives (kept once; the fakes are new each call)
    radii_real = nearest_radii(real, k) if real_radii is None else real_radii.to(real.device).double()
    radii_fake = nearest_radii(fake, k)
    between = distances(fake, real)  # (fakes, reals)
    inside = between < radii_real.unsqueeze(0)  # strict, as the reference implementation (prdc)
    return {
        "precision": float(inside.any(dim=1).double().mean()),
        "recall": float((between < radii_fake.unsqueeze(1)).any(dim=0).double().mean()),
        "density": float(inside.double().sum() / (k * fake.shape[0])),
        "coverage": float((between.min(dim=0).values < radii_real).double().mean()),
    }


__all__ = ["distances", "kid", "nearest_radii", "prdc"]
