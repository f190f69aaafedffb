"""What the feature metrics beside FID (KID, precision/recall, density, coverage) add to the mixture phase.

    nice -n 5 .venv/bin/python benchmarks/mixture_metrics.py                     # 3x3 demo, 3 repeats
    nice -n 5 .venv/bin/python benchmarks/mixture_metrics.py --repeats 5 --generations 8

Runs ``recipes/demo.toml`` as a 3x3 grid in one process (one batch per generation: the mixture phase does
not depend on training), all configurations in this one process, taking turns so they see the same load:

- ``off, before``: ``kid_subsets = 0``, ``nearest_k = 0`` (FID, TVD and classes covered alone), scored as
  before issue 39's split: the cost of the phase before the new metrics (issue 26), the target's baseline;
- ``on, before``: the new metrics, scored as before the split: every candidate of the mixture ES in full
  (``GanProblem.evaluate_lazily`` completed at once) and the classifier pooling in its plain layout;
- ``off`` and ``on``: the same as this tree scores them (the objective first, the kept candidate's other
  metrics from its features; channels-last pooling).

Per run: the mean seconds per cell-generation of the ``mixture`` phase of ``timings.jsonl`` (two mixture
scores per cell-generation; the first ``--warmup`` generations dropped), and the share of it spent in the new
metrics (``feature_scores``, timed inside the phase). Per configuration the median over the repeats, its ratio
to ``off, before``'s (the target: ``on`` within 1.1), and the ratio within the runs themselves, phase /
(phase - new metrics): the same code asked without comparing runs that met different loads. The mixture
records of every ``on`` configuration, and of every ``off`` one, must be the same to the last bit (the script
says so). The phase clock is this process's CPU time by default (``--clock cpu``), which a shared machine's
load moves far less than wall time.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import git_commit, run_recipe, timings
from evogan_gan import classifier, image_metrics
from evogan_gan.problem import GanProblem

from evogan.engine import cell
from evogan.scores import LazyMetrics

ROOT = Path(__file__).resolve().parents[1]
OFF = ["problem.metric.kid_subsets=0", "problem.metric.nearest_k=0"]
inside = {"mixture": False, "seconds": 0.0}  # whether a cell is in its mixture phase; feature metrics' time there


LAZILY, FEATURES = GanProblem.evaluate_lazily, classifier.MnistClassifier.features


def eagerly(self: GanProblem, *args: Any, **kwargs: Any) -> LazyMetrics:
    """Every metric of every candidate, as the mixture ES scored before issue 39's split."""
    return LazyMetrics(LAZILY(self, *args, **kwargs).complete())


def plain_features(self: classifier.MnistClassifier, x: torch.Tensor) -> torch.Tensor:
    """The classifier's features as first written (plain-layout pooling: the same values, slower)."""
    x = F.relu(F.max_pool2d(self.conv1(x), 2))
    x = F.relu(F.max_pool2d(self.conv2(x), 2))
    return F.relu(self.fc1(x.flatten(1)))


def scoring(before: bool) -> None:
    """Score as before issue 39's split (``before``) or as this tree does."""
    GanProblem.evaluate_lazily = eagerly if before else LAZILY  # type: ignore[method-assign]
    classifier.MnistClassifier.features = plain_features if before else FEATURES  # type: ignore[method-assign]


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
    configs = {"off, before": (OFF, True), "on, before": ([], True), "off": (OFF, False), "on": ([], False)}
    seconds: dict[str, list[float]] = {name: [] for name in configs}
    shares: dict[str, list[float]] = {name: [] for name in configs}
    records: dict[str, list[Any]] = {}
    for _ in range(args.repeats):
        for name, (sets, before) in configs.items():
            scoring(before)
            mixture, share, records[name] = one_run(args, sets)
            seconds[name].append(mixture)
            shares[name].append(share)
    scoring(False)
    off = statistics.median(seconds["off, before"])
    print(
        "\n| configuration | mixture ms per cell-generation (median) | / off, before | new metrics' share "
        "| / itself without them | runs (ms) |"
    )
    print("|---|---|---|---|---|---|")
    for name, values in seconds.items():
        runs = ", ".join(f"{v * 1e3:.1f}" for v in values)
        median = statistics.median(values)
        share = statistics.median(shares[name])
        within = 1 / (1 - share)
        print(f"| {name} | {median * 1e3:.1f} | {median / off:.3f} | {share:.1%} | {within:.3f} | {runs} |")
    for kind in ("on", "off"):
        same = records[f"{kind}, before"] == records[kind]
        print(f"\nmixture records of the two '{kind}' configurations identical: {'yes' if same else 'NO'}")
    print(f"load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
