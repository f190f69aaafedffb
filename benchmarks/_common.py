"""Helpers shared by the benchmark scripts: run a recipe in this process and read its results."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evogan.runtime.single import prepare, run_in_process


def run_recipe(recipe: Path, overrides: Sequence[str]) -> tuple[dict[str, Any], float, Path]:
    """Run quietly; return (summary, wall seconds, run directory)."""
    prepared = prepare(recipe, overrides=list(overrides))
    started = time.perf_counter()
    summary = run_in_process(prepared)
    return summary, time.perf_counter() - started, prepared.run_dir.path


def quiet_overrides(seed: int, generations: int, threads: int, output: Path) -> list[str]:
    """The overrides every quality benchmark starts from: seed, length, threads, output directory, and no
    pictures or checkpoints (they cost time and say nothing here)."""
    return [
        f"run.seed={seed}",
        f"run.generations={generations}",
        f"run.threads={threads}",
        "run.samples_every=0",
        "run.checkpoint_every=0",
        f"run.output_dir={json.dumps(str(output))}",
    ]


def timings(run_dir: Path) -> list[dict[str, float]]:
    return [json.loads(line) for line in (run_dir / "timings.jsonl").read_text().splitlines()]


def mean_sd(values: Sequence[float], digits: int | None = None) -> str:
    """Mean ± sd over seeds: three significant digits (two for the sd), or ``digits`` decimals for both."""
    if digits is None:
        mean, sd = "{:.3g}", "{:.2g}"
    else:
        mean = sd = f"{{:.{digits}f}}"
    if len(values) == 1:
        return mean.format(values[0])
    return f"{mean.format(statistics.mean(values))} ± {sd.format(statistics.stdev(values))}"
