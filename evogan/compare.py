"""``evogan compare``: the lines ``evogan sweep`` wrote, as a table of mean ± sd per configuration (and
per horizon where the runs were scored along), each configuration against a baseline (the difference of
the means, the pooled sd and Welch's t-test), and a plot of the figure against steps. Everything is
re-derived from the raw lines; nothing else is read.

The figure compared is the chosen mixture's on the test stream (the mixture was chosen on the validation
stream, which the table shows beside it); the mean over the cells' own generators is shown too.

The project's benchmark logs (``benchmarks/logs/grid_size``, ``mode_collapse``, ``sparse``) read as sweep
lines too (:func:`from_benchmark`), so the tables of ``benchmarks/RESULTS.md`` re-derive with
``evogan compare``; the benchmarks' own tables take their statistics from here (:func:`mean_sd`,
:func:`contrast`).
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import click

from evogan.cli_common import handle_errors
from evogan.errors import UserError

# Which way is better, by figure name; a figure not named here takes the direction its line's metric
# records for its primary figure (``metric.lower_is_better``), else lower.
HIGHER_IS_BETTER = frozenset(
    {"modes_covered", "hq_fraction", "classes_covered", "precision", "recall", "coverage", "density", "is"}
)
LOWER_IS_BETTER = frozenset({"fid", "kid", "tvd"})


# ------------------------------------------------------------------------------------------ statistics
def _continued_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz's method)."""
    tiny, h = 1e-300, 1.0
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function I_x(a, b), for 0 <= x <= 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _continued_fraction(a, b, x) / a
    return 1.0 - front * _continued_fraction(b, a, 1.0 - x) / b


def welch(a: Sequence[float], b: Sequence[float]) -> tuple[float, float, float]:
    """Welch's unequal-variances t-test of ``a`` against ``b``: (t, degrees of freedom, two-sided p);
    NaNs when either has fewer than two values or both have no spread."""
    if len(a) < 2 or len(b) < 2:
        return math.nan, math.nan, math.nan
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    if va + vb == 0 or not math.isfinite(va + vb):
        return math.nan, math.nan, math.nan
    t = (statistics.fmean(a) - statistics.fmean(b)) / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    return t, df, incomplete_beta(df / 2.0, 0.5, df / (df + t * t))


def pooled_sd(a: Sequence[float], b: Sequence[float]) -> float:
    """The pooled standard deviation of two samples (NaN without a degree of freedom)."""
    df = len(a) + len(b) - 2
    if df < 1:
        return math.nan
    spread = sum((x - statistics.fmean(a)) ** 2 for x in a) + sum((x - statistics.fmean(b)) ** 2 for x in b)
    return math.sqrt(spread / df)


def spread(values: Sequence[float]) -> dict[str, Any]:
    """Mean and sd over seeds (the sd NaN for one value), and the values."""
    return {
        "n": len(values),
        "mean": statistics.fmean(values),
        "sd": statistics.stdev(values) if len(values) > 1 else math.nan,
        "values": list(values),
    }


def contrast(a: Sequence[float], b: Sequence[float]) -> dict[str, float]:
    """``a`` against ``b``: the difference of the means, the pooled sd and Welch's t-test (t, degrees of
    freedom, two-sided p); the one comparison of ``evogan compare`` and of the benchmarks' tables."""
    t, df, p = welch(a, b)
    difference = statistics.fmean(a) - statistics.fmean(b)
    return {"difference": difference, "pooled_sd": pooled_sd(a, b), "welch_t": t, "welch_df": df, "p": p}


def mean_sd(values: Sequence[float], digits: int | None = None) -> str:
    """Mean ± sd over seeds as the benchmarks' markdown tables print it (:func:`spread`'s figures): three
    significant digits (two for the sd), or ``digits`` decimals for both; the mean alone for one value."""
    figures = spread(values)
    if digits is None:
        mean, sd = "{:.3g}", "{:.2g}"
    else:
        mean = sd = f"{{:.{digits}f}}"
    if figures["n"] == 1:
        return mean.format(figures["mean"])
    return f"{mean.format(figures['mean'])} ± {sd.format(figures['sd'])}"


# ------------------------------------------------------------------------------------------ reading
REQUIRED = ("config", "seed", "test", "validation", "mean_over_cells")

# The figure each grid benchmark compares its grid and controls on (``benchmarks/<script>.py``'s target).
BENCHMARK_TARGETS = {"grid_size": "fid", "mode_collapse": "modes_covered"}


def from_benchmark(record: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """A line of the project's benchmark logs in a sweep line's shape (None for any other line), so their
    committed raw logs compare as sweeps do:

    - a grid benchmark's line (``benchmarks/_controls.py``: ``script``, ``configs``, the figures under
      ``test.best_mixture``) once per configuration it names, ``vary`` ``{"config": NAME}`` (so
      ``--baseline config=lone-steps``), the recipe with its contents' hash, ``set`` and the base
      generations as the sweep's recipe, ``set`` and ``requested_generations``;
    - a sparse benchmark's line (``benchmarks/sparse.py``: ``variant``, ``density_g``, the final
      generator's ``fid``, ``tvd``, ``classes``) as configuration ``VARIANT d_G D%``, ``vary``
      ``{"variant": ..., "d_G": ...}``; it records no validation figures and no means over cells.
    """
    if "configs" in record and "script" in record and "best_mixture" in (record.get("test") or {}):
        recipe = str(record.get("recipe")) + (f"@{record['recipe_sha']}" if record.get("recipe_sha") else "")
        target = BENCHMARK_TARGETS.get(str(record["script"]))
        line = {
            "recipe": recipe,
            "set": record.get("set", []),
            "requested_generations": record.get("base_generations"),
            "seed": record["seed"],
            "generations": record.get("generations"),
            "training_flops": record.get("training_flops"),
            "test": record["test"]["best_mixture"],
            "validation": (record.get("validation") or {}).get("best_mixture"),
            "mean_over_cells": record["test"].get("mean_over_cells"),
            "metric": {"primary": target} if target else None,
            "commit": record.get("commit"),
        }
        return [{**line, "config": name, "vary": {"config": name}} for name in record["configs"]]
    if "variant" in record and "density_g" in record and "fid" in record:
        grid = int(record.get("grid") or 1)
        variant = str(record["variant"]) + (f" {grid}x{grid}" if grid > 1 else "")
        density = f"{float(record['density_g']):.0%}"
        generations = next(
            (int(o.partition("=")[2]) for o in record.get("overrides", []) if o.startswith("run.generations=")), None
        )
        figures = {"fid": record["fid"], "fid_last10": record.get("fid_last10"), "tvd": record.get("tvd")}
        figures["classes_covered"] = record.get("classes")
        return [
            {
                "recipe": "benchmarks/sparse.py",
                "set": [],
                "requested_generations": generations,
                "seed": record["seed"],
                "generations": generations,
                "steps": record.get("steps"),
                "test": {k: v for k, v in figures.items() if v is not None},
                "validation": None,
                "mean_over_cells": None,
                "metric": {"primary": "fid", "lower_is_better": True},
                "commit": record.get("commit"),
                "config": f"{variant} d_G {density}",
                "vary": {"variant": variant, "d_G": density},
            }
        ]
    return None


def read_lines(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """Every line of the given JSONL files (and of every ``*.jsonl`` in a given directory), a benchmark
    log's in a sweep line's shape (:func:`from_benchmark`); ``UserError`` naming the file (and line) that
    is missing, unreadable, not JSON or not a sweep line."""
    files: list[Path] = []
    for path in paths:
        files += sorted(path.glob("*.jsonl")) if path.is_dir() else [path]
    records = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise UserError(f"{path}: no such file") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise UserError(f"{path}: cannot read ({type(exc).__name__})") from None
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise UserError(f"{path}:{number}: not a JSON line ({exc.msg})") from None
            converted = from_benchmark(record) if isinstance(record, dict) else None
            if converted is not None:
                records += converted
                continue
            if not isinstance(record, dict) or (missing := [k for k in REQUIRED if k not in record]):
                what = ", ".join(missing) if isinstance(record, dict) else "a JSON object"
                raise UserError(f"{path}:{number}: not an evogan sweep line (no {what})")
            records.append(record)
    if not records:
        raise UserError(f"{', '.join(map(str, paths))}: no lines to compare")
    return records


def only(records: Sequence[dict[str, Any]], configs: Sequence[str]) -> list[dict[str, Any]]:
    """The lines of the named configurations (all of them when none are named)."""
    if not configs:
        return list(records)
    kept = [r for r in records if str(r["config"]) in configs]
    if missing := [c for c in configs if c not in {str(r["config"]) for r in kept}]:
        names = ", ".join(dict.fromkeys(str(r["config"]) for r in records))
        raise UserError(f"--config {', '.join(missing)}: not in the lines; configurations: {names}")
    return kept


def metric_name(records: Sequence[Mapping[str, Any]], wanted: str | None) -> str:
    available = sorted(set.intersection(*(set(r["test"]) for r in records)))
    if wanted is None:
        primary = (records[0].get("metric") or {}).get("primary")
        wanted = primary if primary in available else (available[0] if available else None)
    if wanted not in available:
        figures = ", ".join(available) or "(no figures)"
        raise UserError(f"--metric {wanted}: not a figure of every line; figures: {figures}")
    return str(wanted)


def lower_is_better(records: Sequence[Mapping[str, Any]], name: str) -> bool:
    if name in HIGHER_IS_BETTER or name in LOWER_IS_BETTER:
        return name in LOWER_IS_BETTER
    metric = records[0].get("metric") or {}
    return bool(metric.get("lower_is_better", True)) if metric.get("primary") == name else True


def group_name(record: Mapping[str, Any], differing: Sequence[str]) -> str:
    """The configuration's label, prefixed by what else differs between the compared lines (``-`` for an
    empty ``--set``)."""
    parts = []
    for field in differing:
        value = record.get(field)
        parts.append((" ".join(value) or "-") if isinstance(value, list) else str(value))
    return " | ".join([*parts, str(record["config"])])


def points(record: Mapping[str, Any]) -> list[tuple[str, int, Mapping[str, Any]]]:
    """(horizon kind, horizon, figures) per scored point of a line: every ``along`` row, else its end."""
    rows = record.get("along") or [{**record, "generation": record.get("generations") or 0}]
    return [
        ("steps" if "steps" in row else "generation", int(row.get("steps", row["generation"])), row) for row in rows
    ]


def _spread_of(entries: Sequence[tuple[int, Mapping[str, Any]]], pick: Any) -> dict[str, Any] | None:
    """:func:`spread` of ``pick(row)`` over the entries; None when a line does not record it."""
    values = [pick(row) for _, row in entries]
    return spread([float(v) for v in values]) if all(v is not None for v in values) else None


def summarise(
    records: Sequence[Mapping[str, Any]], metric: str, baseline: Sequence[str]
) -> dict[str, Any]:
    """The comparison as data: one row per (configuration, horizon). A configuration is compared with the
    baseline at the same horizon; lines scored only at their end (no ``along``) compare end with end, so a
    control trained longer (more generations) is compared too."""
    fields = ("recipe", "set", "requested_generations")
    differing = [f for f in fields if len({json.dumps(r.get(f)) for r in records}) > 1]
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for record in records:
        groups.setdefault(group_name(record, differing), []).append(record)
    base = baseline_of(groups, baseline)
    by_point: dict[tuple[str, tuple[str, int]], list[tuple[int, Mapping[str, Any]]]] = {}
    ends: dict[str, set[tuple[str, int]]] = {name: set() for name in groups}
    for name, runs in groups.items():
        for record in runs:
            for kind, at, row in points(record):
                by_point.setdefault((name, (kind, at)), []).append((int(record["seed"]), row))
                if not record.get("along"):
                    ends[name].add((kind, at))
    rows = []
    for (name, (kind, at)), entries in sorted(by_point.items(), key=lambda i: (list(groups).index(i[0][0]), i[0][1])):
        entries.sort(key=lambda e: e[0])
        recorded = (row["mean_over_cells"] for _, row in entries if row.get("mean_over_cells"))
        cells: Mapping[str, Any] = next(recorded, {})
        alone = next((role for role in cells if role != "mixture"), "mixture" if cells else "generator")
        test = [float(row["test"][metric]) for _, row in entries]
        row_out: dict[str, Any] = {
            "config": name,
            "vary": groups[name][0].get("vary", {}),
            kind: at,
            "seeds": [seed for seed, _ in entries],
            "test": spread(test),
            "validation": _spread_of(entries, lambda row: (row.get("validation") or {}).get(metric)),
            f"mean_cell_{alone}": _spread_of(
                entries, lambda row, alone=alone: ((row.get("mean_over_cells") or {}).get(alone) or {}).get(metric)
            ),
        }
        other = by_point.get((base, (kind, at))) if name != base else None
        if name != base and other is None and (kind, at) in ends[name] and len(ends[base]) == 1:
            ((base_kind, base_at),) = ends[base]  # each run's end against the baseline's
            other = by_point[(base, (base_kind, base_at))]
            row_out[f"baseline_{base_kind}"] = base_at
        if other:
            row_out |= contrast(test, [float(row["test"][metric]) for _, row in other])
        rows.append(row_out)
    return {"metric": metric, "lower_is_better": lower_is_better(records, metric), "baseline": base, "rows": rows}


def baseline_of(groups: Mapping[str, Sequence[Mapping[str, Any]]], baseline: Sequence[str]) -> str:
    """The configuration every ``KEY=V`` of ``--baseline`` picks (default: the first in the lines)."""
    if not baseline:
        return next(iter(groups))
    wanted: dict[str, str] = {}
    for text in baseline:
        key, sep, value = text.partition("=")
        if not sep:
            raise UserError(f"--baseline {text!r}: expected KEY=VALUE, a key and value of --vary")
        wanted[key.strip()] = value.strip()
    def same(a: Any, b: str) -> bool:
        return str(a).replace(" ", "") == b.replace(" ", "")

    def picked(runs: Sequence[Mapping[str, Any]]) -> bool:
        return all(same(runs[0].get("vary", {}).get(k, ""), v) for k, v in wanted.items())

    matches = [name for name, runs in groups.items() if picked(runs)]
    given = " ".join(baseline)
    if not matches:
        raise UserError(f"--baseline {given}: no configuration has it; configurations: {', '.join(groups)}")
    if len(matches) > 1:
        raise UserError(f"--baseline {given}: matches {len(matches)} configurations; name every varied key")
    return matches[0]


# ------------------------------------------------------------------------------------------ output
def figure(summary: Mapping[str, Any], key: str) -> str:
    value = summary[key]
    if value is None:  # not recorded (a sparse benchmark's line has no validation figures)
        return "-"
    if value["n"] < 2:
        return f"{value['mean']:.4g}"
    return f"{value['mean']:.4g} ± {value['sd']:.2g}"


def print_table(result: Mapping[str, Any]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    direction = "lower" if result["lower_is_better"] else "higher"
    title = (
        f"{result['metric']} ({direction} is better), mean ± sd over seeds; the mixture chosen on validation, "
        f"reported on test; baseline: {result['baseline']}"
    )
    table = Table(title=escape(title), title_justify="left", box=None, header_style="bold")
    cell_key = next(k for k in result["rows"][0] if k.startswith("mean_cell_"))
    for column in ("configuration", "at", "seeds", "test", "validation", cell_key.replace("_", " ")):
        table.add_column(column, justify="left" if column == "configuration" else "right")
    for column in ("difference", "pooled sd", "Welch p"):
        table.add_column(column, justify="right")
    for row in result["rows"]:
        at = f"{row['steps']} steps" if "steps" in row else f"gen. {row['generation']}"
        compared = [
            f"{row['difference']:+.4g}",
            f"{row['pooled_sd']:.2g}",
            "-" if math.isnan(row["p"]) else f"{row['p']:.3g}",
        ] if "difference" in row else ["-", "-", "-"]
        seeds = " ".join(map(str, row["seeds"]))
        figures = [figure(row, "test"), figure(row, "validation"), figure(row, cell_key)]
        table.add_row(escape(row["config"]), at, seeds, *figures, *compared)
    console = Console()
    if not console.is_terminal:  # a pipe or a file: whole rows, not an 80-column guess
        console = Console(width=240)
    console.print(table)


def plot(result: Mapping[str, Any], path: Path) -> None:
    """The test figure (mean, sd bars) against steps (or generations) per configuration."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves: dict[str, list[Mapping[str, Any]]] = {}
    for row in result["rows"]:
        curves.setdefault(row["config"], []).append(row)
    steps = all("steps" in row for row in result["rows"])
    fig, axes = plt.subplots(figsize=(7, 4.5), dpi=110)
    for name, rows in curves.items():
        xs = [row["steps" if steps else "generation"] for row in rows]
        means = [row["test"]["mean"] for row in rows]
        sds = [0.0 if math.isnan(row["test"]["sd"]) else row["test"]["sd"] for row in rows]
        axes.errorbar(xs, means, yerr=sds, fmt="-o", capsize=3, label=name)
    axes.set_xlabel("generator steps per cell" if steps else "generation")
    direction = "lower" if result["lower_is_better"] else "higher"
    axes.set_ylabel(f"test {result['metric']} ({direction} is better)")
    axes.set_title("chosen mixture, mean ± sd over seeds")
    axes.legend(fontsize=7)
    fig.tight_layout()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path)
    except OSError as exc:
        raise UserError(f"{path}: cannot write: {exc.strerror or exc}") from None
    finally:
        plt.close(fig)


def _finite(value: Any) -> Any:
    """NaN and infinities as null: JSON has no numbers for them."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


@click.command()
@click.argument("logs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--baseline",
    multiple=True,
    metavar="KEY=V",
    help="The configuration the others are compared with, by its --vary value(s) (default: the first one "
    "in the lines). Repeatable, one per varied key.",
)
@click.option("--metric", help="The figure to compare (default: the metric's primary, e.g. fid or tvd).")
@click.option(
    "--config",
    "configs",
    multiple=True,
    metavar="NAME",
    help="Compare only this configuration (its label in the lines, e.g. a benchmark's grid-3x3). Repeatable.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON instead of a table.")
@click.option(
    "--plot",
    "plot_to",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Draw the test figure against steps per configuration into this PNG.",
)
@handle_errors
def compare(
    logs: tuple[Path, ...],
    baseline: tuple[str, ...],
    metric: str | None,
    configs: tuple[str, ...],
    as_json: bool,
    plot_to: Path | None,
) -> None:
    """Compare the configurations of `evogan sweep` logs (LOGS: JSONL files, or directories of them; the
    project's benchmark logs too): mean ± sd over seeds per configuration and horizon, and each against the
    baseline: the difference of the means, the pooled sd and Welch's t-test p-value; all from the lines
    alone."""
    records = only(read_lines(logs), configs)
    result = summarise(records, metric_name(records, metric), baseline)
    if plot_to is not None:
        plot(result, plot_to)
    if as_json:
        click.echo(json.dumps(_finite(result), indent=2))
    else:
        print_table(result)
        if plot_to is not None:
            click.echo(f"plot: {plot_to}")


__all__ = [
    "compare",
    "contrast",
    "from_benchmark",
    "incomplete_beta",
    "mean_sd",
    "pooled_sd",
    "read_lines",
    "spread",
    "summarise",
    "welch",
]
