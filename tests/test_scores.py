"""evogan.scores.LazyMetrics and the mixture ES's use of it: both candidates scored on the objective, only
the kept one's other metrics computed (issue 39)."""

from __future__ import annotations

import pytest
import torch
from test_pairing import centre_cell

from evogan.rng import CellRandom
from evogan.scores import LazyMetrics


def test_the_rest_is_computed_once_and_only_when_needed() -> None:
    calls: list[int] = []

    def rest() -> dict[str, float]:
        calls.append(1)
        return {"fid": 3.0, "kid": 0.5}

    metrics = LazyMetrics({"fid": 3.0}, rest)
    assert metrics["fid"] == 3.0 and metrics.pending and not calls
    assert metrics["kid"] == 0.5 and not metrics.pending and calls == [1]  # an unknown key completes it
    assert dict(metrics) == metrics.complete() == {"fid": 3.0, "kid": 0.5} and calls == [1]
    assert list(LazyMetrics({"fid": 3.0}, rest)) == ["fid", "kid"] and len(LazyMetrics({}, rest)) == 2
    assert "pending" in repr(LazyMetrics({"fid": 3.0}, rest)) and "pending" not in repr(metrics)


def test_known_metrics_are_complete_and_missing_keys_raise() -> None:
    metrics = LazyMetrics({"fid": 1.0})
    assert not metrics.pending and metrics.complete() == {"fid": 1.0}
    with pytest.raises(KeyError):
        _ = metrics["kid"]
    copy = metrics.complete()
    copy["fid"] = 2.0  # complete() hands out a copy
    assert metrics["fid"] == 1.0


def test_the_mixture_es_completes_only_the_kept_candidate(tiny_recipe, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both weight vectors are scored on the same noise and compared on the objective; the record's
    metrics are the kept one's, the dropped one's never computed."""
    cell = centre_cell(tiny_recipe, [])
    scored: list[tuple[int, list[float]]] = []
    completed: list[list[float]] = []

    def evaluate_lazily(networks, weights, *, stream, generator):  # type: ignore[no-untyped-def]
        assert stream == "validation" and len(networks) == 5
        scored.append((generator.initial_seed(), list(weights)))
        objective = -weights[0]  # the more weight on the first member, the better

        def rest() -> dict[str, float]:
            completed.append(list(weights))
            return {"score": objective, "first": weights[0]}

        return LazyMetrics({"score": objective}, rest)

    monkeypatch.setattr(cell.problem, "evaluate_lazily", evaluate_lazily)
    monkeypatch.setattr(cell.problem, "objective", lambda metrics: metrics["score"])
    for generation in range(1, 6):
        metrics = cell._evolve_mixture(CellRandom.for_generation(1, cell.index, generation))
        (seed, current), (same, trial) = scored[-2:]
        assert seed == same  # common random numbers
        kept = trial if -trial[0] < -current[0] else current
        assert completed[-1] == kept and len(completed) == generation  # one completion per step
        assert metrics == {"score": -kept[0], "first": kept[0]}
        assert cell.mixture_ensemble()[2] == pytest.approx(kept)


def test_the_gan_problems_lazy_score_is_its_full_score(tiny_recipe) -> None:
    cell = centre_cell(tiny_recipe, [])
    _, networks, weights = cell.mixture_ensemble()
    for stream in ("validation", "test"):
        noise = torch.Generator().manual_seed(5)
        full = cell.problem.evaluate_on(networks, weights, stream=stream, generator=noise)
        noise = torch.Generator().manual_seed(5)
        lazy = cell.problem.evaluate_lazily(networks, weights, stream=stream, generator=noise)
        assert cell.problem.objective(lazy) == cell.problem.objective(full)
        assert lazy.complete() == full and list(lazy.complete()) == list(full)
