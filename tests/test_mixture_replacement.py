"""``population.replacement = "mixture"`` (issue 35): the generator offspring replaces the incumbent when the
cell's mixture scores better with it on the validation stream, whatever its loss says; the discriminator
is replaced as ``if_better``."""

from __future__ import annotations

import pytest
from test_pairing import centre_cell
from test_run import metrics as records
from test_run import run

from evogan.rng import CellRandom

MIXTURE = ('population.replacement="mixture"',)


def test_the_generator_that_helps_the_mixture_is_kept_whatever_its_loss(
    tiny_recipe, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The candidate stands for this cell in its mixture (the neighbours' members unchanged), both
    candidates are scored on the same validation noise, and the lower objective wins; losses play no part."""
    cell = centre_cell(tiny_recipe, list(MIXTURE))
    incumbent = cell.best("generator")
    helper = incumbent.clone(cell.problem.make_optimizer)
    helper.fitness.values, incumbent.fitness.values = (9.0,), (0.1,)  # the helper's loss is far worse
    neighbours = {id(cell.evaluated(slots["generator"])) for slots in cell.foreign.values()}
    seen: list[tuple[int, str]] = []

    def evaluate_on(networks, weights, *, stream, generator):  # type: ignore[no-untyped-def]
        own = [n for n in networks if id(n) not in neighbours]
        assert len(own) == 1 and len(networks) == 5 and stream == "validation"
        assert sum(weights) == pytest.approx(1.0)
        seen.append((generator.initial_seed(), "helper" if own[0] is helper.network else "other"))
        return {"score": 1.0 if own[0] is helper.network else 2.0}

    monkeypatch.setattr(cell.problem, "evaluate_on", evaluate_on)
    monkeypatch.setattr(cell.problem, "objective", lambda metrics: metrics["score"])
    rnd = CellRandom.for_generation(1, cell.index, 1)
    assert cell._improves_mixture(helper, incumbent, rnd)
    assert not cell._improves_mixture(incumbent, helper, rnd)
    assert not cell._improves_mixture(incumbent, incumbent, rnd)  # a tie keeps the incumbent
    assert seen[0][0] == seen[1][0] and seen[2][0] == seen[3][0]  # the same noise for both candidates


@pytest.mark.parametrize("sets", [(), ("population.size=2",)], ids=["one", "two"])
def test_a_run_with_mixture_replacement_is_reproducible(tiny_recipe, sets: tuple[str, ...]) -> None:
    path = tiny_recipe(generations=3)
    first, second = (records(run(path, *MIXTURE, *sets)) for _ in range(2))
    assert first == second
    assert all(set(r["replaced"]) == {"generator", "discriminator"} for r in first)
    assert first != records(run(path, *sets))  # it draws the comparison's noise: a run of its own
