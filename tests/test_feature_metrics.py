"""KID, precision, recall, density and coverage: by hand on tiny sets, against torch-fidelity's reference
code on random ones, and inside the classifier metric's scores."""

from __future__ import annotations

import math

import pytest
import torch
from evogan_gan import feature_metrics, image_metrics
from evogan_gan.image_metrics import ClassifierMetric
from torch_fidelity.metric_kid import kid_features_to_metric
from torch_fidelity.metric_prc import prc_features_to_metric


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


def test_the_lazy_score_is_the_fid_at_once_and_the_rest_from_the_same_features(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What the mixture ES scores both candidates on, and the same numbers to the last bit."""
    samples = torch.rand(40, 1, 28, 28, generator=torch.Generator().manual_seed(3)) * 2 - 1
    metric = _classifier()
    full = metric.score(samples)
    forwards, calls = [], []
    features, feature_scores = metric._features, image_metrics.feature_scores
    monkeypatch.setattr(metric, "_features", lambda images: forwards.append(1) or features(images))
    monkeypatch.setattr(image_metrics, "feature_scores", lambda *a: calls.append(1) or feature_scores(*a))
    lazy = metric.score_lazily(samples)
    assert lazy.pending and lazy["fid"] == full["fid"] and not calls
    assert lazy.complete() == full and list(lazy.complete()) == list(full)  # values and order
    assert forwards == [1] and calls == [1]  # one classifier pass; the rest from its features
    diverged = metric.score_lazily(torch.full((4, 1, 28, 28), float("nan")))
    assert not diverged.pending and diverged["kid"] == float("inf")


# The scores as first written (issue 26), each subset's cross kernel and k-NN radii by kthvalue: the faster
# code must give the same values to the last bit (issue 39: the mixture ES scores hundreds of times a run).
def _kid_as_written(real: torch.Tensor, fake: torch.Tensor, subsets: int, subset_size: int) -> tuple[float, float]:
    real, fake = real.double(), fake.double()
    size = min(subset_size, real.shape[0], fake.shape[0])
    whole = size == real.shape[0] == fake.shape[0]
    draw = torch.Generator().manual_seed(0)

    def kernel(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return (a @ b.T / a.shape[1] + 1) ** 3

    values = []
    for _ in range(1 if whole else subsets):
        x = real if size == real.shape[0] else real[torch.randperm(real.shape[0], generator=draw)[:size]]
        y = fake if size == fake.shape[0] else fake[torch.randperm(fake.shape[0], generator=draw)[:size]]
        kxx, kyy = kernel(x, x), kernel(y, y)
        off = (kxx.sum() - kxx.diagonal().sum() + kyy.sum() - kyy.diagonal().sum()) / (size * (size - 1))
        values.append(float(off - 2 * kernel(x, y).mean()))
    spread = torch.tensor(values, dtype=torch.float64)
    return float(spread.mean()), float(spread.std(unbiased=False)) if len(values) > 1 else 0.0


def _prdc_as_written(real: torch.Tensor, fake: torch.Tensor, k: int) -> dict[str, float]:
    def radii(features: torch.Tensor) -> torch.Tensor:
        every = features.double()
        return torch.cdist(every, every).kthvalue(k + 1, dim=1).values

    radii_real, radii_fake = radii(real), radii(fake)
    between = torch.cdist(fake.double(), real.double())
    inside = between < radii_real.unsqueeze(0)
    return {
        "precision": float(inside.any(dim=1).double().mean()),
        "recall": float((between < radii_fake.unsqueeze(1)).any(dim=0).double().mean()),
        "density": float(inside.double().sum() / (k * fake.shape[0])),
        "coverage": float((between.min(dim=0).values < radii_real).double().mean()),
    }


@pytest.mark.parametrize(
    ("reals", "fakes", "dim", "subsets", "size", "k"),
    [
        (1000, 500, 50, 10, 1000, 5),  # the demo's: every real against every fake, once
        (1000, 500, 50, 10, 200, 5),  # subsets of both: each subset's own cross kernel
        (120, 60, 8, 5, 50, 3),  # subsets of both, gathered from the whole cross kernel
        (300, 300, 16, 5, 300, 3),  # one subset: the whole sets
        (50, 500, 10, 20, 30, 2),
    ],
)
def test_scores_are_the_first_written_ones_to_the_last_bit(
    reals: int, fakes: int, dim: int, subsets: int, size: int, k: int
) -> None:
    draw = torch.Generator().manual_seed(reals + fakes)
    memo: dict[tuple[int, ...], feature_metrics.KernelSums] = {}
    real = torch.randn(reals, dim, generator=draw)
    radii = feature_metrics.nearest_radii(real, k)
    assert torch.equal(radii, torch.cdist(real.double(), real.double()).kthvalue(k + 1, dim=1).values)
    for _ in range(2):  # the second with the real side's kernel sums and radii kept
        fake = 1.2 * torch.randn(fakes, dim, generator=draw) + 0.1
        expected = _kid_as_written(real, fake, subsets, size)
        assert feature_metrics.kid(real, fake, subsets=subsets, subset_size=size, memo=memo) == expected
        assert feature_metrics.kid(real, fake, subsets=subsets, subset_size=size) == expected
        expected_prdc = _prdc_as_written(real, fake, k)
        assert feature_metrics.prdc(real.double(), fake, k=k, real_radii=radii) == expected_prdc
        assert feature_metrics.prdc(real, fake, k=k) == expected_prdc
