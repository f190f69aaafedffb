from __future__ import annotations

import json
import tomllib
import warnings
from pathlib import Path

import pytest

from evogan import recipe as recipes
from evogan.errors import RecipeError, UserError
from evogan.plugins import make_plugin_manager
from evogan.registry import Registries

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted((ROOT / "recipes").glob("*.toml"))


@pytest.fixture(scope="module")
def registries() -> Registries:
    return Registries.from_plugin_manager(make_plugin_manager())


def needs_inception_weights(path: Path) -> bool:
    """Recipes scored by the Inception FID name a weights file no package ships (CelebA, CIFAR-10)."""
    metric = tomllib.loads(path.read_text()).get("problem", {}).get("metric", {})
    return metric.get("use") == "inception"


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_every_shipped_recipe_validates(path: Path, registries: Registries, tmp_path: Path) -> None:
    overrides = []
    if needs_inception_weights(path):
        # The option only checks that the file exists; its contents are read when a run starts.
        weights = tmp_path / "pt_inception-2015-12-05-6726825d.pth"
        weights.write_bytes(b"")
        overrides.append(f"problem.metric.weights={json.dumps(str(weights))}")
    recipe = recipes.load(path, registries, overrides)
    assert recipe.choices["problem"].name


@pytest.mark.parametrize("path", [p for p in SHIPPED if needs_inception_weights(p)], ids=lambda p: p.name)
def test_inception_recipes_find_the_cached_weights_or_say_how_to_get_them(
    path: Path, registries: Registries, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from evogan_gan.image_metrics import INCEPTION

    monkeypatch.setenv("EVOGAN_CACHE_DIR", str(tmp_path / "cache"))
    cached = tmp_path / "cache" / "weights" / "pt_inception-2015-12-05-6726825d.pth"
    with pytest.raises(RecipeError) as caught:
        recipes.load(path, registries)
    (line,) = [line for line in caught.value.lines if "problem.metric" in line]
    assert "pt_inception-2015-12-05-6726825d.pth is not in the cache: run with --download" in line
    assert f"download {INCEPTION.url} by hand and put it at {cached}" in line
    monkeypatch.setenv("EVOGAN_DOWNLOAD", "1")  # evogan run --download: fetched when the run starts
    assert recipes.load(path, registries).choices["problem"].name
    monkeypatch.delenv("EVOGAN_DOWNLOAD")
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"")  # checked against its SHA-256 when the run starts
    assert recipes.load(path, registries).choices["problem"].name


def errors_for(tiny_recipe, registries: Registries, *overrides: str) -> list[str]:
    path = tiny_recipe()
    with pytest.raises(RecipeError) as caught:
        recipes.load(path, registries, overrides)
    return [line.removeprefix(f"{path}: ") for line in caught.value.lines]


def test_out_of_range_value_names_the_key(tiny_recipe, registries: Registries) -> None:
    assert errors_for(tiny_recipe, registries, "selection.size=0") == ["selection.size: must be >= 1"]


def test_unknown_keys_and_tables(tiny_recipe, registries: Registries) -> None:
    lines = errors_for(tiny_recipe, registries, "run.sead=3", "problem.network.widht=3", "colour.x=1")
    assert "run.sead: unknown key" in lines
    assert "problem.network.widht: unknown key" in lines
    assert any(line.startswith("colour: unknown table") for line in lines)


def test_wrong_type_says_what_it_got(tiny_recipe, registries: Registries) -> None:
    (line,) = errors_for(tiny_recipe, registries, 'run.generations="many"')
    assert line.startswith("run.generations: must be a valid integer") and "'many'" in line


def test_unknown_component_lists_the_available_ones(tiny_recipe, registries: Registries) -> None:
    (line,) = errors_for(tiny_recipe, registries, 'selection.use="tournamnet"')
    assert "unknown selection 'tournamnet'" in line
    assert "did you mean 'tournament'" in line and "available: deap, linear_rank, " in line


def test_an_unknown_name_unlike_any_says_a_plugin_package_may_provide_it(tiny_recipe, registries: Registries) -> None:
    """The GAN problem left evogan for evogan-gan: a recipe naming a component of a package not installed
    here is one line that says where such names come from (a near miss gets "did you mean" instead)."""
    (line,) = errors_for(tiny_recipe, registries, 'problem.use="wgan_gp_3d"')
    assert line.startswith("problem.use: unknown problem 'wgan_gp_3d'; available: gan")
    assert line.endswith("; a plugin package may provide it (`evogan plugins`: those loaded)")
    (near,) = errors_for(tiny_recipe, registries, 'selection.use="tournamnet"')
    assert "plugin package" not in near


def test_missing_required_table(tmp_path: Path, registries: Registries) -> None:
    path = tmp_path / "r.toml"
    path.write_text("[run]\nseed = 1\n")
    with pytest.raises(RecipeError) as caught:
        recipes.load(path, registries)
    assert f"{path}: problem: required table is missing" in caught.value.lines


def test_invalid_toml_names_the_line(tmp_path: Path, registries: Registries) -> None:
    path = tmp_path / "broken.toml"
    path.write_text("[run]\nseed = 1\ngenerations = = 3\n")
    with pytest.raises(UserError, match=r"broken.toml: invalid TOML: .*line 3"):
        recipes.load(path, registries)


def test_missing_and_unreadable_recipe(tmp_path: Path, registries: Registries) -> None:
    with pytest.raises(UserError, match="recipe not found"):
        recipes.load(tmp_path / "nope.toml", registries)
    with pytest.raises(UserError, match="is a directory"):
        recipes.load(tmp_path, registries)


def test_overrides_are_parsed_as_toml(tiny_recipe, registries: Registries) -> None:
    recipe = recipes.load(
        tiny_recipe(), registries, ["run.seed=7", "topology.rows=3", 'problem.loss.use="mse"']
    )
    assert recipe.run.seed == 7
    assert recipe.choices["topology"].options.rows == 3
    assert recipe.data["problem"]["loss"]["use"] == "mse"
    with pytest.raises(UserError, match="expected KEY=VALUE"):
        recipes.apply_overrides({}, ["run.seed"], "r.toml")


def test_digest_ignores_operational_keys(tiny_recipe, registries: Registries) -> None:
    base = recipes.load(tiny_recipe(), registries)
    longer = recipes.load(tiny_recipe(), registries, ["run.generations=50", "run.workers=2"])
    other_seed = recipes.load(tiny_recipe(), registries, ["run.seed=2"])
    assert base.digest == longer.digest != other_seed.digest


def test_recipe_round_trips_through_toml(tiny_recipe, registries: Registries, tmp_path: Path) -> None:
    recipe = recipes.load(tiny_recipe(), registries)
    copy = tmp_path / "copy.toml"
    copy.write_text(recipe.to_toml())
    assert recipes.load(copy, registries).data == recipe.data


# ------------------------------------------------------------------------------------------ 0.2's layout
FROZEN_0_2 = ROOT / "tests" / "data" / "frozen_recipe_0_2.toml"  # a 0.2 recipe: never edit
FROZEN_0_2_RECORDS = ROOT / "tests" / "data" / "frozen_recipe_0_2_records.json"  # its records under 0.2's code
FROZEN_0_2_DIGEST = "079cf43bd656c048"  # its digest under 0.2's code: its runs' checkpoints carry it


def new_layout(data: dict) -> dict:
    """``data`` with its top-level pairing, mutation and sparsity written where they are now."""
    data = {**data, "problem": dict(data["problem"])}
    for part in recipes.PROBLEM_PARTS:
        if part in data:
            data["problem"][part] = data.pop(part)
    return data


def moved(caught: list[warnings.WarningMessage]) -> list[str]:
    return sorted(str(w.message).split(" is deprecated")[0] for w in caught if w.category is FutureWarning)


def test_the_0_2_layout_loads_with_one_warning_per_table_and_gives_the_same_recipe(
    registries: Registries, tmp_path: Path
) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        old = recipes.load(FROZEN_0_2, registries)
    assert len(caught) == 3 and moved(caught) == ["[mutation]", "[pairing]", "[sparsity]"]
    assert "use [problem.pairing]" in " ".join(str(w.message) for w in caught)
    path = tmp_path / "now.toml"
    path.write_text(recipes.dumps_toml(new_layout(recipes.read_toml(FROZEN_0_2))))
    now = recipes.load(path, registries)  # no warning (pytest turns one into an error)
    assert old.data == now.data and old.choices == now.choices
    assert old.digest == now.digest == FROZEN_0_2_DIGEST
    assert old.choices["problem"].options.pairing.use == "g_mixture"  # type: ignore[attr-defined]


def test_a_0_2_recipe_trains_as_it_did(tmp_path: Path) -> None:
    from test_run import metrics, run
    from test_vectorized import assert_close

    with pytest.warns(FutureWarning) as caught:
        run_dir = run(FROZEN_0_2, "run.generations=2", f"run.output_dir={json.dumps(str(tmp_path))}")
    assert moved(list(caught)) == ["[mutation]", "[pairing]", "[sparsity]"]
    # Close, not equal: the frozen records were written on one CPU; another's kernels round differently
    # (1.7e-7 relative measured between AVX2 and AVX-512), while a changed recipe moves them by percents.
    assert_close(metrics(run_dir), json.loads(FROZEN_0_2_RECORDS.read_text()), rel_tol=1e-5)


@pytest.mark.parametrize(
    ("override", "table"),
    [
        ('pairing.use="own_pair"', {"use": "own_pair", "generator_share": 0.25}),  # a key: the others stay
        ('pairing={use="own_pair"}', {"use": "own_pair"}),  # a table: replaces it, as it did
    ],
)
def test_a_set_of_the_old_table_reaches_the_new_one_with_one_warning(
    tiny_recipe, registries: Registries, override: str, table: dict
) -> None:
    path = tiny_recipe(overrides=['problem.pairing={use="neighbour_share", generator_share=0.25}'])
    data = recipes.read_toml(path)
    with pytest.warns(FutureWarning, match=r"^\[pairing\] is deprecated .*: use \[problem.pairing\]$") as caught:
        overridden = recipes.apply_overrides(data, [override, override], str(path))
    assert len(caught) == 1 and "pairing" not in overridden and overridden["problem"]["pairing"] == table
    with pytest.warns(FutureWarning) as caught:  # no [problem.pairing] yet: moved when the recipe is read
        recipe = recipes.load(tiny_recipe(), registries, ['pairing.use="own_pair"', "sparsity.use=\"static\""])
    assert moved(list(caught)) == ["[pairing]", "[sparsity]"]
    assert recipe.data["problem"]["pairing"] == {"use": "own_pair"} and "pairing" not in recipe.data


def test_old_and_new_place_together_is_a_one_line_error(tiny_recipe, registries: Registries, tmp_path: Path) -> None:
    path = tmp_path / "both.toml"
    path.write_text(tiny_recipe().read_text() + '\n[mutation]\nuse = "none"\n')
    with pytest.warns(FutureWarning), pytest.raises(RecipeError) as caught:
        recipes.load(path, registries)
    assert caught.value.lines == [f"{path}: mutation: a deprecated top-level table, and problem.mutation too: keep one"]


def test_a_gan_recipe_without_a_mutation_gets_lipizzaners(registries: Registries) -> None:
    data = recipes.read_toml(ROOT / "evogan" / "testing" / "tiny.toml")
    assert data["problem"].pop("mutation") == {"use": "gaussian_lr"}
    recipe = recipes.validate(data, registries)
    assert recipe.choices["problem"].options.mutation == recipes.ComponentRef(use="gaussian_lr")  # type: ignore[attr-defined]
