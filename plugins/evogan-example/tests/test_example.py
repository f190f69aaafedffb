"""The example plugin's own tests, written with evogan's test kit (evogan.testing)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from evogan_example import Complete, LinearRank

from evogan import hookimpl
from evogan.testing import check_options, check_selection, check_topology, individuals, run_tiny, write_tiny_recipe


def test_linear_rank_options_and_contract() -> None:
    check_options(LinearRank, {"pressure": 1.8}, invalid=[{"pressure": 2.5}, {"pressure": 0.9}])
    picks = check_selection(LinearRank, {"pressure": 1.8}, losses=[0.5, 0.1, 0.9], k=3)
    assert all(pick.fitness.loss in (0.5, 0.1, 0.9) for pick in picks)


def test_linear_rank_prefers_the_best_by_its_pressure() -> None:
    selection = LinearRank(LinearRank.Options(pressure=2.0))
    population = individuals([0.5, 0.1, 0.9])  # ranks: G1 best, G0 middle, G2 worst
    counts = Counter(ind.uid for ind in selection.select(population, 3000, rng=np.random.default_rng(0)))
    assert counts["0/G2"] == 0  # pressure 2: the worst has weight 2 - 2 = 0
    assert 1800 < counts["0/G1"] < 2200 and 800 < counts["0/G0"] < 1200  # weights 2 : 1 : 0


def test_complete_topology_contract() -> None:
    check_options(Complete, {"cells": 4}, invalid=[{"cells": 0}])
    assert check_topology(Complete, {"cells": 4}) == [(1, 2, 3), (0, 2, 3), (0, 1, 3), (0, 1, 2)]


class Counting:
    """A plugin object registered for one run: counts generation ends per cell."""

    def __init__(self) -> None:
        self.ends: Counter[int] = Counter()

    @hookimpl
    def evogan_generation_end(self, cell: int, record: Any) -> None:
        assert record["cell"] == cell
        self.ends[cell] += 1


def test_both_components_in_a_tiny_run(tmp_path: Path) -> None:
    overrides = [
        'selection={use="linear_rank", pressure=1.8}',
        'topology={use="complete", cells=3}',
        "population.size=2",
    ]
    recipe = write_tiny_recipe(tmp_path, generations=2, overrides=overrides)
    counting = Counting()
    first, second = run_tiny(recipe, counting), run_tiny(recipe)
    assert counting.ends == {0: 2, 1: 2, 2: 2}
    assert (first / "metrics.jsonl").read_bytes() == (second / "metrics.jsonl").read_bytes()
