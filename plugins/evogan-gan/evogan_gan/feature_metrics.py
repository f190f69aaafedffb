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
CROSS_MAX = 1 << 24  # KID: the most entries (float64) of an all-real by all-fake kernel kept for its subsets


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
    mixtures against one reference hundreds of times); the values are the same to the last bit. The cross
    kernel of every real with every fake is computed once per call when it is no larger than the subsets'
    together (the demo's 1000 reals, 500 fakes), and each subset takes its rows from it."""
    real, fake = real.double(), fake.to(real.device).double()  # scored where the reference lives
    size = min(subset_size, real.shape[0], fake.shape[0])
    if size < 2:
        raise ValueError(f"KID needs at least 2 samples per set, got {real.shape[0]} and {fake.shape[0]}")
    whole = size == real.shape[0] == fake.shape[0]
    draw = torch.Generator().manual_seed(0)
    memo = {} if memo is None else memo
    # when every subset holds the whole fake set, its sums once
    fake_sums = _kernel_sums(fake, fake) if size == fake.shape[0] else None
    count = 1 if whole else subsets
    # The cross kernel of every real with every fake, once, when it has no more entries than the subsets'
    # together: each subset's is then gathered from it (the same entries, so the same means to the bit).
    cross = _kernel(real, fake) if real.shape[0] * fake.shape[0] <= min(count * size * size, CROSS_MAX) else None
    values = []
    for index in range(count):
        rows = None if size == real.shape[0] else torch.randperm(real.shape[0], generator=draw)[:size]
        cols = None if fake_sums is not None else torch.randperm(fake.shape[0], generator=draw)[:size]
        key = (real.shape[0], fake.shape[0], size, index)
        if key not in memo:
            x = _take(real, rows)
            memo[key] = _kernel_sums(x, x)
        y = _take(fake, cols)
        yy = fake_sums if fake_sums is not None else _kernel_sums(y, y)
        if cross is None:
            xy = _kernel(_take(real, rows), y)
        else:
            xy = _take(cross, rows)
            xy = xy if cols is None else xy[:, cols]
        values.append(_mmd2(memo[key], yy, xy.mean(), size))
    spread = torch.tensor(values, dtype=torch.float64)
    return float(spread.mean()), float(spread.std(unbiased=False)) if len(values) > 1 else 0.0


def _take(a: torch.Tensor, rows: torch.Tensor | None) -> torch.Tensor:
    return a if rows is None else a[rows]


def _kernel(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    # (a b^T / d + 1)^3, its steps in place: the same operations, without three temporaries
    return (a @ b.T).div_(a.shape[1]).add_(1).pow_(3)


def _kernel_sums(a: torch.Tensor, b: torch.Tensor) -> KernelSums:
    k = _kernel(a, b)
    return k.sum(), k.diagonal().sum()


def _mmd2(xx: KernelSums, yy: KernelSums, xy: torch.Tensor, m: int) -> float:
    """The unbiased MMD^2 of two sets of ``m``: their kernel sums and the mean of the cross kernel."""
    off_diagonal = (xx[0] - xx[1] + yy[0] - yy[1]) / (m * (m - 1))
    return float(off_diagonal - 2 * xy)


def distances(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Euclidean distances between the rows of ``a`` and ``b`` (float64)."""
    a, b = a.double(), b.double()
    if a.shape[0] <= CHUNK:  # one part: no copy through torch.cat
        return torch.cdist(a, b)
    return torch.cat([torch.cdist(part, b) for part in a.split(CHUNK)])


def nearest_radii(features: torch.Tensor, k: int) -> torch.Tensor:
    """Each sample's distance to its ``k``-th nearest neighbour in its own set (itself excluded)."""
    if features.shape[0] <= k:
        raise ValueError(f"{k} nearest neighbours need more than {k} samples, got {features.shape[0]}")
    every = features.double()
    # the (k+1)-th smallest of each row (itself, at distance 0, is the first): top-k finds the same value as
    # kthvalue, at a quarter of its time on a score's 500 x 500
    parts = [torch.cdist(part, every).topk(k + 1, dim=1, largest=False).values[:, k] for part in every.split(CHUNK)]
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def prdc(
    real: torch.Tensor, fake: torch.Tensor, *, k: int = 5, real_radii: torch.Tensor | None = None
) -> dict[str, float]:
    """Precision (the share of fakes inside some real sample's k-NN ball), recall (the share of reals inside
    some fake's ball), density (balls containing each fake, over k, averaged) and coverage (the share of
    reals whose own ball holds a fake). ``real_radii``: the reals' k-NN radii, when already known (a metric
    keeps them with its reference statistics, so a score computes only the fakes' side)."""
    fake = fake.to(real.device)  # scored where the reference lives (kept once; the fakes are new each call)
    radii_real = nearest_radii(real, k) if real_radii is None else real_radii.to(real.device).double()
    radii_fake = nearest_radii(fake, k)
    between = distances(fake, real)  # (fakes, reals)
    # Shares as whole counts over a count: the float64 means of 0/1 the definitions give, to the last bit
    balls = (between < radii_real.unsqueeze(0)).sum(dim=1)  # strict, as the reference implementation (prdc)
    fakes, reals = fake.shape[0], real.shape[0]
    return {
        "precision": int(balls.count_nonzero()) / fakes,
        "recall": int((between < radii_fake.unsqueeze(1)).any(dim=0).count_nonzero()) / reals,
        "density": int(balls.sum()) / (k * fakes),
        "coverage": int((between.min(dim=0).values < radii_real).count_nonzero()) / reals,
    }


__all__ = ["distances", "kid", "nearest_radii", "prdc"]
