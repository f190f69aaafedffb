"""Scaling: cell-generations per second for 1, 2, 4 and 9 cells with 1 and 2 worker processes, and the
share of each generation spent in the exchange (timings.jsonl ``exchange`` against all phases).

    .venv/bin/python benchmarks/scaling.py [--recipe recipes/demo.toml] [--generations 4] [--batches 10]
    .venv/bin/python benchmarks/scaling.py --vectorize false true     # workers x vectorised cells
    .venv/bin/python benchmarks/scaling.py --recipe recipes/sortnet.toml --cells 5x5 16x16 32x32 --batches 0 \
        --threads 1 --generations 6 --set problem.inputs=12 problem.prefix_layers=0 problem.comparators=60

Throughput is measured in steady state, from the end of generation 1 to the end of the run (process
start-up, rendezvous and the final scoring are left out), with the default threads (``run.threads = 0``:
torch's default in one process; cores / workers per worker process), as a user would run it. Pass
``--threads 1`` for the older one-thread-per-process figures. Parallel efficiency = throughput with 2
workers / (2 x throughput with 1 worker) on the same grid, only with ``--threads 1``; with the default
threads the table gives the speed-up of 2 workers over 1 on the same cores. With lockstep
exchange (max_staleness 0) the ``exchange`` phase includes waiting for the slowest neighbour.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from evogan.hookspecs import hookimpl
from evogan.plugins import make_plugin_manager
from evogan.runtime.single import prepare, run_in_process

ROOT = Path(__file__).resolve().parents[1]
GRIDS = {"1": (1, 1), "2": (1, 2), "4": (2, 2), "9": (3, 3)}


def grid_of(cells: str) -> tuple[int, int]:
    """``--cells`` values: 1, 2, 4, 9 (the grids above) or ROWSxCOLS."""
    if cells in GRIDS:
        return GRIDS[cells]
    rows, _, cols = cells.partition("x")
    return int(rows), int(cols)


class Clock:
    """Times each (cell, generation) as the driver (or the launcher's tail) reports it."""

    def __init__(self) -> None:
        self.seen: list[tuple[float, int]] = []

    @hookimpl
    def evogan_generation_end(self, generation: int) -> None:
        self.seen.append((time.perf_counter(), generation))

    def throughput(self) -> float:
        first_done = max(t for t, g in self.seen if g == 1)
        later = [t for t, g in self.seen if g > 1]
        return len(later) / (max(later) - first_done) if later else float("nan")


def run(
    recipe: Path,
    cells: str,
    workers: int,
    generations: int,
    batches: int,
    out: Path,
    threads: int,
    vectorize: str = "auto",
    extra: tuple[str, ...] = (),
) -> dict[str, Any]:
    rows, cols = grid_of(cells)
    clock = Clock()
    overrides = [
        f"run.workers={workers}",
        f"run.generations={generations}",
        f"run.threads={threads}",
        "run.checkpoint_every=0",
        "run.samples_every=0",
        'run.device="cpu"',
        f"run.output_dir={json.dumps(str(out))}",
        f"topology.rows={rows}",
        f"topology.cols={cols}",
        *([f"problem.batches_per_generation={batches}"] if batches else []),
        f"run.vectorize={vectorize if vectorize != 'auto' else json.dumps(vectorize)}",
        *extra,
    ]
    prepared = prepare(recipe, overrides=overrides, pm=make_plugin_manager(extra=[clock]))
    started = time.perf_counter()
    if workers > 1:
        from evogan.runtime.launcher import launch

        launch(prepared)
    else:
        run_in_process(prepared)
    wall = time.perf_counter() - started
    timings = [json.loads(line) for line in (prepared.run_dir.path / "timings.jsonl").read_text().splitlines()]
    shares = []
    for record in timings:
        if record["generation"] < 2:
            continue
        phases = {k: v for k, v in record.items() if isinstance(v, float)}
        shares.append(phases["exchange"] / sum(phases.values()))
    seconds = [sum(v for v in r.values() if isinstance(v, float)) for r in timings if r["generation"] > 1]
    return {
        "cells": rows * cols,
        "workers": workers,
        "vectorize": vectorize,
        "throughput": clock.throughput(),
        "wall": wall,
        "exchange_share": statistics.mean(shares) if shares else float("nan"),
        "generation_s": statistics.mean(seconds) if seconds else float("nan"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", type=Path, default=ROOT / "recipes" / "demo.toml")
    parser.add_argument("--generations", type=int, default=4)
    parser.add_argument("--batches", type=int, default=10, help="problem.batches_per_generation (0: the recipe's)")
    parser.add_argument("--cells", nargs="+", default=list(GRIDS), help="1, 2, 4, 9 or ROWSxCOLS grids")
    parser.add_argument("--set", nargs="+", default=[], help="further recipe overrides, KEY=VALUE")
    parser.add_argument("--threads", type=int, default=0, help="run.threads (0: the default)")
    parser.add_argument(
        "--vectorize", nargs="+", default=["auto"], choices=("auto", "true", "false"),
        help="run.vectorize values to compare (each worker trains its block of cells vectorised)",
    )
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as scratch:
        for cells in args.cells:
            for workers in (1, 2):
                for vectorize in args.vectorize:
                    rows, cols = grid_of(cells)
                    if workers > rows * cols:
                        continue
                    result = run(
                        args.recipe, cells, workers, args.generations, args.batches, Path(scratch), args.threads,
                        vectorize, tuple(args.set),
                    )  # fmt: skip
                    results.append(result)
                    print(json.dumps(result), file=sys.stderr, flush=True)
    single = {(r["cells"], r["vectorize"]): r["throughput"] for r in results if r["workers"] == 1}
    ratio = "parallel efficiency" if args.threads == 1 else "speed-up over 1 worker"
    print(
        f"| cells | workers | vectorize | cell-generations/s | {ratio} | s per cell-generation (phases) "
        "| exchange share of a generation | wall s (incl. start-up) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        per_worker = r["workers"] if args.threads == 1 else 1
        efficiency = r["throughput"] / (per_worker * single[(r["cells"], r["vectorize"])])
        shown = f"{efficiency:.0%}" if args.threads == 1 else f"{efficiency:.2f}x"
        print(
            f"| {r['cells']} | {r['workers']} | {r['vectorize']} | {r['throughput']:.2f} | {shown} | "
            f"{r['generation_s']:.3f} | {r['exchange_share']:.1%} | {r['wall']:.1f} |"
        )


if __name__ == "__main__":
    main()
