"""Helpers shared by the benchmark scripts: run a recipe in this process and read its results; the raw
per-run logs (``benchmarks/logs/<script>/<commit>.jsonl``) that every table is re-derived from. The logs are
written as ``evogan sweep`` writes its lines (:func:`append_log` is its ``append_line``) and the tables'
mean ± sd is ``evogan compare``'s (:func:`mean_sd`)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from evogan.compare import mean_sd  # the scripts' mean ± sd: evogan compare's, one code path
from evogan.runtime.single import prepare, run_in_process
from evogan.sweep import append_line as append_log  # one run, one line, in one O_APPEND write

__all__ = ["LOGS", "ROOT", "append_log", "git_commit", "log_path", "machine", "mean_sd", "quiet_overrides"]
__all__ += ["read_logs", "run_recipe", "timings"]

ROOT = Path(__file__).resolve().parents[1]
LOGS = ROOT / "benchmarks" / "logs"


def run_recipe(
    recipe: Path, overrides: Sequence[str], stop: Callable[[], bool] = lambda: False
) -> tuple[dict[str, Any], float, Path]:
    """Run quietly; return (summary, wall seconds, run directory). ``stop`` is asked after each
    generation: true ends the run there, checkpoints written (as a first Ctrl-C does)."""
    prepared = prepare(recipe, overrides=list(overrides))
    started = time.perf_counter()
    summary = run_in_process(prepared, stop=stop)
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


# ------------------------------------------------------------------------------------------ raw logs
def git_commit() -> tuple[str, bool]:
    """HEAD's short hash and whether tracked files differ from it (figures of a dirty tree do not
    re-derive from the commit; their log file says so in its name)."""

    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)

    head = git("rev-parse", "--short=12", "HEAD")
    if head.returncode != 0:  # a copy without .git (the GPU machine's): the commit it was made from, if given
        given = os.environ.get("EVOGAN_COMMIT", "")
        return (given[:12], False) if given else ("unknown", True)
    return head.stdout.strip(), git("diff", "--quiet", "HEAD", "--").returncode != 0


def machine() -> dict[str, Any]:
    """What else the machine was doing: load averages (1, 5, 15 min), cores, architecture."""
    return {"load": [round(x, 2) for x in os.getloadavg()], "cpus": os.cpu_count(), "arch": platform.machine()}


def log_path(script: str, log_dir: Path = LOGS) -> Path:
    """``<log_dir>/<script>/<commit>.jsonl`` (``<commit>-dirty.jsonl`` for a tree with changes)."""
    commit, dirty = git_commit()
    return log_dir / script / f"{commit}{'-dirty' if dirty else ''}.jsonl"


def read_logs(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """Every record of the given files, and of every ``*.jsonl`` inside the given directories."""
    records = []
    for path in paths:
        files = sorted(path.glob("*.jsonl")) if path.is_dir() else [path]
        for file in files:
            records += [json.loads(line) for line in file.read_text(encoding="utf-8").splitlines() if line.strip()]
    return records
