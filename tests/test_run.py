"""End-to-end runs of the tiny toy recipe in one process: outputs, reproducibility, resume."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import ClassVar

import pytest
import torch
from click.testing import CliRunner

from evogan import hookimpl
from evogan import recipe as recipes
from evogan.adversarial.contracts import DataSource, Metric
from evogan.api import ComponentOptions
from evogan.cli import _attach_commands, cli
from evogan.engine.cell import Cell
from evogan.engine.run import (
    Driver,
    best_cell,
    build_settings,
    build_topology,
    mean_over_cells,
    reported,
    score_cells,
)
from evogan.engine.rundir import RunDirectory
from evogan.errors import UserError
from evogan.plugins import make_plugin_manager
from evogan.registry import Registries
from evogan.runtime.single import prepare, run_in_process
from evogan.testing import registered, run_tiny

_attach_commands()


def run(path: Path, *overrides: str, stop_after: int | None = None) -> Path:
    prepared = prepare(path, overrides=overrides)
    calls = {"n": 0}

    def stop() -> bool:
        calls["n"] += 1
        return stop_after is not None and calls["n"] >= stop_after

    run_in_process(prepared, stop=stop)
    return prepared.run_dir.path


def metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def one_line_error(path: Path, *sets: str) -> str:
    """``evogan run PATH --set ...``'s output, which must be one line and exit code 2."""
    args = ["run", str(path), "--quiet"]
    for item in sets:
        args += ["--set", item]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    return lines[0]


def test_run_directory_holds_everything(tiny_recipe) -> None:
    run_dir = run(tiny_recipe(generations=2), "run.samples_every=1")
    records = metrics(run_dir)
    assert [(r["generation"], r["cell"]) for r in records] == [(g, c) for g in (1, 2) for c in range(4)]
    assert {"g_loss", "d_loss", "lr_g", "lr_d", "mixture", "mixture_score", "mixture_metrics"} <= set(
        records[0]
    )
    assert records[0]["exchange"] == {"1": 0, "2": 0}  # 2x2 torus: cell 0 pulls from cells 1 and 2
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["generations"] == 2 and set(summary["cells"]) == {"0", "1", "2", "3"}
    assert {"modes_covered", "hq_fraction", "tvd"} <= set(summary["best_mixture"])
    assert (run_dir / "recipe.toml").read_text().startswith("[run]")
    assert (run_dir / "samples" / "gen-0001-cell-0000.png").stat().st_size > 1000
    assert list((run_dir / "samples").glob("final-best-cell-*.png"))
    assert (run_dir / "plots" / "metrics.png").stat().st_size > 1000
    assert (run_dir / "plots" / "grid.png").stat().st_size > 1000
    assert len(list((run_dir / "logs").glob("cell-*.log"))) == 4
    assert len((run_dir / "timings.jsonl").read_text().splitlines()) == 8
    checkpoint = torch.load(run_dir / "checkpoints" / "cell-0002-g000002.pt", weights_only=True)
    assert checkpoint["generation"] == 2 and checkpoint["cell"] == 2
    assert not [p for p in (run_dir / "checkpoints").iterdir() if p.name.startswith(".")]


def test_same_seed_gives_identical_metrics(tiny_recipe) -> None:
    first = run(tiny_recipe(seed=5))
    second = run(tiny_recipe(seed=5))
    other = run(tiny_recipe(seed=6))
    assert (first / "metrics.jsonl").read_bytes() == (second / "metrics.jsonl").read_bytes()
    assert (first / "metrics.jsonl").read_bytes() != (other / "metrics.jsonl").read_bytes()


def test_cells_draw_different_numbers(tiny_recipe) -> None:
    records = metrics(run(tiny_recipe(generations=1)))
    assert len({r["g_loss"] for r in records}) == 4  # one seed, split per cell: no two cells alike


def test_resume_reproduces_an_uninterrupted_run(tiny_recipe) -> None:
    path = tiny_recipe(seed=3, generations=4)
    straight = run(path)
    interrupted = run(path, "run.checkpoint_every=2", stop_after=3)  # stops after generation 3
    assert max(r["generation"] for r in metrics(interrupted)) == 3
    summary = json.loads((interrupted / "summary.json").read_text())
    assert summary["interrupted"] is True
    run_in_process(prepare(None, resume_dir=interrupted))
    assert metrics(interrupted) == metrics(straight)


def test_resume_truncates_records_newer_than_the_checkpoint(tiny_recipe) -> None:
    path = tiny_recipe(seed=3, generations=4)
    straight = run(path)
    run_dir = run(path, "run.checkpoint_every=2", "run.generations=3")  # checkpoints at 2 and at the end (3)
    # A crash after generation 3 was logged but before its checkpoint: only generation 2's remain.
    for cell in range(4):
        assert RunDirectory(run_dir).checkpoint_generations(cell) == [3, 2]
        for suffix in (".pt", ".sha256"):
            (run_dir / "checkpoints" / f"cell-{cell:04d}-g000003{suffix}").unlink()
    run_in_process(prepare(None, resume_dir=run_dir, overrides=["run.generations=4"]))
    assert metrics(run_dir) == metrics(straight)


def test_each_cells_logbook_is_the_record_the_file_and_the_hook_get(tiny_recipe, monkeypatch) -> None:
    drivers: list[Driver] = []
    monkeypatch.setattr(Cell, "LOGBOOK_KEPT", 2)  # a logbook holds the latest records, not the whole run

    class KeptDriver(Driver):
        def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
            super().__init__(*args, **kwargs)
            drivers.append(self)

    class Listener:
        heard: list[dict] = []

        @hookimpl
        def evogan_generation_end(self, record) -> None:  # type: ignore[no-untyped-def]
            self.heard.append({k: v for k, v in record.items() if k != "timings"})

    monkeypatch.setattr("evogan.runtime.single.Driver", KeptDriver)
    path = tiny_recipe(seed=3, generations=5)
    with registered(Listener()):
        run_dir = run(path, stop_after=3)  # stops after generation 3, then resumes for the 4th and 5th
        run_in_process(prepare(None, resume_dir=run_dir))
    lines = metrics(run_dir)
    assert json.loads(json.dumps(Listener.heard)) == lines and len(lines) == 20
    for driver in drivers:  # the resumed driver's logbooks end as an unbroken run's, their start read back
        for cell in driver.cells:
            kept = json.loads(json.dumps(list(cell.logbook)))
            assert kept == [r for r in lines if r["cell"] == cell.index][cell.generation - 2 : cell.generation]


def test_resume_refuses_a_changed_recipe(tiny_recipe) -> None:
    run_dir = run(tiny_recipe(generations=1))
    with pytest.raises(UserError, match="written by another recipe"):
        run_in_process(prepare(None, resume_dir=run_dir, overrides=["run.seed=99"]))


def test_selection_off_trains_in_place_against_the_neighbourhood(tiny_recipe) -> None:
    records = metrics(run(tiny_recipe(generations=2), "population.selection=false", "population.size=2"))
    assert all(r["replaced"] == {} for r in records)


@pytest.mark.parametrize("loss", ["bce", "minimax", "heuristic", "mse", "hinge", "wasserstein"])
def test_every_loss_trains(tiny_recipe, loss: str) -> None:
    records = metrics(run(tiny_recipe(generations=1, rows=1, cols=1), f'problem.loss.use="{loss}"'))
    assert all(torch.isfinite(torch.tensor(r["g_loss"])) for r in records)


def test_sparse_run_keeps_masks_through_exchange_and_resume(tiny_recipe) -> None:
    sparsity = '{use="rigl", density_g=0.3, density_d=0.5, g_interval=2, total_steps=16}'
    run_dir = run(tiny_recipe(generations=2), f"problem.sparsity={sparsity}")
    record = metrics(run_dir)[-1]
    assert abs(record["sparsity"]["density_g"] - 0.3) < 0.01 and 0 < record["sparsity"]["flops_ratio"] < 1
    run_in_process(prepare(None, resume_dir=run_dir, overrides=["run.generations=3"]))
    assert metrics(run_dir)[-1]["generation"] == 3


# ------------------------------------------------------------------------------------------ evaluation
class NoiseProbe(Metric[ComponentOptions]):
    """A metric that sees the noise: the mean of the samples (lower is better) and how many there were;
    it keeps the real data it was prepared on."""

    name: ClassVar[str] = "noise_probe"
    description: ClassVar[str] = "mean and count of the samples (tests)"
    primary: ClassVar[str] = "mean"
    Options = ComponentOptions

    def prepare(self, data: DataSource, device: torch.device, *, generator: torch.Generator) -> None:
        self.prepared_on = data

    def score(self, samples: torch.Tensor) -> dict[str, float]:
        return {"mean": float(samples.mean()), "n": float(samples.shape[0])}


class ProbePlugin:
    @hookimpl
    def evogan_register_metrics(self, register) -> None:  # type: ignore[no-untyped-def]
        register(NoiseProbe)


PROBE = 'problem.metric={use="noise_probe"}'


def test_the_best_cell_is_chosen_on_validation_and_reported_on_test(tiny_recipe) -> None:
    recipe = tiny_recipe(generations=1, overrides=[PROBE, "problem.test_samples=96"])
    run_dir = run_tiny(recipe, ProbePlugin())
    summary = json.loads((run_dir / "summary.json").read_text())
    cells = summary["cells"]
    chosen = min(cells, key=lambda c: cells[c]["validation"]["mixture_score"])
    assert summary["best_cell"] == int(chosen) and summary["evaluation"] == {
        "chosen_on": "validation",
        "reported_on": "test",
    }
    assert summary["chosen"] == {  # the test figure is the one reported, the validation one beside it
        "cell": int(chosen),
        "what": "mixture",
        "role": "generator",
        "test": cells[chosen]["mixture"],
        "validation": cells[chosen]["validation"]["mixture"],
    }
    # the deprecated aliases a GAN run keeps writing for a cycle
    assert summary["best_mixture"] == summary["chosen"]["test"]
    assert summary["best_mixture_validation"] == summary["chosen"]["validation"]
    for scores in cells.values():
        test, validation = scores, scores["validation"]
        assert test["mixture"]["n"] == test["generator"]["n"] == 96  # problem.test_samples
        assert validation["mixture"]["n"] == validation["generator"]["n"] == 128  # problem.score_samples
        assert test["mixture_score"] == test["mixture"]["mean"] != validation["mixture"]["mean"]  # other noise
        assert test["score"] == test["mixture_score"] and validation["score"] == validation["mixture_score"]
    for part in ("mixture", "generator"):
        expected = statistics.fmean(scores[part]["mean"] for scores in cells.values())
        assert summary["mean_over_cells"][part]["mean"] == pytest.approx(expected)
    assert summary["problem"]["score_samples"] == 128 and summary["problem"]["test_samples"] == 96
    again = json.loads((run_tiny(recipe, ProbePlugin()) / "summary.json").read_text())
    assert again["cells"] == cells and again["mean_over_cells"] == summary["mean_over_cells"]  # same seed, same numbers

    with registered(ProbePlugin()):  # `evogan evaluate` re-scores the checkpoints exactly so
        result = CliRunner().invoke(cli, ["evaluate", str(run_dir), "--json"], catch_exceptions=False)
    evaluated = json.loads(result.output)
    keys = ("best_cell", "chosen", "best_mixture", "best_mixture_validation", "mean_over_cells", "cells", "evaluation")
    for key in keys:
        assert evaluated[key] == summary[key], key


def test_every_cell_is_scored_on_the_same_noise_of_each_stream(tiny_recipe) -> None:
    """Cells compare on common noise: two cells with the same networks score the same."""
    recipe = tiny_recipe(generations=1, overrides=[PROBE])
    registries = Registries.from_plugin_manager(make_plugin_manager(extra=[ProbePlugin()]))
    settings = build_settings(recipes.load(recipe, registries), registries, None, torch.device("cpu"))
    topology = build_topology(settings.recipe)
    cells = [Cell(i, topology.neighbours(i), settings) for i in range(2)]
    for cell in cells:
        cell.initialise()
    cells[1].populations["generator"] = cells[0].populations["generator"]  # cell 1's own generator is cell 0's
    cells[1].mixture = {1: 1.0}
    cells[0].mixture = {0: 1.0}
    scores = score_cells(cells, settings, seed=3)
    assert scores["0"]["generator"] == scores["1"]["generator"] and scores["0"]["mixture"] == scores["1"]["mixture"]
    assert scores["0"]["validation"] == scores["1"]["validation"]
    assert scores["0"]["mixture"] != scores["0"]["validation"]["mixture"]
    assert score_cells(cells, settings, seed=4)["0"]["mixture"] != scores["0"]["mixture"]


def test_best_cell_and_means_read_the_validation_and_the_test_figures() -> None:
    def cell(test: float, generator: float, validation: float) -> dict:
        return {"mixture_score": test, "mixture": {"m": test}, "generator": {"m": generator}, "validation": {
            "mixture_score": validation
        }}

    scores = {"0": cell(0.1, 1.0, 0.5), "1": cell(0.9, 3.0, 0.2)}
    assert best_cell(scores) == "1"  # best on validation, though cell 0 scores better on test
    assert mean_over_cells(scores, "generator") == {"mixture": {"m": pytest.approx(0.5)}, "generator": {"m": 2.0}}


def test_without_a_mixture_the_best_individual_is_chosen_and_no_mixture_is_reported() -> None:
    """Cells scored with the mixture disabled carry their best individual's figures and ``score``: the
    report names it (``chosen``) and writes no ``best_mixture``."""

    def cell(test: float, validation: float) -> dict:
        return {"host": {"m": test}, "score": test, "validation": {"host": {"m": validation}, "score": validation}}

    scores = {"0": cell(0.1, 0.5), "1": cell(0.9, 0.2)}
    assert best_cell(scores) == "1"
    report = reported(scores, "host")
    assert report["chosen"] == {"cell": 1, "what": "individual", "role": "host", "test": {"m": 0.9},
                                "validation": {"m": 0.2}}
    assert report["best_cell"] == 1 and not [key for key in report if key.startswith("best_mixture")]
    assert report["mean_over_cells"] == {"host": {"m": pytest.approx(0.5)}}
