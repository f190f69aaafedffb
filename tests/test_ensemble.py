"""Mixture optimisation after training: the (1+1)-ES, common random numbers, the record and the CLI."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from evogan_gan.problem import GanProblem

from evogan.cli import _attach_commands, cli
from evogan.engine.ensemble import OPTIMIZED_FILE, Ensemble, optimise, optimise_run
from evogan.engine.run import build_settings
from evogan.engine.rundir import RunDirectory, file_sha256
from evogan.errors import RecipeError
from evogan.plugins import make_plugin_manager
from evogan.recipe import OptimizeSection, load
from evogan.registry import Registries
from evogan.rng import score_seed
from evogan.runtime.single import prepare, run_in_process

_attach_commands()
TARGET = [0.7, 0.2, 0.1, 0.0]


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def distance(weights: Sequence[float], target: Sequence[float]) -> float:
    return float(sum((a - b) ** 2 for a, b in zip(weights, target, strict=False)))


class Distance:
    """A problem whose validation score is the squared distance of the weights to TARGET (its test score:
    to ``test_target``); it counts its scorers and the streams it is asked to score on."""

    def __init__(self, test_target: Sequence[float] = TARGET) -> None:
        self.scorers: list[tuple[int, ...]] = []
        self.streams: list[tuple[str, int]] = []
        self.test_target = test_target

    def ensemble_scorer(
        self, generators: Sequence[torch.nn.Module], seeds: Sequence[int], *, samples: int = 0
    ) -> Callable[[Sequence[float]], dict[str, float]]:
        self.scorers.append(tuple(seeds))
        return lambda w: {"distance": distance(w, TARGET)}

    def evaluate_on(
        self,
        generators: Sequence[torch.nn.Module],
        weights: Sequence[float],
        *,
        stream: str,
        generator: torch.Generator,
    ) -> dict[str, float]:
        self.streams.append((stream, generator.initial_seed()))
        return {"distance": distance(weights, TARGET if stream == "validation" else self.test_target)}

    def objective(self, metrics: Mapping[str, float]) -> float:
        return metrics["distance"]


def ensemble(trained: list[float] | None = None) -> Ensemble:
    return Ensemble(0, [0, 1, 2, 3], [torch.nn.Identity() for _ in range(4)], trained)


@pytest.mark.parametrize("random_init", [False, True])
def test_the_es_only_ever_improves_and_gets_near_the_optimum(random_init: bool) -> None:
    problem = Distance()
    options = OptimizeSection(generations=300, sigma=0.05, random_init=random_init)
    result = optimise(problem, ensemble([0.25] * 4), options, seed=3, grid=4)  # type: ignore[arg-type]
    assert result["before"]["weights"] == {str(c): 0.25 for c in range(4)}
    assert (result["start"] != result["before"]["weights"]) is random_init
    assert result["after"]["score"] < min(result["before"]["score"], 0.02) and result["accepted"] > 3
    assert sum(result["after"]["weights"].values()) == pytest.approx(1.0)
    assert min(result["after"]["weights"].values()) >= 0
    assert len(problem.scorers) == 1  # one scorer: every candidate on the same noise
    again = optimise(Distance(), ensemble([0.25] * 4), options, seed=3, grid=4)  # type: ignore[arg-type]
    assert again == result


def test_the_es_tunes_on_validation_and_reports_the_test_stream_of_the_runs_seed() -> None:
    problem = Distance(test_target=[0.0, 0.0, 0.0, 1.0])
    options = OptimizeSection(generations=200, sigma=0.05)
    result = optimise(problem, ensemble([0.25] * 4), options, seed=3, grid=4, test_seed=1)  # type: ignore[arg-type]
    after = result["after"]
    assert after["score"] < result["before"]["score"]  # it moved towards TARGET, the validation optimum
    assert after["test"]["score"] == distance(list(after["weights"].values()), [0.0, 0.0, 0.0, 1.0])
    assert after["test"]["score"] > result["before"]["test"]["score"]  # the test stream never steered it
    test_noise = score_seed(1, "test")
    assert problem.streams == [("test", test_noise), ("test", test_noise)]  # before and after, the run's seed
    assert test_noise not in {seed for seeds in problem.scorers for seed in seeds}


class Loaded:
    """A cell as ensembles() reads it: index, generation and its mixture ensemble."""

    def __init__(self, index: int) -> None:
        self.index, self.generation = index, 5

    def mixture_ensemble(self) -> tuple[list[int], list[torch.nn.Module], list[float]]:
        return [self.index], [torch.nn.Identity()], [1.0]


def test_the_run_chooses_its_best_ensemble_on_validation(tmp_path: Path) -> None:
    """Validation scores cell 0's ensemble worse than cell 1's, the test stream calls both perfect (a tie
    cell 0 would win): cell 1 is chosen."""

    class Favour(Distance):
        def ensemble_scorer(self, generators, seeds, *, samples=0):  # type: ignore[no-untyped-def]
            worse = seeds[0] == score_seed(7, "validation", 0)
            return lambda w: {"distance": 2.0 if worse else 1.0}

        def evaluate_on(self, generators, weights, *, stream, generator):  # type: ignore[no-untyped-def]
            return {"distance": 0.0}  # the test stream calls every ensemble perfect

    options = OptimizeSection(generations=1)
    cells = [Loaded(0), Loaded(1)]
    entry = optimise_run(RunDirectory(tmp_path), Favour(), cells, options, seed=7)  # type: ignore[arg-type]
    assert entry["best"] == 1 and entry["evaluation"] == {"chosen_on": "validation", "reported_on": "test"}
    assert [e["after"]["test"]["score"] for e in entry["ensembles"]] == [0.0, 0.0]
    assert json.loads((tmp_path / OPTIMIZED_FILE).read_text())["neighbourhood"]["best"] == 1


def test_a_members_noise_seed_is_its_own_in_every_ensemble() -> None:
    problem = Distance()
    options = OptimizeSection(generations=1)
    optimise(problem, ensemble(), options, seed=3, grid=4)  # type: ignore[arg-type]
    optimise(problem, Ensemble(1, [1, 3], [torch.nn.Identity()] * 2, [0.5, 0.5]), options, seed=3, grid=4)  # type: ignore[arg-type]
    optimise(problem, ensemble(), options, seed=4, grid=4)  # type: ignore[arg-type]
    grid, neighbourhood, other_seed = problem.scorers
    assert neighbourhood == (grid[1], grid[3]) and len(set(grid)) == 4 and not set(other_seed) & set(grid)


def gan_problem(path: Path) -> GanProblem:
    registries = Registries.from_plugin_manager(make_plugin_manager())
    problem = build_settings(load(path, registries), registries, None, torch.device("cpu")).problem
    assert isinstance(problem, GanProblem)
    return problem


def test_the_gan_scorer_uses_common_random_numbers(tiny_recipe) -> None:
    problem = gan_problem(tiny_recipe())
    # The ring's metric cannot tell untrained generators apart: sum the samples instead.
    problem.metric.score = lambda samples: {"sum": float(samples.sum()), "n": float(len(samples))}  # type: ignore[method-assign]
    networks = [problem.create("generator", generator=torch.Generator().manual_seed(i)) for i in range(2)]
    score = problem.ensemble_scorer(networks, [11, 12], samples=200)
    assert score([0.3, 0.7]) == score([0.3, 0.7])  # the same noise every call
    alone = problem.ensemble_scorer(networks[1:], [12], samples=200)
    assert score([0.0, 1.0]) == alone([1.0])  # a generator's samples do not depend on its company
    assert score([1.0, 0.0]) != score([0.0, 1.0])
    assert score([0.333, 0.667])["n"] == 200  # exact proportions add up to the sample size


def test_a_run_optimises_after_training_and_the_cli_adds_the_grid_pool(tiny_recipe, tmp_path: Path) -> None:
    prepared = prepare(tiny_recipe(generations=2), overrides=["mixture.optimize.generations=4"])
    summary = run_in_process(prepared)
    run_dir = prepared.run_dir.path
    record = json.loads((run_dir / OPTIMIZED_FILE).read_text())
    assert set(record) == {"neighbourhood"} and record["neighbourhood"]["generations"] == 4
    entry = record["neighbourhood"]
    assert [e["centre"] for e in entry["ensembles"]] == [0, 1, 2, 3]
    assert entry["ensembles"][0]["members"] == ["0", "1", "2"]
    assert entry["checkpoints"] == {str(c): 2 for c in range(4)}
    checkpoints = {p.name: file_sha256(p) for p in (run_dir / "checkpoints").iterdir()}
    summary_text = (run_dir / "summary.json").read_text()
    assert json.loads(summary_text)["best_cell"] == summary["best_cell"]

    result = invoke("optimize", str(run_dir), "--pool", "all", "--generations", "3", "--samples", "64", "--json")
    assert result.exit_code == 0, result.output
    grid = json.loads(result.output)
    assert grid["pool"] == "all" and grid["samples"] == 64 and [e["centre"] for e in grid["ensembles"]] == [None]
    assert grid["ensembles"][0]["members"] == ["0", "1", "2", "3"]
    record = json.loads((run_dir / OPTIMIZED_FILE).read_text())
    assert set(record) == {"neighbourhood", "all"} and record["neighbourhood"] == entry
    assert {p.name: file_sha256(p) for p in (run_dir / "checkpoints").iterdir()} == checkpoints
    assert (run_dir / "summary.json").read_text() == summary_text
    assert not list(run_dir.glob(f".{OPTIMIZED_FILE}.*"))  # the atomic write left no temporary file

    table = invoke("optimize", str(run_dir), "--random-init", "--generations", "2")
    assert table.exit_code == 0 and "wrote" in table.output and "cell 3" in table.output
    scored = invoke("evaluate", str(run_dir), "--optimized", "all", "--json")
    assert scored.exit_code == 0, scored.output
    optimized = json.loads(scored.output)["optimized"]
    assert optimized["pool"] == "all" and optimized["weights"] == grid["ensembles"][0]["after"]["weights"]
    out = tmp_path / "optimized.png"
    drawn = invoke("sample", str(run_dir), "--optimized", "neighbourhood", "-n", "30", "-o", str(out))
    assert drawn.exit_code == 0 and out.stat().st_size > 1000 and "optimised neighbourhood" in drawn.output
    both = invoke("sample", str(run_dir), "--optimized", "all", "--cell", "1")
    assert both.exit_code == 2 and "leave out --cell and --single" in both.output


def test_optimized_mixture_errors_are_one_line(tiny_recipe) -> None:
    prepared = prepare(tiny_recipe(generations=1))
    run_in_process(prepared)
    run_dir = prepared.run_dir.path
    missing = invoke("evaluate", str(run_dir), "--optimized", "all")
    assert missing.exit_code == 2 and f"{run_dir / OPTIMIZED_FILE}: not found; run `evogan optimize" in missing.output
    assert "Traceback" not in missing.output
    assert invoke("optimize", str(run_dir), "--generations", "1").exit_code == 0
    other = invoke("sample", str(run_dir), "--optimized", "all")
    assert other.exit_code == 2 and "no 'all' ensemble; run `evogan optimize" in other.output
    record = json.loads((run_dir / OPTIMIZED_FILE).read_text())
    record["neighbourhood"]["checkpoints"]["0"] = 7
    (run_dir / OPTIMIZED_FILE).write_text(json.dumps(record))
    stale = invoke("evaluate", str(run_dir), "--optimized", "neighbourhood")
    assert stale.exit_code == 2 and "computed on other checkpoints" in stale.output
    record["neighbourhood"]["checkpoints"]["0"] = 1
    for cut in ("best", "ensembles"):  # a record edited by hand: valid JSON, missing its parts
        broken = json.loads(json.dumps(record))
        del broken["neighbourhood"][cut]
        (run_dir / OPTIMIZED_FILE).write_text(json.dumps(broken))
        edited = invoke("sample", str(run_dir), "--optimized", "neighbourhood")
        assert edited.exit_code == 2 and "'neighbourhood' entry is not an optimisation record" in edited.output
        assert "Traceback" not in edited.output and len(edited.output.strip().splitlines()) == 1
    (run_dir / OPTIMIZED_FILE).write_text("[1, 2")
    assert "unreadable" in invoke("evaluate", str(run_dir), "--optimized", "all").output
    nothing = invoke("optimize", str(run_dir.parent / "nope"))
    assert nothing.exit_code == 2 and "no such run directory" in nothing.output
    assert invoke("optimize", str(run_dir), "--generations", "0").exit_code == 2  # click's range check


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("mixture.optimize.generations=-1", r"mixture\.optimize\.generations: must be >= 0"),
        ("mixture.optimize.samples=-5", r"mixture\.optimize\.samples: must be >= 0"),
        ("mixture.optimize.sigma=0", r"mixture\.optimize\.sigma: must be > 0"),
        ('mixture.optimize.pool="grid"', r"mixture\.optimize\.pool: must be 'neighbourhood' or 'all'"),
        ("mixture.optimize.random_init=3", r"mixture\.optimize\.random_init: must be a valid boolean"),
        ("mixture.optimize.es_generations=3", r"mixture\.optimize\.es_generations: unknown key"),
    ],
)
def test_bad_optimize_keys_are_one_line_recipe_errors(tiny_recipe, override: str, message: str) -> None:
    with pytest.raises(RecipeError, match=message) as caught:
        load(tiny_recipe(), Registries.from_plugin_manager(make_plugin_manager()), [override])
    assert len(caught.value.lines) == 1


def test_optimize_keys_leave_the_digest_alone(tiny_recipe) -> None:
    registries = Registries.from_plugin_manager(make_plugin_manager())
    plain = load(tiny_recipe(), registries)
    tuned = load(tiny_recipe(), registries, ["mixture.optimize.generations=50", 'mixture.optimize.pool="all"'])
    assert tuned.digest == plain.digest and tuned.mixture.optimize.pool == "all"
    assert load(tiny_recipe(), registries, ["mixture.sigma=0.5"]).digest != plain.digest


@pytest.mark.slow
def test_a_launched_run_optimises_in_the_process_that_writes_the_summary(tiny_recipe) -> None:
    from evogan.runtime.launcher import launch

    prepared = prepare(tiny_recipe(generations=2), overrides=["run.workers=2", "mixture.optimize.generations=2"])
    launch(prepared)
    record = json.loads((prepared.run_dir.path / OPTIMIZED_FILE).read_text())
    assert [e["centre"] for e in record["neighbourhood"]["ensembles"]] == [0, 1, 2, 3]
    assert record["neighbourhood"]["checkpoints"] == {str(c): 2 for c in range(4)}
