"""Vectorised cells: cell-generations per second for 1, 4, 9 and 16 cells in one process, looped against
vectorised (``run.vectorize``), per thread count and device.

Each configuration runs a 1x1, 2x2, 3x3 or 4x4 torus in this process; throughput counts the
cell-generations after the warm-up generation against the sum of their phase times (``timings.jsonl``:
fitness, selection, training, replacement, mixture, exchange), so process start-up and the final
scoring stay out. Rounds interleave looped and vectorised runs, so other people's load hits both alike;
the table gives medians over rounds and the speed-up (vectorised / looped). A second table times fitness:
the fitness and replacement phases (the all-vs-all evaluations before and after training), in ms per
cell-generation, looped and vectorised; ``--pairwise-fitness`` adds a third variant, vectorised training
with fitness scored pair by pair (the problem's ``stacked_fitness`` declined in this process), to show
what the batched evaluation itself gains.

Two workloads: ``toy`` (the 2-D ring, Lipizzaner's toy perceptrons: 64-128-128-2 / 2-128-128-1, batch 100,
launch-bound) and ``mnist`` (the paper's MNIST MLPs on the demo digits, batch 100, matmul-bound).

    nice -n 5 .venv/bin/python benchmarks/vectorized.py                        # toy, CPU, threads 1 and 2
    nice -n 5 .venv/bin/python benchmarks/vectorized.py --workload mnist --batches 30 --threads 1
    nice -n 5 .venv/bin/python benchmarks/vectorized.py --sparsity adapt-relax --cells 1 4 9 --threads 1

``--sparsity NAME`` (or an inline table, ``'{use="rigl", g_interval=20}'``) trains sparse cells with that
controller at its defaults: its hooks run per individual after every step in both paths. ``--precision``
sets ``run.precision`` (issue 27); fp16 trains looped only (the stacked steps do not scale losses), so its
vectorised columns read nan.
    .venv/bin/python benchmarks/vectorized.py --device cuda --workload mnist --cells 1 4 9 16 --threads 0
    nice -n 15 .venv/bin/python benchmarks/vectorized.py --cells 4 9 --threads 1 --pairwise-fitness
"""

from __future__ import annotations

import argparse
import json
import math
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
def pairwise_fitness() -> Iterator[None]:
    """The GAN problem declines batched fitness inside (this process only)."""
    from evogan_gan.problem import GanProblem

    original = GanProblem.stacked_fitness
    GanProblem.stacked_fitness = lambda *_: "benchmark: fitness pair by pair"  # type: ignore[method-assign]
    try:
        yield
    finally:
        GanProblem.stacked_fitness = original  # type: ignore[method-assign]


def measure(cells: int, vectorize: bool, threads: int, args: argparse.Namespace, output: Path) -> dict[str, Any]:
    recipe, extra = WORKLOADS[args.workload]
    side = SIDES[cells]
    overrides = [
        *extra,
        f"run.generations={args.generations}",
        f"run.threads={threads}",
        f"run.device={json.dumps(args.device)}",
        f"run.vectorize={'true' if vectorize else 'false'}",
        f"run.precision={json.dumps(args.precision)}",
        "run.samples_every=0",
        "run.checkpoint_every=0",
        f"run.output_dir={json.dumps(str(output))}",
        "run.workers=1",
        f"topology.rows={side}",
        f"topology.cols={side}",
        "population.selection=false",
        'problem.pairing={use="g_neighbourhood"}',
        f"problem.batches_per_generation={args.batches}",
    ]
    if args.sparsity:
        table = args.sparsity if args.sparsity.startswith("{") else f"{{use={json.dumps(args.sparsity)}}}"
        overrides.append(f"problem.sparsity={table}")
    _, _, run_dir = run_recipe(recipe, overrides)
    kept = [r for r in timings(run_dir) if r["generation"] > 1]
    seconds = sum(r.get(p, 0.0) for r in kept for p in PHASES)
    training = sum(r["training"] for r in kept)
    fitness = sum(r[p] for r in kept for p in FITNESS)
    per_s, training_per_s = len(kept) / seconds, len(kept) / training
    return {"per_s": per_s, "training_per_s": training_per_s, "fitness_ms": 1e3 * fitness / len(kept)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", choices=tuple(WORKLOADS), default="toy")
    parser.add_argument("--cells", type=int, nargs="+", default=[1, 4, 9, 16], choices=tuple(SIDES))
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="0: torch's default")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--generations", type=int, default=3, help="per run; the first is dropped")
    parser.add_argument("--batches", type=int, default=50, help="training batches per generation")
    parser.add_argument("--pairwise-fitness", action="store_true", help="also vectorised, fitness pair by pair")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sparsity", default="", help="a controller's name or inline table (default: dense)")
    parser.add_argument("--precision", choices=("fp32", "bf16", "fp16"), default="fp32", help="run.precision")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    variants = (False,) if args.precision == "fp16" else (False, True)  # fp16 trains looped
    output = Path(tempfile.mkdtemp(prefix="evogan-vectorized-"))
    print(f"workload {args.workload}, device {args.device}, {args.batches} batches per generation, "
          f"{args.rounds} interleaved rounds (medians), sparsity {args.sparsity or 'dense'}, "
          f"precision {args.precision}")
    print("| cells | threads | looped cell-gen/s | vectorised cell-gen/s | speed-up | training only: speed-up | load |")
    print("|---|---|---|---|---|---|---|")
    results = []
    for threads in args.threads:
        for cells in args.cells:
            load = os.getloadavg()[0]
            rounds: dict[bool, list[dict[str, Any]]] = {False: [], True: []}
            pairwise: list[dict[str, Any]] = []
            for _ in range(args.rounds):
                for vectorize in variants:
                    rounds[vectorize].append(measure(cells, vectorize, threads, args, output))
                if args.pairwise_fitness:
                    with pairwise_fitness():
                        pairwise.append(measure(cells, True, threads, args, output))
            looped, vectorised = (
                {key: statistics.median(r[key] for r in rounds[v]) if rounds[v] else math.nan for key in KEYS}
                for v in (False, True)
            )
            row = {
                "cells": cells, "threads": threads, "device": args.device, "workload": args.workload,
                "sparsity": args.sparsity or "dense", "precision": args.precision,
                "looped": looped, "vectorised": vectorised, "rounds": {str(k): v for k, v in rounds.items()},
                "speedup": vectorised["per_s"] / looped["per_s"],
                "training_speedup": vectorised["training_per_s"] / looped["training_per_s"],
                "pairwise": {key: statistics.median(r[key] for r in pairwise) for key in KEYS} if pairwise else None,
                "pairwise_rounds": pairwise,
                "load_1min": [load, os.getloadavg()[0]],
            }  # fmt: skip
            results.append(row)
            print(
                f"| {cells} | {threads} | {looped['per_s']:.2f} | {vectorised['per_s']:.2f} | {row['speedup']:.2f} "
                f"| {row['training_speedup']:.2f} | {load:.1f}-{row['load_1min'][1]:.1f} |",
                flush=True,
            )
            if args.json:
                args.json.write_text(json.dumps(results, indent=1))
    print_fitness(results)


def print_fitness(results: list[dict[str, Any]]) -> None:
    """The fitness and replacement phases, ms per cell-generation (medians), and the whole
    cell-generation with vectorised training but fitness pair by pair, where measured."""
    print("\nfitness + replacement phases, ms per cell-generation")
    print("| cells | threads | looped | vectorised | vectorised, fitness pair by pair | fitness speed-up "
          "| cell-gen/s, fitness pair by pair |")
    print("|---|---|---|---|---|---|---|")
    for row in results:
        looped, vectorised, pairwise = row["looped"], row["vectorised"], row["pairwise"]
        speedup = looped["fitness_ms"] / vectorised["fitness_ms"]
        alone = f"{pairwise['fitness_ms']:.1f}" if pairwise else "-"
        whole = f"{pairwise['per_s']:.2f}" if pairwise else "-"
        print(
            f"| {row['cells']} | {row['threads']} | {looped['fitness_ms']:.1f} | {vectorised['fitness_ms']:.1f} "
            f"| {alone} | {speedup:.2f} | {whole} |"
        )

if __name__ == "__main__":
    main()
