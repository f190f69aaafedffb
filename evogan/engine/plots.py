"""PNG plots of a run's metrics over generations, per cell (written into ``plots/``)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from evogan.engine.rundir import RunDirectory


def _series(records: list[dict[str, Any]]) -> dict[str, dict[int, list[tuple[int, float]]]]:
    """metric name -> cell -> [(generation, value)]."""
    series: dict[str, dict[int, list[tuple[int, float]]]] = defaultdict(lambda: defaultdict(list))
    for record in records:
        cell, generation = record["cell"], record["generation"]
        values = {
            "g_loss": record["g_loss"],
            "d_loss": record["d_loss"],
            "mixture_score": record["mixture_score"],
        }
        values.update({f"mixture {k}": v for k, v in record.get("mixture_metrics", {}).items()})
        values.update({f"sparsity {k}": v for k, v in record.get("sparsity", {}).items()})
        for name, value in values.items():
            if isinstance(value, int | float):
                series[name][cell].append((generation, float(value)))
    return series


def plot_metrics(run_dir: RunDirectory) -> list[Path]:
    """One figure with a panel per metric; returns the files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = run_dir.read_metrics()
    if not records:
        return []
    series = _series(records)
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


__all__ = ["plot_metrics"]
