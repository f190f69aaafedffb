"""Vectorised cells: cell-generations per second for 1, 4, 9 and 16 cells in one process, looped against
vectorised (``run.vectorize``), per thread count and device.

Each configuration runs a 1x1, 2x2, 3x3 or 4x4 torus in this process; throughput counts the
cell-generations after the warm-up generation against the sum of their phase times (``timings.jsonl``:
fitness, selection, training, replacement, mixture, exchange), so process start-up and the final
scoring stay out. Rounds interleave looped and vectorised runs, so other people's load hits both alike;
the table gives medians over rounds and the speed-up (vectorised / looped). Fitness is timed on its own
too: the fitness and replacement phases (the all-vs-all evaluations before and after training), in ms per
cell-generation, looped and vectorised; ``--pairwise-fitness`` adds a third variant, vectorised training
with fitness scored pair by pair (the problem's ``stacked_fitness`` declined in this process), to show
what the batched evaluation itself gains.

Two workloads: ``toy`` (the 2-D ring, Lipizzaner's toy perceptrons: 64-128-128-2 / 2-128-128-1, batch 100,
launch-bound) and ``mnist`` (the paper's MNIST MLPs on the demo digits, batch 100, matmul-bound).

    nice -n 5 .venv/bin/python benchmarks/vectorized.py                        # toy, CPU, threads 1 and 2
    nice -n 5 .venv/bin/python benchmarks/vectorized.py --workload mnist --batches 30 --threads 1
    nice -n 15 .venv/bin/python benchmarks/vectorized.py --cells 4 9 --threads 1 --pairwise-fitness
    .venv/bin/python benchmarks/vectorized.py --device cuda --workload mnist --cells 1 4 9 16 --threads 0
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import run_recipe, timings

ROOT = Path(__file__).resolve().parents[1]
PHASES = ("fitness", "selection", "training", "replacement", "mixture", "exchange")
FITNESS = ("fitness", "replacement")  # the all-vs-all evaluations before and after training
KEYS = ("per_s", "training_per_s", "fitness_ms")
VARIANTS = ("looped", "vectorised", "pairwise")  # pairwise: vectorised training, fitness pair by pair
SIDES = {1: 1, 4: 2, 9: 3, 16: 4}
WORKLOADS = {
    "toy": (
        ROOT / "evogan" / "testing" / "tiny.toml",
        [
            "problem.network.latent_size=64",
            "problem.network.hidden=128",
            "problem.batch_size=100",
            "problem.fitness_samples=1000",
            "problem.score_samples=1000",
            "problem.data.samples=10000",
        ],
    ),
    "mnist": (ROOT / "recipes" / "demo.toml", ["problem.fitness_samples=500", "problem.score_samples=500"]),
}


@contextmanager
def pairwise_fitness(on: bool) -> Iterator[None]:
    """The GAN problem declines batched fitness while ``on`` (this process only)."""
    from evogan.builtin.gan.problem import GanProblem

    original = GanProblem.stacked_fitness
    if on:
        GanProblem.stacked_fitness = lambda *_: "benchmark: fitness pair by pair"  # type: ignore[method-assign]
    try:
        yield
    finally:
        GanProblem.stacked_fitness = original  # type: ignore[method-assign]


def measure(cells: int, variant: str, threads: int, args: argparse.Namespace, output: Path) -> dict[str, Any]:
    vectorize = variant != "looped"
    recipe, extra = WORKLOADS[args.workload]
    side = SIDES[cells]
    overrides = [
        *extra,
        f"run.generations={args.generations}",
        f"run.threads={threads}",
        f"run.device={json.dumps(args.device)}",
        f"run.vectorize={'true' if vectorize else 'false'}",
        "run.samples_every=0",
        "run.checkpoint_every=0",
        f"run.output_dir={json.dumps(str(output))}",
        "run.workers=1",
        f"topology.rows={side}",
        f"topology.cols={side}",
        "population.selection=false",
        'pairing={use="g_neighbourhood"}',
        f"problem.batches_per_generation={args.batches}",
    ]
    with pairwise_fitness(variant == "pairwise"):
        _, _, run_dir = run_recipe(recipe, overrides)
    kept = [r for r in timings(run_dir) if r["generation"] > 1]
    seconds = sum(r.get(p, 0.0) for r in kept for p in PHASES)
    training = sum(r["training"] for r in kept)
    fitness = sum(r[p] for r in kept for p in FITNESS)
    return {"per_s": len(kept) / seconds, "training_per_s": len(kept) / training,
            "fitness_ms": 1e3 * fitness / len(kept)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", choices=tuple(WORKLOADS), default="toy")
    parser.add_argument("--cells", type=int, nargs="+", default=[1, 4, 9, 16], choices=tuple(SIDES))
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="0: torch's default")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--generations", type=int, default=3, help="per run; the first is dropped")
    parser.add_argument("--batches", type=int, default=50, help="training batches per generation")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pairwise-fitness", action="store_true", help="also vectorised, fitness pair by pair")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    output = Path(tempfile.mkdtemp(prefix="evogan-vectorized-"))
    variants = VARIANTS if args.pairwise_fitness else VARIANTS[:2]
    print(f"workload {args.workload}, device {args.device}, {args.batches} batches per generation, "
          f"{args.rounds} interleaved rounds (medians); fitness: ms per cell-generation (fitness + replacement "
          f"phases), {' / '.join(variants)}")
    print("| cells | threads | looped cell-gen/s | vectorised cell-gen/s | speed-up | training only: speed-up "
          "| fitness ms | fitness speed-up | load |")
    print("|---|---|---|---|---|---|---|---|---|")
    results = []
    for threads in args.threads:
        for cells in args.cells:
            load = os.getloadavg()[0]
            rounds: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
            for _ in range(args.rounds):
                for variant in variants:
                    rounds[variant].append(measure(cells, variant, threads, args, output))
            medians = {
                v: {key: statistics.median(r[key] for r in rounds[v]) for key in KEYS} for v in variants
            }
            looped, vectorised = medians["looped"], medians["vectorised"]
            row = {
                "cells": cells, "threads": threads, "device": args.device, "workload": args.workload,
                **medians, "rounds": rounds,
                "speedup": vectorised["per_s"] / looped["per_s"],
                "training_speedup": vectorised["training_per_s"] / looped["training_per_s"],
                "fitness_speedup": looped["fitness_ms"] / vectorised["fitness_ms"],
                "load_1min": [load, os.getloadavg()[0]],
            }  # fmt: skip
            results.append(row)
            fitness = " / ".join(f"{medians[v]['fitness_ms']:.1f}" for v in variants)
            print(
                f"| {cells} | {threads} | {looped['per_s']:.2f} | {vectorised['per_s']:.2f} | {row['speedup']:.2f} "
                f"| {row['training_speedup']:.2f} | {fitness} | {row['fitness_speedup']:.2f} "
                f"| {load:.1f}-{row['load_1min'][1]:.1f} |",
                flush=True,
            )
            if args.json:
                args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
