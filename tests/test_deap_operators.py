"""DEAP's selection operators by name: recipe validation, determinism per stream, DEAP's own results."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from deap import tools

from evogan import recipe as recipes
from evogan.builtin.deap_operators import DeapSelection
from evogan.cli import _attach_commands, cli
from evogan.errors import RecipeError
from evogan.plugins import distribution_modules, make_plugin_manager
from evogan.registry import Registries
from evogan.testing import check_options, check_selection, individuals, run_tiny

GAN_PLUGINS = distribution_modules("evogan-gan")  # the GAN problem's plugins, for autoload off

_attach_commands()
LOSSES = [0.5, 0.1, 0.9, 0.3, 0.7, 0.2]


def deap(operator: str, **arguments: object) -> DeapSelection:
    return DeapSelection(DeapSelection.Options.model_validate({"operator": operator, **arguments}))


def what_deap_picks(operator: str, seed: int, k: int, **arguments: object) -> list[str]:
    """DEAP called directly, with the global random seeded as the bridge seeds it from ``seed``'s stream."""
    population = individuals(LOSSES)
    random.seed(int(np.random.default_rng(seed).integers(2**63)))
    return [ind.uid for ind in getattr(tools, operator)(population, k, **arguments)]


@pytest.mark.parametrize(
    ("operator", "arguments"),
    [("selTournament", {"tournsize": 3}), ("selBest", {}), ("selStochasticUniversalSampling", {})],
)
def test_operators_give_deaps_own_result_deterministically(operator: str, arguments: dict[str, object]) -> None:
    check_options(DeapSelection, {"operator": operator, **arguments})
    picked = check_selection(DeapSelection, {"operator": operator, **arguments}, losses=LOSSES, k=5, seed=11)
    assert [ind.uid for ind in picked] == what_deap_picks(operator, 11, 5, **arguments)
    selection = deap(operator, **arguments)
    draws = {
        tuple(i.uid for i in selection.select(individuals(LOSSES), 5, rng=np.random.default_rng(seed)))
        for seed in range(20)
    }
    assert (len(draws) == 1) == (operator == "selBest")  # only selBest draws nothing


def test_best_and_tournament_prefer_low_losses() -> None:
    best = deap("selBest").select(individuals(LOSSES), 3, rng=np.random.default_rng(0))
    assert [ind.fitness.loss for ind in best] == [0.1, 0.2, 0.3]
    full = deap("selTournament", tournsize=50).select(individuals(LOSSES), 4, rng=np.random.default_rng(0))
    assert {ind.fitness.loss for ind in full} == {0.1}  # 50 draws with replacement: the best is always in


def test_the_global_random_state_is_put_back() -> None:
    random.seed(123)
    expected = random.random()
    random.seed(123)
    deap("selTournament", tournsize=2).select(individuals(LOSSES), 5, rng=np.random.default_rng(0))
    assert random.random() == expected


def recipe_errors(tiny_recipe, *overrides: str) -> list[str]:
    path = tiny_recipe()
    registries = Registries.from_plugin_manager(make_plugin_manager(autoload=False, modules=GAN_PLUGINS))
    with pytest.raises(RecipeError) as caught:
        recipes.load(path, registries, overrides)
    return [line.removeprefix(f"{path}: ") for line in caught.value.lines]


def test_recipe_errors_name_the_key(tiny_recipe) -> None:
    (unknown,) = recipe_errors(tiny_recipe, 'selection={use="deap", operator="selTournamnet", tournsize=2}')
    assert unknown.startswith("selection.operator: 'selTournamnet' is not a DEAP selection operator")
    assert "did you mean 'selTournament'" in unknown and "selBest" in unknown
    assert recipe_errors(tiny_recipe, 'selection={use="deap", operator="selTournament"}') == [
        "selection.tournsize: required key is missing (an argument of selTournament)"
    ]
    assert recipe_errors(tiny_recipe, 'selection={use="deap", operator="selBest", size=2}') == [
        "selection.size: unknown key (selBest takes: no other keys)"
    ]
    (reserved,) = recipe_errors(tiny_recipe, 'selection={use="deap", operator="selBest", k=2}')
    assert reserved.startswith("selection.k: unknown key")
    assert recipe_errors(tiny_recipe, 'selection={use="deap"}') == ["selection.operator: required key is missing"]


def test_an_unknown_operator_is_a_one_line_error_with_exit_code_2(tiny_recipe) -> None:
    path = tiny_recipe()
    result = CliRunner().invoke(
        cli, ["validate", str(path), "--set", 'selection={use="deap", operator="selNope"}'], catch_exceptions=False
    )
    assert result.exit_code == 2 and "Traceback" not in result.output
    (line,) = [line for line in result.output.splitlines() if line.strip()]
    assert line.startswith(f"error: {path}: selection.operator: 'selNope' is not a DEAP selection operator")


def test_a_failing_operator_is_a_user_error() -> None:
    from evogan.errors import UserError

    with pytest.raises(UserError, match=r"selection.operator: selTournamentDCD failed on 3 individuals"):
        deap("selTournamentDCD").select(individuals([0.1, 0.2, 0.3]), 2, rng=np.random.default_rng(0))


def test_a_tiny_run_with_a_deap_operator_is_reproducible(tmp_path: Path) -> None:
    from evogan.testing import write_tiny_recipe

    overrides = ['selection={use="deap", operator="selTournament", tournsize=2}', "population.size=2"]
    recipe = write_tiny_recipe(tmp_path, generations=2, rows=1, cols=2, overrides=overrides)
    first, second = run_tiny(recipe), run_tiny(recipe)
    assert (first / "metrics.jsonl").read_bytes() == (second / "metrics.jsonl").read_bytes()
    records = [json.loads(line) for line in (first / "metrics.jsonl").read_text().splitlines()]
    assert len(records) == 4 and all(set(r["replaced"]) == {"generator", "discriminator"} for r in records)
