"""evogan.load: the Python API to a finished run (mixtures, generators, samples, records)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

import evogan
from evogan.errors import UserError
from evogan.testing import run_tiny, write_tiny_recipe


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run_tiny(write_tiny_recipe(tmp_path_factory.mktemp("trained"), generations=2))


def test_the_best_mixture_is_the_runs_and_sampling_is_seeded(run_dir: Path) -> None:
    run = evogan.load(run_dir)
    assert run.summary is not None and run.best_cell == run.summary["best_cell"]
    best = run.mixture()
    assert best.cell == run.best_cell and abs(sum(best.weights) - 1) < 1e-9
    assert best.members == sorted({best.cell, *run.cells[best.cell].neighbours})
    first = run.sample(200)
    assert first.shape == (200, 2) and first.device.type == "cpu"
    assert torch.equal(first, run.sample(200, cell=run.best_cell, seed=0))
    assert torch.equal(first, best.sample(200, generator=torch.Generator().manual_seed(0)))
    assert not torch.equal(first, run.sample(200, seed=1))
    assert run.sample(5, device="cpu").device.type == "cpu"


def test_any_cells_generator_or_mixture(run_dir: Path) -> None:
    run = evogan.load(run_dir)
    for cell in range(4):
        network = run.generator(cell)
        assert network is run.cells[cell].best("generator").network  # dense: evaluation uses it as is
        alone = run.sample(50, cell, single=True, seed=3)
        with torch.no_grad():
            expected = run.problem.mixture_samples([network], [1.0], 50, generator=torch.Generator().manual_seed(3))
        assert torch.equal(alone, expected)
        assert run.mixture(cell).cell == cell
    assert not torch.equal(run.sample(50, 0, seed=3), run.sample(50, 1, seed=3))


def test_records(run_dir: Path) -> None:
    run = evogan.load(run_dir)
    records = run.metrics()
    assert len(records) == 4 * 2 and {r["cell"] for r in records} == {0, 1, 2, 3}
    assert [r["generation"] for r in run.metrics(cell=2)] == [1, 2]
    assert run.summary is not None and set(run.summary["cells"]) == {"0", "1", "2", "3"}


def test_a_stopped_run_has_no_summary_and_its_best_cell_is_scored(run_dir: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)
    summary = evogan.load(run_dir).summary
    (copy / "summary.json").unlink()
    run = evogan.load(copy)
    assert run.summary is None
    assert summary is not None and run.best_cell == summary["best_cell"]  # scored now, as the run did


def test_damaged_summary_is_one_line(run_dir: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)
    (copy / "summary.json").write_text("{cut")
    with pytest.raises(UserError, match=r"summary.json: cannot read the summary \(JSONDecodeError\)"):
        _ = evogan.load(copy).summary


def test_errors(run_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no such run directory"):
        evogan.load(tmp_path / "missing")
    with pytest.raises(UserError, match=r"not a run directory \(no recipe.toml\)"):
        evogan.load(tmp_path)
    empty = tmp_path / "empty"
    shutil.copytree(run_dir, empty, ignore=shutil.ignore_patterns("cell-*"))
    with pytest.raises(UserError, match="no checkpoints to load"):
        evogan.load(empty)
    with pytest.raises(UserError, match="device 'gpu': expected one of cpu, cuda, auto"):
        evogan.load(run_dir, device="gpu")
    run = evogan.load(run_dir)
    for bad in (4, -1, True, "1"):
        with pytest.raises(UserError, match=r"cell .*: the run has cells 0\.\.3"):
            run.sample(3, bad)  # type: ignore[arg-type]
        with pytest.raises(UserError, match=r"the run has cells 0\.\.3"):
            run.generator(bad)  # type: ignore[arg-type]
    with pytest.raises(UserError, match="n=0: the number of samples must be at least 1"):
        run.sample(0)


@pytest.mark.gpu
def test_sample_on_cuda(run_dir: Path) -> None:
    on_gpu = evogan.load(run_dir, device="cuda")
    samples = on_gpu.sample(100, seed=2)
    assert samples.device.type == "cuda"
    on_cpu = evogan.load(run_dir, device="cpu").sample(100, seed=2, device="cuda")
    assert on_cpu.device.type == "cuda"
    torch.testing.assert_close(samples, on_cpu, rtol=1e-4, atol=1e-5)


def test_the_metric_is_prepared_only_when_scores_are_asked_for(
    run_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sampling and exporting a run need no real-data statistics (an Inception pass over CelebA's
    reference sample, for the FID metric): loading skips them until something is scored."""
    from evogan_gan.toy import ModeCoverage

    prepared: list[object] = []
    original = ModeCoverage.prepare
    monkeypatch.setattr(ModeCoverage, "prepare", lambda self, *a, **k: prepared.append(self) or original(self, *a, **k))
    run = evogan.load(run_dir)
    run.sample(10, cell=1)
    assert run.summary is not None and run.best_cell == run.summary["best_cell"]  # nothing scored
    assert prepared == []
    first = run.scores()
    assert len(prepared) == 2 and run.scores() == first and len(prepared) == 2  # one metric per score stream
    assert {c: s["mixture"] for c, s in first.items()} == {
        c: s["mixture"] for c, s in (run.summary or {})["cells"].items()
    }  # the same scores the run recorded at its end
