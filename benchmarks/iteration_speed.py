"""Seconds per generation per cell on Lipizzaner's MNIST settings, with the per-phase split.

One generation = 600 batches of 100 (600 generator steps, 300 discriminator steps with d_skip 1), all-vs-all
fitness on 1,000 samples, one mixture ES step: the paper's MNIST configuration (selection off). The demo
data has 5,000 digits, so ``problem.batches_per_generation = 600`` loops over it 12 times per generation:
the same work as one epoch of full MNIST. Cells run one after another in this process.

Besides wall time the script records the process's CPU time: on a shared machine wall time grows with
other people's load, CPU time (at one thread) much less so. ``--clock cpu`` measures the phases in CPU
seconds too.

Lipizzaner's figures on the same machine class: 13.5 s per iteration on 1x1; 33.3 s per iteration per cell
on 2x2 (4 processes, one thread each). Target: at most a third.

    nice -n 5 .venv/bin/python benchmarks/iteration_speed.py                 # 1x1 and 2x2, threads 1 and 2
    nice -n 5 .venv/bin/python benchmarks/iteration_speed.py --threads 1 --clock cpu   # on a busy machine
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
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import run_recipe, timings

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "demo.toml"
PHASES = ("fitness", "selection", "training", "replacement", "mixture", "exchange")
LIPIZZANER = {1: 13.5, 2: 33.3}  # seconds per iteration per cell


def measure(side: int, threads: int, args: argparse.Namespace, output: Path) -> dict[str, Any]:
    overrides = [
        f"run.generations={args.generations}",
        f"run.threads={threads}",
        "run.samples_every=0",
        "run.checkpoint_every=0",
        f"run.output_dir={json.dumps(str(output))}",
        f"topology.rows={side}",
        f"topology.cols={side}",
        "run.workers=1",
        "population.selection=false",  # neurips2018 MNIST configs
        "problem.batches_per_generation=600",
        "problem.d_skip=1",  # the paper's MNIST settings, whatever the demo uses
        "problem.fitness_samples=1000",
        "problem.score_samples=1000",
    ]
    load_before = os.getloadavg()[0]
    cpu = time.process_time()
    _, wall, run_dir = run_recipe(RECIPE, overrides)
    cpu = time.process_time() - cpu
    rows = timings(run_dir)
    kept = [r for r in rows if r["generation"] > args.warmup] or rows
    per_phase = {p: statistics.mean(r.get(p, 0.0) for r in kept) for p in PHASES}
    per_cell = [sum(r.get(p, 0.0) for p in PHASES) for r in kept]
    return {
        "grid": f"{side}x{side}",
        "threads": threads,
        "generations": args.generations,
        "warmup_dropped": args.warmup,
        "cell_generations": len(kept),
        "s_per_cell_generation": statistics.mean(per_cell),
        "s_per_cell_generation_sd": statistics.stdev(per_cell) if len(per_cell) > 1 else 0.0,
        "phases": per_phase,
        "run_wall_s": wall,
        "run_cpu_s": cpu,
        "cpu_s_per_cell_generation": cpu / (args.generations * side * side),
        "load_1min": [load_before, os.getloadavg()[0]],
        "lipizzaner_s": LIPIZZANER.get(side),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sides", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--generations", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=1, help="generations dropped from the phase means")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--clock", choices=("wall", "cpu"), default="wall",
        help="cpu: phases and run times in this process's CPU seconds (robust to other people's load at "
        "threads 1; meaningless for comparing thread counts)",
    )
    args = parser.parse_args()
    if args.clock == "cpu":
        time.perf_counter = time.process_time  # the engine's phase clock and run_recipe's both read it
    output = Path(tempfile.mkdtemp(prefix="evogan-speed-"))
    results = []
    print("| grid | threads | s / generation / cell | fitness | selection | training | replacement | mixture "
          "| exchange | CPU s / cell-gen (whole run) | Lipizzaner | ratio | load |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for side in args.sides:
        for threads in args.threads:
            r = measure(side, threads, args, output)
            results.append(r)
            phases = " | ".join(f"{r['phases'][p]:.2f}" for p in PHASES)
            ratio = f"{r['s_per_cell_generation'] / r['lipizzaner_s']:.2f}" if r["lipizzaner_s"] else "-"
            print(
                f"| {r['grid']} | {threads} | {r['s_per_cell_generation']:.2f} ± {r['s_per_cell_generation_sd']:.2f} "
                f"| {phases} | {r['cpu_s_per_cell_generation']:.2f} | {r['lipizzaner_s'] or '-'} | {ratio} "
                f"| {r['load_1min'][0]:.1f}-{r['load_1min'][1]:.1f} |",
                flush=True,
            )
            if args.json:
                args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
