"""plots/grid.png: the final and best-over-generations scores laid out as the topology (a strip without)."""

from __future__ import annotations

from pathlib import Path

import matplotlib.image
import pytest

from evogan.engine.plots import plot_grid
from evogan.engine.rundir import RunDirectory


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
