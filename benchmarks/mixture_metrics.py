"""What the feature metrics beside FID (KID, precision/recall, density, coverage) add to the mixture phase.

    nice -n 5 .venv/bin/python benchmarks/mixture_metrics.py                     # 3x3 demo, 3 repeats
    nice -n 5 .venv/bin/python benchmarks/mixture_metrics.py --repeats 5 --generations 8 --before b7c18e1

Runs ``recipes/demo.toml`` as a 3x3 grid in one process (one batch per generation: the mixture phase does
not depend on training), all configurations in this one process, taking turns so they see the same load:

- ``off``: ``kid_subsets = 0``, ``nearest_k = 0``: FID, TVD and classes covered alone, what a score cost
  before the new metrics (issue 26);
- ``on, <rev>``: the new metrics as ``evogan/builtin/gan/feature_metrics.py`` computed them at commit
  ``--before`` (that file loaded from git in its place; the rest of the code is this tree's);
- ``on``: the new metrics as this tree computes them.

Per run: the mean seconds per cell-generation of the ``mixture`` phase of ``timings.jsonl`` (two mixture
scores per cell-generation; the first ``--warmup`` generations dropped), and the share of it spent in the new
metrics (``feature_scores``, timed inside the phase). Per configuration the median over the repeats, its ratio
to ``off``'s, and the ratio within the runs themselves, phase / (phase - new metrics): the same question asked
without comparing runs that met different loads (the more robust of the two here). The mixture records of the
two ``on`` configurations must be the same to the last bit (the script says so). The phase clock is this
process's CPU time by default (``--clock cpu``), which a shared machine's load moves far less than wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import git_commit, run_recipe, timings

from evogan.builtin.gan import feature_metrics, image_metrics
from evogan.engine import cell

ROOT = Path(__file__).resolve().parents[1]
OFF = ["problem.metric.kid_subsets=0", "problem.metric.nearest_k=0"]
inside = {"mixture": False, "seconds": 0.0}  # whether a cell is in its mixture phase; feature metrics' time there


def module_at(rev: str) -> types.ModuleType:
    """``feature_metrics`` as it was at ``rev``."""
    source = subprocess.run(
        ["git", "show", f"{rev}:evogan/builtin/gan/feature_metrics.py"], cwd=ROOT, capture_output=True,
        text=True, check=True,
    ).stdout  # fmt: skip
    module = types.ModuleType(f"feature_metrics_{rev}")
    exec(compile(source, f"feature_metrics@{rev}", "exec"), module.__dict__)  # our own history
    return module


def instrument(clock: Callable[[], float]) -> None:
    """Time ``feature_scores`` while a cell evolves its mixture."""
    evolve, scores = cell.Cell._evolve_mixture, image_metrics.feature_scores

    def evolve_timed(self: Any, rnd: Any) -> Any:
        inside["mixture"] = True
        try:
            return evolve(self, rnd)
        finally:
            inside["mixture"] = False

    def scores_timed(*args: Any, **kwargs: Any) -> Any:
        started = clock()
        try:
            return scores(*args, **kwargs)
        finally:
            if inside["mixture"]:
                inside["seconds"] += clock() - started

    cell.Cell._evolve_mixture = evolve_timed  # type: ignore[method-assign]
    image_metrics.feature_scores = scores_timed


def one_run(args: argparse.Namespace, sets: list[str]) -> tuple[float, float, list[Any]]:
    """Mixture seconds per cell-generation, the feature metrics' share of them, the mixture records."""
    with tempfile.TemporaryDirectory() as tmp:
        overrides = [
            f"run.generations={args.generations}",
            "run.seed=1",
            "run.workers=1",
            "run.checkpoint_every=0",
            "run.samples_every=0",
            f"run.output_dir={json.dumps(tmp)}",
            f"topology.rows={args.side}",
            f"topology.cols={args.side}",
            f"problem.batches_per_generation={args.batches}",
            *sets,
            *args.sets,
        ]
        inside["seconds"] = 0.0
        _, _, run_dir = run_recipe(args.recipe, overrides)
        rows = timings(run_dir)
        records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    share = inside["seconds"] / sum(r["mixture"] for r in rows)
    kept = [r for r in rows if r["generation"] > args.warmup]
    mixtures = [(r["cell"], r["generation"], r["mixture"], r["mixture_metrics"]) for r in records]
    return statistics.mean(r["mixture"] for r in kept), share, mixtures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", type=Path, default=ROOT / "recipes" / "demo.toml")
    parser.add_argument("--side", type=int, default=3)
    parser.add_argument("--batches", type=int, default=1)
    parser.add_argument("--generations", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--before", default="b7c18e1", help="commit whose feature_metrics.py is 'on, before'")
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument(
        "--clock", choices=("wall", "cpu"), default="cpu", help="cpu: process CPU seconds (robust to load)"
    )
    args = parser.parse_args()
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    time.perf_counter = clock  # the engine's phase clock reads it
    instrument(clock)
    commit, dirty = git_commit()
    print(f"commit {commit}{' (dirty)' if dirty else ''}; load before: {os.getloadavg()[0]:.2f}; clock: {args.clock}")
    current, before = feature_metrics, module_at(args.before)
    configs = {"off": (OFF, current), f"on, {args.before}": ([], before), "on": ([], current)}
    seconds: dict[str, list[float]] = {name: [] for name in configs}
    shares: dict[str, list[float]] = {name: [] for name in configs}
    records: dict[str, list[Any]] = {}
    for _ in range(args.repeats):
        for name, (sets, module) in configs.items():
            image_metrics.feature_metrics = module  # type: ignore[attr-defined]
            mixture, share, records[name] = one_run(args, sets)
            seconds[name].append(mixture)
            shares[name].append(share)
    image_metrics.feature_metrics = current  # type: ignore[attr-defined]
    off = statistics.median(seconds["off"])
    print(
        "\n| configuration | mixture ms per cell-generation (median) | / off | new metrics' share "
        "| / itself without them | runs (ms) |"
    )
    print("|---|---|---|---|---|---|")
    for name, values in seconds.items():
        runs = ", ".join(f"{v * 1e3:.1f}" for v in values)
        median = statistics.median(values)
        share = statistics.median(shares[name])
        within = 1 / (1 - share)
        print(f"| {name} | {median * 1e3:.1f} | {median / off:.3f} | {share:.1%} | {within:.3f} | {runs} |")
    same = records[f"on, {args.before}"] == records["on"]
    print(f"\nmixture records of the two 'on' configurations identical: {'yes' if same else 'NO'}")
    print(f"load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
