"""PNG plots of a run (written into ``plots/``): metrics over generations per cell, and the grid heatmap."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the reporter imports cell_rows: keep torch (rundir) out of it
    from evogan.engine.rundir import RunDirectory


def record_score(record: Mapping[str, Any]) -> tuple[str, float, dict[str, Any]]:
    """What a generation's record says stands for its cell, as ``(name, score, metrics)``: ``mixture``
    (``mixture_score``, ``mixture_metrics``) where the recipe's mixture is enabled, else ``best`` (the
    cell's best individual alone: ``best_score``, ``best_metrics``). Scores are the problem's objective
    on the validation stream (lower is better)."""
    name = "mixture" if "mixture_score" in record else "best"
    return name, float(record[f"{name}_score"]), dict(record.get(f"{name}_metrics", {}))


PLOT_GENERATIONS = 1000  # a line draws this many to twice as many generations: a long run's, thinned evenly


def _values(record: Mapping[str, Any]) -> dict[str, float]:
    """What a record plots: the problem's per-role losses (a GAN's g_loss and d_loss), then the
    mixture's score (or the best individual's, where the mixture is disabled) and sparsity."""
    values = {k: v for k, v in record.items() if k.endswith("_loss")}
    name, score, metrics = record_score(record)
    values[f"{name}_score"] = score
    values.update({f"{name} {k}": v for k, v in metrics.items()})
    values.update({f"sparsity {k}": v for k, v in record.get("sparsity", {}).items()})
    return {name: float(value) for name, value in values.items() if isinstance(value, int | float)}


class MetricLines:
    """metric name -> cell -> [(generation, value)], folded one record at a time: every ``stride``-th
    generation and each line's last, the stride doubling whenever more than twice ``limit`` generations
    are held (a long run's lines thinned evenly, never the whole file in memory)."""

    def __init__(self, limit: int = PLOT_GENERATIONS) -> None:
        self.limit = limit
        self.series: dict[str, dict[int, list[tuple[int, float]]]] = defaultdict(lambda: defaultdict(list))
        self.last: dict[tuple[str, int], tuple[int, float]] = {}
        self.stride, self.held = 1, set[int]()

    def add(self, record: Mapping[str, Any]) -> None:
        cell, generation = int(record["cell"]), int(record["generation"])
        values = _values(record)
        for name, value in values.items():
            if (name, cell) not in self.last or generation >= self.last[name, cell][0]:
                self.last[name, cell] = (generation, value)
        if generation % self.stride:
            return
        self.held.add(generation)
        for name, value in values.items():
            self.series[name][cell].append((generation, value))
        if len(self.held) > 2 * self.limit:
            self.stride *= 2
            self.held = {g for g in self.held if g % self.stride == 0}
            for lines in self.series.values():
                for points in lines.values():
                    points[:] = [p for p in points if p[0] % self.stride == 0]

    def lines(self) -> dict[str, dict[int, list[tuple[int, float]]]]:
        series = {name: {cell: list(points) for cell, points in lines.items()} for name, lines in self.series.items()}
        for (name, cell), point in self.last.items():
            if point[0] % self.stride:  # held already when on the stride
                series.setdefault(name, {}).setdefault(cell, []).append(point)
        return series


def _series(
    records: Iterable[Mapping[str, Any]], limit: int = PLOT_GENERATIONS
) -> dict[str, dict[int, list[tuple[int, float]]]]:
    fold = MetricLines(limit)
    for record in records:
        fold.add(record)
    return fold.lines()


class BestSeen:
    """Each cell's best score over its generations (what stands for it: mixture or best individual),
    folded one record at a time."""

    def __init__(self) -> None:
        self.scores: dict[int, float] = {}
        self.what = "mixture"

    def add(self, record: Mapping[str, Any]) -> None:
        name, score, _ = record_score(record)
        cell, self.what = int(record["cell"]), "mixture" if name == "mixture" else "best individual's"
        self.scores[cell] = min(score, self.scores.get(cell, score))


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def cell_rows(cells: int, layout: tuple[int, int] | None, *, columns: int = 1) -> list[list[int | None]]:
    """Cell indices as they sit: ``layout`` rows of ``cols`` (cell ``r * cols + c`` at row ``r``, column ``c``);
    without a layout (or one that does not hold ``cells``), rows of ``columns`` cells, the last padded with None."""
    rows, cols = layout if layout and layout[0] * layout[1] == cells else ((cells + columns - 1) // columns, columns)
    return [[r * cols + c if r * cols + c < cells else None for c in range(cols)] for r in range(rows)]


def plot_grid(
    run_dir: RunDirectory,
    final: dict[int, float],
    layout: tuple[int, int] | None,
    records: Iterable[Mapping[str, Any]] | None = None,
    *,
    chosen: int | None = None,
    seen: BestSeen | None = None,
) -> Path:
    """``plots/grid.png``: two heatmaps laid out as the topology (a strip without a 2-D layout), each cell's
    final mixture score (test stream) and the best score it reached over the generations (the mixture
    ES's validation noise; lower is better), or its best individual's where the mixture is disabled;
    ``records``: the run's metrics when the caller has read them
    already, ``seen``: their best scores when the caller has folded them; ``chosen``: the cell chosen on the
    validation stream, boxed in the first (default: its best)."""
    import numpy as np

    plt = _pyplot()
    if seen is None:
        seen = BestSeen()
        for record in run_dir.iter_metrics() if records is None else records:
            seen.add(record)
    best_seen, what = seen.scores, seen.what
    cells = max([*final, *best_seen], default=-1) + 1
    rows = cell_rows(cells, layout, columns=max(cells, 1))
    panels = [
        (f"final {what} score (test)", final, chosen),
        (f"best {what} score over the generations (validation)", best_seen, None),
    ]
    width = max(len(rows[0]), 1)
    figure, axes = plt.subplots(1, 2, figsize=(2 * min(3 + 0.9 * width, 14), min(2 + 0.9 * len(rows), 12)))
    for axis, (title, scores, boxed) in zip(axes, panels, strict=True):
        grid = np.array([[np.nan if i is None else scores.get(i, np.nan) for i in row] for row in rows], float)
        grid[~np.isfinite(grid)] = np.nan  # a diverged cell (inf) shows blank, and its value is written
        image = axis.imshow(np.ma.masked_invalid(grid), cmap="RdYlGn_r", aspect="equal")
        figure.colorbar(image, ax=axis, fraction=0.046, pad=0.04)
        finite = {i: v for i, v in scores.items() if np.isfinite(v)}
        best = boxed if boxed is not None else min(finite, key=lambda i: (finite[i], i)) if finite else None
        for r, row in enumerate(rows):
            for c, index in enumerate(row):
                if index is None or len(rows) * len(row) > 400:  # too small to read beyond 20x20
                    continue
                value = scores.get(index)
                text = "-" if value is None else f"{value:.3g}"
                axis.text(c, r, f"{index}\n{text}", ha="center", va="center", fontsize=7)
                if index == best:
                    axis.add_patch(plt.Rectangle((c - 0.5, r - 0.5), 1, 1, fill=False, edgecolor="black", lw=2))
        axis.set_title(title, fontsize=10)
        axis.set_xticks([])
        axis.set_yticks([])
    boxed_is = "the best" if chosen is None else "the cell chosen on validation (left), the best (right)"
    figure.suptitle(f"cells as the topology lays them out; green is better (lower), boxed: {boxed_is}", fontsize=9)
    figure.tight_layout()
    path = run_dir.path / "plots" / "grid.png"
    path.parent.mkdir(exist_ok=True)
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return path


def plot_metrics(
    run_dir: RunDirectory, records: Iterable[Mapping[str, Any]] | None = None, *, lines: MetricLines | None = None
) -> list[Path]:
    """One figure with a panel per metric (``lines``: the records already folded); returns the files written."""
    plt = _pyplot()
    series = lines.lines() if lines is not None else _series(run_dir.iter_metrics() if records is None else records)
    if not series:
        return []
    names = sorted(series, key=lambda n: (not n.startswith("mixture"), n))
    columns = 3
    rows = (len(names) + columns - 1) // columns
    figure, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.0 * rows), squeeze=False)
    for axis, name in zip(axes.flat, names, strict=False):
        for cell, points in sorted(series[name].items()):
            points.sort()
            axis.plot([p[0] for p in points], [p[1] for p in points], label=f"cell {cell}", linewidth=1.2)
        axis.set_title(name, fontsize=10)
        axis.set_xlabel("generation", fontsize=8)
        axis.tick_params(labelsize=8)
    for axis in list(axes.flat)[len(names) :]:
        axis.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    if len(labels) <= 16:
        figure.legend(handles, labels, loc="lower right", fontsize=8, ncol=2)
    figure.tight_layout()
    path = run_dir.path / "plots" / "metrics.png"
    path.parent.mkdir(exist_ok=True)
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return [path]


__all__ = ["BestSeen", "MetricLines", "cell_rows", "plot_grid", "plot_metrics", "record_score"]
