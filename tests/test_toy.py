"""The toy problem's mode-coverage metric on hand-made sample sets, the expected values worked out by hand.

The 8-mode ring has centres at radius 2, angle k * 45 degrees, std 0.02: a sample is high quality within
3 std (0.06) of a centre. A mode is covered when it holds at least a fifth of its due (n / 8 samples).
``tvd`` compares the shares of the 8 modes plus a junk bucket with (1/8, ..., 1/8, 0).
"""

from __future__ import annotations

import math

import pytest
import torch
from evogan_gan.toy import GaussianGrid, GaussianRing, ModeCoverage

CPU = torch.device("cpu")
RING = [(2 * math.cos(k * math.pi / 4), 2 * math.sin(k * math.pi / 4)) for k in range(8)]


def coverage(dataset: GaussianRing | GaussianGrid) -> ModeCoverage:
    metric = ModeCoverage(ModeCoverage.Options())
    metric.prepare(dataset.load(CPU), CPU, generator=torch.Generator().manual_seed(0))
    return metric


def ring_scores(points: list[tuple[float, float]]) -> dict[str, float]:
    return coverage(GaussianRing(GaussianRing.Options())).score(torch.tensor(points))


def assert_scores(got: dict[str, float], *, modes: float, hq: float, tvd: float) -> None:
    assert got["modes_covered"] == modes
    assert got["hq_fraction"] == pytest.approx(hq, abs=1e-6)
    assert got["tvd"] == pytest.approx(tvd, abs=1e-6)


def test_every_mode_hit_evenly_is_perfect() -> None:
    # Two per mode, one on the centre and one 0.05 off it (inside 0.06): 8 modes, all high quality, and
    # every share is 2/16 = 1/8, the uniform one: TVD 0.
    points = [p for x, y in RING for p in ((x, y), (x + 0.03, y - 0.04))]
    assert_scores(ring_scores(points), modes=8, hq=1.0, tvd=0.0)


def test_one_point() -> None:
    # n = 1 on mode 3: its due is 1/8, a fifth of it 0.025 <= 1, so one mode is covered. Shares: 1 on one
    # mode, 0 on seven. TVD = (|1 - 1/8| + 7 * 1/8) / 2 = 7/8.
    assert_scores(ring_scores([RING[3]]), modes=1, hq=1.0, tvd=7 / 8)


def test_a_lattice_over_the_box_hits_the_four_modes_on_its_points() -> None:
    # The 5 x 5 lattice {-2..2}^2: of the ring's centres only (2,0), (0,2), (-2,0), (0,-2) are lattice
    # points; the diagonal ones (+-1.41, +-1.41) are 0.59 from (1,1). n = 25, due 25/8, a fifth 0.625:
    # the four modes with one point each are covered. HQ 4/25. TVD = (4 * (1/8 - 1/25) + 4 * 1/8 + 21/25) / 2
    # = (0.34 + 0.5 + 0.84) / 2 = 0.84.
    points = [(float(x), float(y)) for x in range(-2, 3) for y in range(-2, 3)]
    assert_scores(ring_scores(points), modes=4, hq=4 / 25, tvd=0.84)


def test_uniform_samples_over_a_box_hit_the_quality_discs_by_their_area() -> None:
    # Uniform on [-3, 3]^2 (area 36): the 8 discs of radius 0.06 lie inside, so a sample is high quality
    # with p = 8 * pi * 0.06^2 / 36 = 0.002513. Each mode then holds about p/8 (n = 200,000: ~63 samples,
    # far below a fifth of its due, 5,000): none covered. With every mode below its 1/8,
    # TVD = (8 * (1/8 - p/8) + (1 - p)) / 2 = 1 - p exactly, whatever the draw.
    n, p = 200_000, 8 * math.pi * 0.06**2 / 36
    samples = torch.rand(n, 2, generator=torch.Generator().manual_seed(1)) * 6 - 3
    got = coverage(GaussianRing(GaussianRing.Options())).score(samples)
    assert got["modes_covered"] == 0
    assert abs(got["hq_fraction"] - p) < 5 * math.sqrt(p * (1 - p) / n)  # five standard errors
    assert got["tvd"] == pytest.approx(1 - got["hq_fraction"], abs=1e-6)


def test_a_share_of_junk() -> None:
    # Three on each centre and 8 at the origin (2 from every centre): n = 32, due 4, a fifth 0.8: all 8
    # covered. HQ 24/32 = 0.75. Shares 3/32 per mode (1/32 short of 1/8) and 8/32 junk:
    # TVD = (8 * 1/32 + 8/32) / 2 = 0.25.
    points = [c for c in RING for _ in range(3)] + [(0.0, 0.0)] * 8
    assert_scores(ring_scores(points), modes=8, hq=0.75, tvd=0.25)


def test_a_collapsed_generator_covers_one_mode() -> None:
    # 93 on mode 0 and one on each other mode: n = 100, due 12.5, a fifth 2.5: only mode 0 is covered.
    # TVD = (|0.93 - 0.125| + 7 * |0.01 - 0.125|) / 2 = (0.805 + 0.805) / 2 = 0.805.
    points = [RING[0]] * 93 + RING[1:]
    assert_scores(ring_scores(points), modes=1, hq=1.0, tvd=0.805)


def test_the_thresholds_are_inclusive() -> None:
    # n = 40: due 5, a fifth exactly 1.0, so a mode holding one sample is covered (>=). A sample 0.059
    # from a centre is high quality, one 0.061 away is not (3 std = 0.06). Shares: mode 0 33/40 = 0.825,
    # the others 1/40 = 0.025: TVD = (0.7 + 7 * 0.1) / 2 = 0.7.
    points = [RING[0]] * 32 + RING[1:] + [(2.059, 0.0)]
    assert_scores(ring_scores(points), modes=8, hq=1.0, tvd=0.7)
    outside = ring_scores([(2.061, 0.0)])
    assert_scores(outside, modes=0, hq=0.0, tvd=1.0)  # all junk: (8 * 1/8 + 1) / 2


def test_every_mode_of_the_grid() -> None:
    # The 25-mode grid (spacing 2, std 0.05: high quality within 0.15), one sample 0.1 off each centre.
    offsets = [-4.0, -2.0, 0.0, 2.0, 4.0]
    points = [(x + 0.1, y) for x in offsets for y in offsets]
    got = coverage(GaussianGrid(GaussianGrid.Options())).score(torch.tensor(points))
    assert_scores(got, modes=25, hq=1.0, tvd=0.0)
