"""plots/grid.png: the final and best-over-generations scores laid out as the topology (a strip without);
the metrics read as a stream and thinned for a long run."""

from __future__ import annotations

import itertools
import json
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import matplotlib.image
import pytest

from evogan.engine.divergence import divergence_summary
from evogan.engine.plots import _series, plot_grid
from evogan.engine.rundir import RunDirectory
from evogan.plugins import distribution_modules, make_plugin_manager
from evogan.runtime.single import prepare, run_in_process
from evogan.testing import write_tiny_recipe

GAN_PLUGINS = distribution_modules("evogan-gan")  # the GAN problem's plugins, for autoload off


@pytest.mark.parametrize("layout", [(2, 3), None])
def test_grid_png_is_written_for_grids_and_other_topologies(tmp_path: Path, layout: tuple[int, int] | None) -> None:
    run_dir = RunDirectory.create(tmp_path, "grid")
    for generation in (1, 2):
        for cell in range(6):
            score = float("inf") if cell == 5 else 1.0 / (cell + generation)
            run_dir.append_metrics({"cell": cell, "generation": generation, "mixture_score": score})
    path = plot_grid(run_dir, {cell: 0.1 * cell for cell in range(6)}, layout)
    assert path == run_dir.path / "plots" / "grid.png"
    height, width, _ = matplotlib.image.imread(path).shape
    assert width > height  # two panels side by side


def _write_records(run_dir: RunDirectory, generations: int, cells: int) -> None:
    with open(run_dir.path / "metrics.jsonl", "w", encoding="utf-8") as handle:
        for generation in range(1, generations + 1):
            for cell in range(cells):
                record = {
                    "cell": cell,
                    "generation": generation,
                    "h_loss": 1.0 / generation,
                    "best_score": cell,
                    "best_metrics": {"sorted": generation / generations},
                    "padding": "x" * 400,
                }
                handle.write(json.dumps(record) + "\n")


def test_a_long_runs_lines_are_thinned_evenly_and_keep_their_last_generation(tmp_path: Path) -> None:
    run_dir = RunDirectory.create(tmp_path, "long")
    _write_records(run_dir, generations=1001, cells=2)
    series = _series(run_dir.iter_metrics(), limit=100)
    assert set(series) == {"h_loss", "best_score", "best sorted"}
    for lines in series.values():
        for points in lines.values():
            generations = sorted(g for g, _ in points)
            assert 100 <= len(generations) <= 202 and generations[-1] == 1001
            assert len({b - a for a, b in itertools.pairwise(generations[:-1])}) == 1  # one stride
    short = _series([{"cell": 0, "generation": g, "h_loss": 0.5, "best_score": 0.1} for g in (1, 2, 3)])
    assert short["h_loss"][0] == [(1, 0.5), (2, 0.5), (3, 0.5)]  # a short run: every generation


def test_run_end_reads_the_records_as_a_stream(tmp_path: Path) -> None:
    """A long run's metrics.jsonl reaches hundreds of MB: the summary, plots and resume never hold it."""
    run_dir = RunDirectory.create(tmp_path, "stream")
    _write_records(run_dir, generations=2000, cells=4)
    size = (run_dir.path / "metrics.jsonl").stat().st_size

    def peak(read: Callable[[], object]) -> int:
        tracemalloc.start()
        try:
            read()
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    assert peak(run_dir.read_metrics) > size  # the list: what the stream saves
    assert peak(lambda: _series(run_dir.iter_metrics(), limit=100)) < size / 10
    assert peak(lambda: divergence_summary(run_dir.iter_metrics())) < size / 20
    assert peak(lambda: run_dir.truncate_records({0: 1000})) < size / 20
    kept = run_dir.read_metrics()
    assert len(kept) == 3 * 2000 + 1000 and max(r["generation"] for r in kept if r["cell"] == 0) == 1000


def test_a_runs_end_reads_its_records_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The divergence summary and both plots fold the records in one pass: a long run's end parses its
    hundreds of MB of metrics.jsonl once, not once per consumer."""
    reads: list[Path] = []
    stream = RunDirectory.iter_metrics

    def counted(self: RunDirectory) -> Iterator[dict[str, Any]]:
        reads.append(self.path)
        return stream(self)

    monkeypatch.setattr(RunDirectory, "iter_metrics", counted)
    recipe = write_tiny_recipe(tmp_path, generations=2)  # entry-point plugins (TensorBoard's) read on their own
    pm = make_plugin_manager(autoload=False, modules=GAN_PLUGINS)
    prepared = prepare(recipe, run_dir_path=tmp_path / "run", pm=pm)
    summary = run_in_process(prepared)
    assert len(reads) == 1
    run = prepared.run_dir.path
    assert summary["diverged"] == {} and summary["diverged_at_end"] == []
    assert (run / "plots" / "metrics.png").stat().st_size > 0 and (run / "plots" / "grid.png").stat().st_size > 0
