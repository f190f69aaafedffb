"""Per-generation overhead of the engine's own phases on short generations, from ``timings.jsonl``.

    nice -n 5 .venv/bin/python benchmarks/overhead.py                      # toy-grid 2x2, 10 batches
    nice -n 5 .venv/bin/python benchmarks/overhead.py --batches 50 --every 0 10 --selection false true

For each configuration it runs ``recipes/toy-grid.toml`` as a 2x2 grid in one process with
``batches_per_generation`` batches per generation and prints the mean milliseconds per cell-generation of each
phase (fitness, selection, training, replacement re-evaluation, mixture scoring, exchange; the first
``--warmup`` generations dropped) and their sum without training: the overhead a short generation pays.
Phases are CPU seconds of this process by default (``--clock cpu``): on a shared machine wall time mostly
measures other people's load. Cells run one after another (or take turns, with ``every_batches``), one
torch thread as the recipe says.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import run_recipe, timings

ROOT = Path(__file__).resolve().parents[1]
PHASES = ("fitness", "selection", "training", "replacement", "mixture", "exchange")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", type=Path, default=ROOT / "recipes" / "toy-grid.toml")
    parser.add_argument("--side", type=int, default=2)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--generations", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--every", type=int, nargs="+", default=[0], help="exchange.every_batches values")
    parser.add_argument("--selection", nargs="+", default=["false"], help="population.selection values")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument(
        "--clock", choices=("wall", "cpu"), default="cpu", help="cpu: process CPU seconds (robust to load)"
    )
    args = parser.parse_args()
    if args.clock == "cpu":
        time.perf_counter = time.process_time  # the engine's phase clock reads it
    print(f"load before: {os.getloadavg()[0]:.2f}; clock: {args.clock}")
    print(f"\n| selection | every_batches | {' | '.join(PHASES)} | overhead (all but training) | total |")
    print("|---|---|" + "---|" * (len(PHASES) + 2))
    for selection in args.selection:
        for every in args.every:
            with tempfile.TemporaryDirectory() as tmp:
                overrides = [
                    f"run.generations={args.generations}",
                    f"run.seed={args.seed}",
                    "run.checkpoint_every=0",
                    f"run.output_dir={json.dumps(tmp)}",
                    f"topology.rows={args.side}",
                    f"topology.cols={args.side}",
                    f"population.selection={selection}",
                    f"problem.batches_per_generation={args.batches}",
                    *args.sets,
                ]
                if every:
                    overrides.append(f"exchange.every_batches={every}")
                _, _, run_dir = run_recipe(args.recipe, overrides)
                rows = [r for r in timings(run_dir) if r["generation"] > args.warmup]
            means = {p: statistics.mean(r.get(p, 0.0) for r in rows) for p in PHASES}
            overhead = sum(v for p, v in means.items() if p != "training")
            cells = " | ".join(f"{means[p] * 1e3:.2f}" for p in PHASES)
            total = overhead + means["training"]
            print(f"| {selection} | {every} | {cells} | {overhead * 1e3:.2f} | {total * 1e3:.2f} |")
    print("\n(milliseconds per cell-generation, mean over the cells and the generations after the warm-up)")
    print(f"load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
