"""The terminal reporter: a rich live view of the grid, or plain lines when output is not a terminal.

The live view shows a table with one row per cell and, beside it (below it on a narrow terminal), the
cells laid out as the topology places them (``Topology.layout``: rows x columns for grids and tori, a list
otherwise), each with its current mixture score coloured from the best (green) to the worst (red).

A plugin like any other: the CLI creates one with its console and registers it with the run's
plugin manager. Library code never creates a console.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from rich.columns import Columns
from rich.console import Console, Group
from rich.live import Live
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

from evogan.engine.plots import cell_rows, record_score
from evogan.hookspecs import hookimpl

if TYPE_CHECKING:
    from evogan.engine.run import RunInfo

Mode = Literal["live", "plain", "quiet"]


def _number(value: Any, digits: int = 4) -> str:
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return "-" if value is None else str(value)


def _label(key: str) -> str:
    """A role key as a column label: ``g`` -> ``G``, ``host`` stays."""
    return key.upper() if len(key) == 1 else key


def metrics_text(metrics: Mapping[str, Any]) -> str:
    """``key=value, ...`` by key (as summary.json holds them), with four significant digits."""
    return ", ".join(f"{key}={_number(value)}" for key, value in sorted(metrics.items()))


def summary_lines(summary: Mapping[str, Any]) -> list[str]:
    """The reported figures of ``summary.json`` (or ``evogan evaluate``'s result): the test means over the
    cells of their mixtures and of each cell's best individual alone, then (last) what was chosen on the
    validation stream (a mixture, or a best individual where the mixture is disabled), scored on the test
    stream with its validation figures beside it."""
    lines = []
    means = summary.get("mean_over_cells")
    if means:
        parts = [f"mixture {metrics_text(means['mixture'])}"] if "mixture" in means else []
        parts += [f"best {part} alone {metrics_text(m)}" for part, m in means.items() if part != "mixture"]
        lines.append(f"mean over cells, test: {'; '.join(parts)}")
    diverged = summary.get("diverged") or {}
    if diverged:
        times = ", ".join(f"cell {cell} ({count}x)" for cell, count in diverged.items())
        at_end = ", ".join(map(str, summary.get("diverged_at_end") or [])) or "none"
        lines.append(f"diverged and restored: {times}; still diverging at the end: {at_end}")
    chosen = summary.get("chosen") or {  # summaries before 0.3 name only the mixture
        "what": "mixture",
        "test": summary["best_mixture"],
        "validation": summary["best_mixture_validation"],
    }
    what = "best mixture ensemble" if chosen["what"] == "mixture" else f"best {chosen.get('role', 'individual')}"
    lines.append(
        f"{what}: cell {summary['best_cell']} (chosen on validation): "
        f"test {metrics_text(chosen['test'])}; validation {metrics_text(chosen['validation'])}"
    )
    return lines


def _peer_age(record: Mapping[str, Any]) -> str | None:
    """Seconds since the stalest neighbour was last heard from (multi-process runs report liveness)."""
    ages = (record.get("timings") or {}).get("liveness")
    if not ages:
        return None
    if any(age is None for age in ages.values()):
        return "never"
    return f"{max(ages.values()):.1f}"


def score_colour(value: float, best: float, worst: float) -> str:
    """A rich colour from green (``best``) through yellow to red (``worst``); lower scores are better."""
    if not math.isfinite(value):
        return "rgb(255,0,0)"
    share = 0.0 if not math.isfinite(worst) or worst <= best else (value - best) / (worst - best)
    share = min(max(share, 0.0), 1.0)
    return f"rgb({min(255, round(510 * share))},{min(200, round(400 * (1 - share)))},0)"


def grid_view(scores: Mapping[int, float], cells: int, layout: tuple[int, int] | None) -> Table:
    """The cells as ``layout`` places them (a list without one): ``cell:score`` each, coloured by score."""
    finite = [v for v in scores.values() if math.isfinite(v)]
    best, worst = (min(finite), max(finite)) if finite else (0.0, 0.0)
    rows = cell_rows(cells, layout)
    label = f"{layout[0]}x{layout[1]}" if layout and layout[0] * layout[1] == cells else "cells"
    view = Table.grid(padding=(0, 2))
    view.title = f"mixture score, {label}"
    view.min_width = len(view.title)  # a title wider than a one-column list stays on one line
    view.title_style = "bold"
    digits = len(str(max(cells - 1, 0)))
    for _ in rows[0]:
        view.add_column()
    for row in rows:
        entries: list[Text] = []
        for cell in row:
            if cell is None:
                entries.append(Text(""))
            elif cell not in scores:
                entries.append(Text(f"{cell:>{digits}}:-", style="dim"))
            else:
                value = scores[cell]
                entries.append(Text(f"{cell:>{digits}}:{_number(value, 3)}", style=score_colour(value, best, worst)))
        view.add_row(*entries)
    return view


class TerminalReporter:
    """Progress with ETA and a table with one row per cell (fitness, learning rates, mixture score,
    sparsity, exchange staleness)."""

    def __init__(self, console: Console, mode: Mode = "live", clock: Any = time.monotonic) -> None:
        self.console = console
        self.mode = mode
        self.clock = clock
        self.rows: dict[int, dict[str, Any]] = {}
        self.diverged: dict[int, int] = {}  # cell -> generations it diverged in (marked `!` in the table)
        self.live: Live | None = None
        self.progress: Progress | None = None
        self.task: Any = None
        self.info: RunInfo | None = None

    # ------------------------------------------------------------------------------------ hooks
    @hookimpl
    def evogan_run_start(self, run: RunInfo) -> None:
        self.info = run
        if self.mode == "quiet":
            return
        remaining = (run.generations - run.start_generation) * len(run.local_cells)
        header = (
            f"evogan: [bold]{run.recipe.name}[/] on {run.topology}, {run.cells} cells, "
            f"{run.generations} generations, device {run.device}, {run.workers} worker(s)"
        )
        if run.start_generation:
            header += f", resuming at generation {run.start_generation}"
        self.console.print(header)
        self.console.print(f"run directory: {run.run_dir.path}")
        if self.mode == "live":
            self.progress = Progress(
                TextColumn("[progress.description]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("cell-generations"),
                TimeElapsedColumn(),
                TextColumn("eta"),
                TimeRemainingColumn(),
                console=self.console,
            )
            self.task = self.progress.add_task("training", total=remaining)
            self.live = Live(self._render(), console=self.console, refresh_per_second=4, transient=False)
            self.live.start()

    @hookimpl
    def evogan_generation_end(
        self, run: RunInfo, cell: int, generation: int, record: Mapping[str, Any]
    ) -> None:
        self.rows[cell] = dict(record)
        if record.get("diverged"):
            self.diverged[cell] = self.diverged.get(cell, 0) + 1
        if self.mode == "plain":
            sparsity = record.get("sparsity") or {}
            extra = "".join(
                f" {key}={_number(sparsity[key])}" for key in ("br", "density_d") if key in sparsity
            )
            age = _peer_age(record)
            if age is not None:
                extra += f" peer_age={age}"
            if record.get("diverged"):
                extra += f" diverged={record['diverged']} restored_from={record.get('restored_from')}"
            roles = "".join(f"{k}={record[k]:.4f} " for k in record if k.endswith("_loss"))
            roles += "".join(f"{k}={record[k]:.3g} " for k in record if k.startswith("lr_"))
            roles += "".join(f"{k}={v:.3g} " for k, v in (record.get("individual_metrics") or {}).items())
            name, score, _ = record_score(record)
            self.console.print(
                f"generation {generation}/{run.generations} cell {cell}: {roles}{name}_score={score:.4f}{extra}",
                highlight=False,
            )
        elif self.mode == "live" and self.progress is not None and self.live is not None:
            self.progress.advance(self.task)
            self.live.update(self._render())

    @hookimpl
    def evogan_run_end(self, run: RunInfo, summary: Mapping[str, Any], interrupted: bool) -> None:
        if self.live is not None:
            self.live.update(self._render())
            self.live.stop()
            self.live = None
        if self.mode == "quiet":
            return
        if interrupted:
            self.console.print(
                "[yellow]stopped early; checkpoints written. Resume with:[/] "
                f"evogan run --resume {run.run_dir.path}"
            )
        self.console.print(f"results in {run.run_dir.path}")
        if summary.get("cells"):  # the reported figures end the output
            for line in summary_lines(summary):
                self.console.print(line, highlight=False)

    # ------------------------------------------------------------------------------------ view
    def table(self) -> Table:
        table = Table(box=None, header_style="bold", pad_edge=False)
        sparse = any(row.get("sparsity") for row in self.rows.values())
        first = next(iter(self.rows.values()), {})
        # the problem's per-role fields (a GAN's g_loss, lr_d...), named by its role keys
        losses = [k for k in first if k.endswith("_loss")]
        rates = [k for k in first if k.startswith("lr_")]
        # and the problem's numbers about its best individuals (a discriminator's d_aug_p)
        traits = list(first.get("individual_metrics") or {})
        role_columns = [f"{_label(k[: -len('_loss')])} loss" for k in losses] + [f"lr {_label(k[3:])}" for k in rates]
        role_columns += traits
        scored = "mixture score" if "mixture_score" in first else "best score"
        columns = ["cell", "gen", *role_columns, scored, "staleness"]
        at = 2 + len(role_columns)
        if sparse:
            columns[at:at] = ["BR", "density G", "density D", "FLOPs"]
        liveness = any(_peer_age(row) is not None for row in self.rows.values())
        if liveness:
            columns.append("peer age s")
        for column in columns:
            table.add_column(column, justify="right")
        if self.diverged:
            table.caption = "cell!: diverged and restored (see its records' restored_from)"
        for cell, row in sorted(self.rows.items()):
            generation = row["generation"]
            marked = f"{cell}!" if self.diverged.get(cell) else str(cell)
            used = row.get("exchange") or {}
            staleness = max((generation - 1 - g for g in used.values()), default=0)
            values = [
                marked,
                str(generation),
                *(_number(row.get(k)) for k in losses),
                *(f"{row[k]:.3g}" if k in row else "-" for k in rates),
                *(_number((row.get("individual_metrics") or {}).get(k), 3) for k in traits),
                _number(record_score(row)[1]),
                str(staleness),
            ]
            if sparse:
                sparsity = row.get("sparsity") or {}
                values[at:at] = [
                    _number(sparsity.get("br"), 3),
                    _number(sparsity.get("density_g"), 3),
                    _number(sparsity.get("density_d"), 3),
                    _number(sparsity.get("flops_ratio"), 3),
                ]
            if liveness:
                values.append(_peer_age(row) or "-")
            table.add_row(*values)
        return table

    def grid(self) -> Table | None:
        if self.info is None:
            return None
        scores = {cell: record_score(row)[1] for cell, row in self.rows.items()}
        return grid_view(scores, self.info.cells, self.info.layout)

    def _render(self) -> Group:
        grid = self.grid()
        parts: list[Any] = [self.table() if grid is None else Columns([self.table(), grid], padding=(0, 4))]
        if self.progress is not None:
            parts.append(self.progress)
        return Group(*parts)


__all__ = ["TerminalReporter", "grid_view", "metrics_text", "score_colour", "summary_lines"]
