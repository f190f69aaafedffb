"""One diverging cell must not take the grid down (issue 36): a cell whose individual turns non-finite in
training is restored from a finite copy and says so in its records, a neighbour's non-finite model is
dropped at the wire, the summary names the cells, and a run whose every cell diverges to the end exits 1
with one line. The fault comes from tests/divergence_fault.py, a problem plugin loaded in every process."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from click.testing import CliRunner
from divergence_fault import FAULT_ENV
from test_codec import Pair, make_pair, reencoded

from evogan.api import Problem
from evogan.cli import cli
from evogan.engine.divergence import OWN, restore
from evogan.engine.optimizer_state import PREFIX
from evogan.engine.run import build_settings
from evogan.individual import Individual, all_finite
from evogan.plugins import PLUGINS_ENV, make_plugin_manager
from evogan.recipe import load as load_recipe
from evogan.registry import Registries
from evogan.runtime.launcher import launch
from evogan.runtime.single import prepare, run_in_process
from evogan.testing import individuals, write_tiny_recipe

TESTS = Path(__file__).resolve().parent
FAULTY = "problem.use=gan_with_fault"
FAULT_AT = 2  # the generation whose training leaves cell 0 non-finite


@pytest.fixture
def fault(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """Load the fault plugin here and in every worker; the returned function says where the fault is."""
    monkeypatch.setenv(PLUGINS_ENV, "divergence_fault")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])))

    def place(*, cells: list[int], generations: list[int] | str, role: str = "generator", value: str = "nan") -> None:
        where = {"cells": cells, "generations": generations, "role": role, "value": value}
        monkeypatch.setenv(FAULT_ENV, json.dumps(where))

    place(cells=[], generations=[])
    return place


def records(run_dir: Path) -> list[dict[str, Any]]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return sorted((json.loads(line) for line in lines), key=lambda r: (r["generation"], r["cell"]))


def finite_numbers(record: dict[str, Any]) -> bool:
    numbers = [record["g_loss"], record["d_loss"], record["mixture_score"], *record["mixture_metrics"].values()]
    return all(math.isfinite(float(n)) for n in numbers)


def run(path: Path, *overrides: str, workers: int = 1) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    prepared = prepare(path, overrides=[FAULTY, *overrides, *([f"run.workers={workers}"] if workers > 1 else [])])
    summary = launch(prepared) if workers > 1 else run_in_process(prepared)
    return records(prepared.run_dir.path), summary


def check_contained(faulted: list[dict[str, Any]], clean: list[dict[str, Any]], summary: dict[str, Any]) -> None:
    """Every record finite; before the fault reaches them the records equal the unfaulted run's; cell 0
    diverged once, at the fault, was restored, and trains finite afterwards."""
    assert all(finite_numbers(r) for r in faulted)
    def unreached(record: dict[str, Any]) -> bool:
        return record["generation"] < FAULT_AT or (record["generation"] == FAULT_AT and record["cell"] != 0)

    assert [r for r in faulted if unreached(r)] == [r for r in clean if unreached(r)]
    events = [(r["cell"], r["generation"], r["restored_from"]) for r in faulted if r["diverged"]]
    assert len(events) == 1 and events[0][:2] == (0, FAULT_AT) and events[0][2][0] in (OWN, "cell 1", "cell 2")
    assert all(not r["diverged"] for r in clean)
    assert summary["diverged"] == {"0": 1} and summary["diverged_at_end"] == []
    assert all(math.isfinite(v) for v in summary["chosen"]["test"].values())


@pytest.mark.parametrize(
    ("role", "value", "sets"),
    [
        ("generator", "nan", ()),
        ("discriminator", "inf", ()),
        ("generator", "inf", ("population.selection=false",)),  # restored from the copy it keeps
        ("generator", "nan", ("run.vectorize=true",)),  # cells stacked into one batch
    ],
    ids=["generator-nan", "discriminator-inf", "selection-off", "vectorised"],
)
def test_one_diverging_cell_is_restored_and_the_others_never_see_it(
    fault: Callable[..., None], tmp_path: Path, role: str, value: str, sets: tuple[str, ...]
) -> None:
    path = write_tiny_recipe(tmp_path, seed=4, generations=4)
    clean, _ = run(path, *sets)
    fault(cells=[0], generations=[FAULT_AT], role=role, value=value)
    faulted, summary = run(path, *sets)
    check_contained(faulted, clean, summary)


@pytest.mark.slow
def test_with_two_workers_the_diverged_cell_is_contained(fault: Callable[..., None], tmp_path: Path) -> None:
    path = write_tiny_recipe(tmp_path, seed=4, generations=4)
    clean, _ = run(path)  # the single-process run is the reference: lockstep workers give the same records
    fault(cells=[0], generations=[FAULT_AT])
    faulted, summary = run(path, workers=2)
    check_contained(faulted, clean, summary)


def test_a_run_whose_every_cell_diverges_to_the_end_exits_1_with_one_line(
    fault: Callable[..., None], tmp_path: Path
) -> None:
    path = write_tiny_recipe(tmp_path, seed=4, generations=2)
    fault(cells=[0, 1, 2, 3], generations="all")
    result = CliRunner().invoke(cli, ["run", str(path), "--set", FAULTY, "--plain"])
    assert result.exit_code == 1, result.output
    last = result.output.strip().splitlines()[-1]
    assert last.startswith("error: ") and "every cell (4) diverged in its last generation" in last
    assert "Traceback" not in result.output
    (run_dir,) = (tmp_path / "runs").iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["diverged"] == {str(c): 2 for c in range(4)} and summary["diverged_at_end"] == [0, 1, 2, 3]
    assert all(finite_numbers(r) for r in records(run_dir))  # the checkpoints hold finite copies
    assert "diverged=1 restored_from=['own']" in result.output  # the plain view marks each event


def tiny_problem(tmp_path: Path) -> Problem:
    registries = Registries.from_plugin_manager(make_plugin_manager())
    recipe = load_recipe(write_tiny_recipe(tmp_path), registries, [])
    return build_settings(recipe, registries, None, torch.device("cpu")).problem


def test_a_lone_individual_with_no_finite_copy_is_left_and_reported(tmp_path: Path) -> None:
    problem, generators = tiny_problem(tmp_path), individuals([1.0, 2.0])
    for individual in generators:
        with torch.no_grad():
            next(individual.network.parameters())[0] = float("nan")
    before = {"generator": list(generators)}
    varied = {"generator": list(generators)}
    assert restore(problem, 0, varied, before, {}, aligned=True, lr_factor=0.5) == [None, None]
    assert varied["generator"] == generators  # nothing finite to take: left as they were


def test_a_restored_copy_trains_at_the_cut_learning_rate(tmp_path: Path) -> None:
    problem, (good, bad) = tiny_problem(tmp_path), individuals([1.0, 2.0])
    with torch.no_grad():
        next(bad.network.parameters())[0] = float("inf")
    varied = {"generator": [bad]}
    assert restore(problem, 3, varied, {"generator": [good]}, {}, aligned=False, lr_factor=0.25) == [OWN]
    (copy,) = varied["generator"]
    assert copy is not good and copy.uid == bad.uid and copy.origin == 3 and problem.finite(copy)
    assert copy.hyper["lr"] == pytest.approx(good.hyper["lr"] * 0.25)
    assert all(group["lr"] == copy.hyper["lr"] for group in copy.trainer.param_groups)


def test_finite_looks_at_weights_buffers_average_optimizer_state_and_extra(tmp_path: Path) -> None:
    problem, (individual,) = tiny_problem(tmp_path), individuals([1.0])
    assert problem.finite(individual)
    places: list[Callable[[Individual], torch.Tensor]] = [
        lambda i: next(i.network.parameters()),
        lambda i: i.extra["average"]["x"],
        lambda i: i.extra["p"],
    ]
    individual.extra = {"p": torch.zeros(1), "average": {"x": torch.zeros(3)}}
    individual.network.register_buffer("running", torch.zeros(2))
    places.append(lambda i: i.network.get_buffer("running"))
    for place in places:
        copy = individual.clone(problem.make_optimizer)
        with torch.no_grad():
            place(copy).view(-1)[0] = float("nan")
        assert not problem.finite(copy)
    copy = individual.clone(problem.make_optimizer)
    copy.trainer.state[next(copy.network.parameters())] = {"exp_avg": torch.tensor([math.inf])}
    assert not problem.finite(copy)
    assert all_finite([torch.tensor([1e38]), torch.tensor([1, 2])])  # huge but finite; integers pass


# ---------------------------------------------------------------------------------------- the wire
@pytest.fixture(scope="module")
def with_state(tmp_path_factory: pytest.TempPathFactory) -> Pair:
    torch.set_num_threads(1)
    path = write_tiny_recipe(tmp_path_factory.mktemp("divergence"), seed=5)
    return make_pair(path, ("exchange.optimizer_state=true", "problem.g_ema=0.9"))


def poisoned(prefix: str, value: float) -> Callable[[dict[str, torch.Tensor]], None]:
    def change(tensors: dict[str, torch.Tensor]) -> None:
        name = next(k for k, t in tensors.items() if k.startswith(prefix) and t.is_floating_point() and t.dim())
        tensors[name] = tensors[name].clone()
        tensors[name].view(-1)[-1] = value

    return change


@pytest.mark.parametrize(
    ("prefix", "reason"),
    [
        ("generator/", "non-finite weights"),
        ("discriminator/", "non-finite weights"),
        (PREFIX, "non-finite optimizer state"),
        ("~average/", "non-finite average"),
    ],
)
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_a_neighbours_non_finite_model_is_dropped_and_its_last_finite_copy_kept(
    with_state: Pair, prefix: str, reason: str, value: float
) -> None:
    receiver = with_state.receiver
    kept = {role: individual.network for role, individual in receiver.foreign[0].items()}
    before = receiver.exchange.dropped.get(reason, 0)
    assert receiver.receive({0: reencoded(with_state, poisoned(prefix, value))}) == {}
    assert receiver.exchange.dropped[reason] == before + 1
    assert {role: individual.network for role, individual in receiver.foreign[0].items()} == kept
    assert all(receiver.problem.finite(individual) for individual in receiver.foreign[0].values())


def test_a_huge_but_finite_model_is_adopted(with_state: Pair) -> None:
    """Finite is the line the wire holds: a model with 3e38 in it is a neighbour's real state; should it
    make this cell's training diverge, the cell restores itself."""
    receiver = with_state.receiver
    assert receiver.receive({0: reencoded(with_state, poisoned("generator/", 3e38))})
    assert receiver.problem.finite(receiver.foreign[0]["generator"])


@pytest.mark.parametrize("value", ["0", "1.5", '"half"'])
def test_a_bad_restore_lr_is_one_line_naming_the_key(tmp_path: Path, value: str) -> None:
    path = write_tiny_recipe(tmp_path)
    result = CliRunner().invoke(cli, ["validate", str(path), "--set", f"population.restore_lr={value}"])
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1 and "population.restore_lr" in result.output
