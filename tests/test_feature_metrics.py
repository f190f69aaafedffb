"""KID, precision, recall, density and coverage: by hand on tiny sets, against torch-fidelity's reference
code on random ones, and inside the classifier metric's scores."""

from __future__ import annotations

import math

import pytest
import torch
from torch_fidelity.metric_kid import kid_features_to_metric
from torch_fidelity.metric_prc import prc_features_to_metric

from evogan.builtin.gan import feature_metrics
from evogan.builtin.gan.image_metrics import ClassifierMetric


def test_kid_by_hand_on_two_points() -> None:
    # d = 1, x = y = {0, 1}: k(0,0) = k(0,1) = 1, k(1,1) = 8. Unbiased: k_xx and k_yy off the diagonal are
    # 1 each; k_xy's mean is (1 + 1 + 1 + 8) / 4 = 2.75; MMD^2 = 1 + 1 - 2 x 2.75 = -3.5
    points = torch.tensor([[0.0], [1.0]])
    assert feature_metrics.kid(points, points) == (pytest.approx(-3.5), 0.0)


def test_kid_matches_torch_fidelity_on_whole_sets_and_averages_subsets() -> None:
    draw = torch.Generator().manual_seed(0)
    real, fake = torch.randn(200, 16, generator=draw), 1.3 * torch.randn(200, 16, generator=draw) + 0.2
    reference = kid_features_to_metric(
        fake, real, kid_subsets=1, kid_subset_size=200, kid_degree=3, kid_gamma=None, kid_coef0=1,
        kid_kernel="poly", rng_seed=0, verbose=False,
    )  # fmt: skip
    mean, spread = feature_metrics.kid(real, fake)
    assert mean == pytest.approx(reference["kernel_inception_distance_mean"], rel=1e-5) and spread == 0.0
    same = torch.randn(200, 16, generator=draw)  # the real distribution again: near 0, far below the fake's
    assert abs(feature_metrics.kid(real, same)[0]) < mean / 5
    subsets = feature_metrics.kid(real, fake, subsets=20, subset_size=50)
    assert subsets[1] > 0 and subsets == feature_metrics.kid(real, fake, subsets=20, subset_size=50)  # seeded
    with pytest.raises(ValueError, match="at least 2 samples"):
        feature_metrics.kid(real, fake[:1])


def test_kid_memo_gives_the_same_values_and_fills_once() -> None:
    draw = torch.Generator().manual_seed(2)
    real = torch.randn(120, 8, generator=draw)
    memo: dict[tuple[int, ...], feature_metrics.KernelSums] = {}
    for n in (60, 120, 200, 60):  # fakes fewer than, as many as and more than the reals; then again
        fake = torch.randn(n, 8, generator=draw) + 0.3
        assert feature_metrics.kid(real, fake, subsets=5, subset_size=50, memo=memo) == feature_metrics.kid(
            real, fake, subsets=5, subset_size=50
        )
    assert len(memo) == 15  # five real subsets per fake count; the repeated count found its sums there
    memo_values = {key: float(value[0]) for key, value in memo.items()}
    feature_metrics.kid(real, torch.randn(60, 8, generator=draw), subsets=5, subset_size=50, memo=memo)
    assert {key: float(value[0]) for key, value in memo.items()} == memo_values


def test_precision_recall_density_coverage_by_hand() -> None:
    # reals 0, 1, 2, 3 on a line, k = 1: every real's ball has radius 1 (strictly inside counts). The fake at
    # 0.5 lies in the balls of reals 0 and 1; the fake at 10 in none. The fakes' own radius is 9.5.
    real = torch.tensor([[0.0], [1.0], [2.0], [3.0]])
    fake = torch.tensor([[0.5], [10.0]])
    scores = feature_metrics.prdc(real, fake, k=1)
    assert scores == {"precision": 0.5, "recall": 1.0, "density": 1.0, "coverage": 0.5}
    with pytest.raises(ValueError, match="need more than 2 samples"):
        feature_metrics.prdc(real, fake, k=2)


def test_precision_and_recall_match_torch_fidelity() -> None:
    draw = torch.Generator().manual_seed(1)
    real, fake = torch.randn(300, 8, generator=draw), 0.7 * torch.randn(250, 8, generator=draw) + 0.3
    reference = prc_features_to_metric(
        fake, real, prc_neighborhood=3, prc_batch_size=10000, save_cpu_ram=False, verbose=False
    )
    ours = feature_metrics.prdc(real, fake, k=3)
    assert ours["precision"] == pytest.approx(reference["precision"], abs=1e-6)
    assert ours["recall"] == pytest.approx(reference["recall"], abs=1e-6)
    known = feature_metrics.prdc(real, fake, k=3, real_radii=feature_metrics.nearest_radii(real, 3))
    assert known == ours


def _classifier(**options: object) -> ClassifierMetric:
    metric = ClassifierMetric(ClassifierMetric.Options(samples=60, **options))

    class Digits:  # 60 noise images stand in for the data: the metric only needs their shape
        sample_shape = (1, 28, 28)

        def __len__(self) -> int:
            return 60

        def sample(self, count: int, *, generator: torch.Generator) -> torch.Tensor:
            return torch.rand(count, 1, 28, 28, generator=generator) * 2 - 1

    metric.prepare(Digits(), torch.device("cpu"), generator=torch.Generator().manual_seed(0))  # type: ignore[arg-type]
    return metric


def test_the_classifier_metric_reports_them_beside_fid_and_options_turn_them_off() -> None:
    samples = torch.rand(40, 1, 28, 28, generator=torch.Generator().manual_seed(3)) * 2 - 1
    scores = _classifier().score(samples)
    assert {"fid", "kid", "kid_std", "precision", "recall", "density", "coverage"} <= scores.keys()
    assert all(math.isfinite(scores[k]) for k in ("kid", "precision", "recall", "density", "coverage"))
    plain = _classifier(kid_subsets=0, nearest_k=0).score(samples)
    assert plain.keys() == {"fid", "tvd", "classes_covered"} and plain["fid"] == pytest.approx(scores["fid"])
    diverged = _classifier().score(torch.full((4, 1, 28, 28), float("nan")))
    assert diverged["kid"] == float("inf") and diverged["coverage"] == 0.0
