"""Seconds per generation per cell on Lipizzaner's MNIST settings, with the per-phase split, beside the floor.

One generation = 600 batches of 100 (600 generator steps, 300 discriminator steps with d_skip 1), all-vs-all
fitness on 1,000 samples, one mixture ES step: the paper's MNIST configuration (selection off). The demo
data has 5,000 digits, so ``problem.batches_per_generation = 600`` loops over it 12 times per generation:
the same work as one epoch of full MNIST. Cells run one after another in this process.

The floor: in the same run, a plain PyTorch loop (``_floor.py``) does exactly a cell's training arithmetic
(same networks, loss, fused Adam, batch, steps, threads), in two variants: D on real and fake separately,
and as one joint batch. Rounds interleave evogan and both floors, so load from other people's jobs hits
all three alike; the table gives medians over rounds and evogan's training phase as a ratio of the
faster floor (``vs floor``: 1.00 is the floor; a regression in the engine shows as a larger ratio).

Besides wall time the script records the process's CPU time: on a shared machine wall time grows with
other people's load, CPU time (at one thread) much less so. ``--clock cpu`` measures the phases in CPU
seconds too.

The reference Lipizzaner, side by side: ``--lipizzaner SRC`` (a checkout's ``src`` folder) runs it in each
round too, with the same work and thread count (``_lipizzaner.py``: one process per cell, as published),
and the table gives its seconds per iteration per cell and evogan's whole-grid time per generation as a
ratio of Lipizzaner's (its cells run in parallel processes, evogan's here one after another in one). Without
it the Lipizzaner columns stay empty: no figure from another machine or another run stands in. Target:
training within 1.1x of the floor.

Precision (issue 27): ``--precision fp32 bf16`` measures each in every round, evogan with ``run.precision`` and
the floor autocast the same way, one row each; ``vs fp32 floor`` is the training phase as a ratio of the
faster fp32 floor (the speed-up bf16 is for). The first line says which bf16 units the CPU has (evogan refuses
bf16 without them, so its rows are skipped). ``--hidden`` sets the MLPs' width (the demo's: 256).

    nice -n 5 .venv/bin/python benchmarks/iteration_speed.py                 # 1x1 and 2x2, threads 1 and 2
    nice -n 5 .venv/bin/python benchmarks/iteration_speed.py --sides 1 --threads 1 --rounds 5
    nice -n 5 .venv/bin/python benchmarks/iteration_speed.py --threads 1 --clock cpu   # on a busy machine
    nice -n 5 .venv/bin/python benchmarks/iteration_speed.py --sides 1 --threads 1 --precision fp32 bf16
    nice -n 5 .venv/bin/python benchmarks/iteration_speed.py --sides 1 --threads 1 --rounds 1 --batches 100 \
        --lipizzaner ../lipizzaner-gan/src --lipizzaner-python ../lipizzaner-venv/bin/python
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

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import run_recipe, timings
from _floor import floor_generation
from _lipizzaner import measure as measure_lipizzaner
from evogan_gan.problem import GanProblem

from evogan.engine.run import build_settings, set_threads
from evogan.plugins import make_plugin_manager
from evogan.precision import cpu_bf16_units
from evogan.recipe import load as load_recipe
from evogan.registry import Registries

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "demo.toml"
PHASES = ("fitness", "selection", "training", "replacement", "mixture", "exchange")


def overrides(
    side: int, threads: int, args: argparse.Namespace, output: Path, precision: str = "fp32"
) -> list[str]:
    return [
        f"run.precision={json.dumps(precision)}",
        f"problem.network.hidden={args.hidden}",
        f"run.generations={args.generations}",
        f"run.threads={threads}",
        "run.samples_every=0",
        "run.checkpoint_every=0",
        f"run.output_dir={json.dumps(str(output))}",
        f"topology.rows={side}",
        f"topology.cols={side}",
        "run.workers=1",
        "population.selection=false",  # neurips2018 MNIST configs
        f"problem.batches_per_generation={args.batches}",
        "problem.d_skip=1",  # the paper's MNIST settings, whatever the demo uses
        "problem.fitness_samples=1000",
        "problem.score_samples=1000",
        f"problem.d_batch={json.dumps(args.d_batch)}",
    ]


def measure(side: int, threads: int, args: argparse.Namespace, output: Path, precision: str) -> dict[str, Any]:
    load_before = os.getloadavg()[0]
    cpu = time.process_time()
    _, wall, run_dir = run_recipe(RECIPE, overrides(side, threads, args, output, precision))
    cpu = time.process_time() - cpu
    rows = timings(run_dir)
    kept = [r for r in rows if r["generation"] > args.warmup] or rows
    per_phase = {p: statistics.mean(r.get(p, 0.0) for r in kept) for p in PHASES}
    per_cell = [sum(r.get(p, 0.0) for p in PHASES) for r in kept]
    return {
        "grid": f"{side}x{side}",
        "threads": threads,
        "precision": precision,
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
    }


def floor_problem(threads: int, args: argparse.Namespace, output: Path) -> GanProblem:
    registries = Registries.from_plugin_manager(make_plugin_manager())
    recipe = load_recipe(RECIPE, registries, overrides(1, threads, args, output))
    problem = build_settings(recipe, registries, None, torch.device("cpu")).problem
    assert isinstance(problem, GanProblem)
    return problem


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sides", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--generations", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=1, help="generations dropped from the phase means")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (evogan, floors); medians")
    parser.add_argument("--batches", type=int, default=600, help="batches per generation (paper: 600)")
    parser.add_argument("--d-batch", default="auto", choices=("auto", "joint", "separate"),
                        help="evogan's problem.d_batch")
    parser.add_argument("--precision", nargs="+", default=["fp32"], choices=("fp32", "bf16"),
                        help="run.precision, each measured in every round beside the floor in the same precision")
    parser.add_argument("--hidden", type=int, default=256, help="the MLPs' width (problem.network.hidden)")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--lipizzaner", type=Path, default=None, metavar="SRC",
                        help="a Lipizzaner checkout's src folder: run it side by side in every round")
    parser.add_argument("--lipizzaner-python", default=sys.executable,
                        help="the interpreter with Lipizzaner's requirements (default: this one)")
    parser.add_argument(
        "--clock", choices=("wall", "cpu"), default="wall",
        help="cpu: phases and run times in this process's CPU seconds (robust to other people's load at "
        "threads 1; meaningless for comparing thread counts)",
    )
    args = parser.parse_args()
    if args.clock == "cpu":
        time.perf_counter = time.process_time  # the engine's phase clock, run_recipe's and the floor's
    output = Path(tempfile.mkdtemp(prefix="evogan-speed-"))
    results = []
    if args.lipizzaner is not None and args.clock == "cpu":
        parser.error("--lipizzaner measures wall time (its own processes): leave --clock wall")
    units = cpu_bf16_units()
    print(f"bf16 units of this CPU: {', '.join(units) if units else 'none'}; torch {torch.__version__}")
    precisions = [p for p in args.precision if p != "bf16" or units]
    if precisions != args.precision:
        print("bf16: skipped (evogan refuses it on a CPU without bf16 units)")
    print("| grid | threads | precision | s / generation / cell | fitness | selection | training | replacement "
          "| mixture | exchange | floor separate | floor joint | vs floor | vs fp32 floor "
          "| CPU s / cell-gen (whole run) | Lipizzaner s / iteration / cell | evogan / Lipizzaner (grid) | load |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for side in args.sides:
        for threads in args.threads:
            set_threads(threads)
            problem = floor_problem(threads, args, output)
            runs: dict[str, list[dict[str, Any]]] = {p: [] for p in precisions}
            floors = {p: {"separate": [], "joint": []} for p in precisions}
            lipizzaner: list[float] = []  # per round: mean over cells of seconds per iteration after warm-up
            load_before = os.getloadavg()[0]
            for round_ in range(args.rounds):
                for precision in precisions:  # interleaved, so other people's load hits each alike
                    runs[precision].append(measure(side, threads, args, output, precision))
                    for variant in floors[precision]:
                        floors[precision][variant].append(floor_generation(
                            problem, batches=args.batches, d_skip=1, joint=variant == "joint", seed=round_,
                            precision=precision,
                        ))
                if args.lipizzaner is not None:
                    cells = measure_lipizzaner(args.lipizzaner, args.lipizzaner_python, side, threads=threads,
                                               iterations=args.generations, batches=args.batches, work=output)
                    kept = [s for cell in cells for s in (cell[args.warmup:] or cell)]
                    lipizzaner.append(statistics.mean(kept))
            fp32_floor = min(statistics.median(t) for t in floors["fp32"].values()) if "fp32" in floors else None
            for precision in precisions:
                results.append(summarise(runs[precision], floors[precision], lipizzaner, args, side, fp32_floor))
                results[-1]["load_1min"] = [load_before, os.getloadavg()[0]]
                results[-1]["bf16_units"] = units
                print_row(results[-1], side, threads)
            if args.json:
                args.json.write_text(json.dumps(results, indent=1))


def summarise(
    runs: list[dict[str, Any]],
    floors: dict[str, list[float]],
    lipizzaner: list[float],
    args: argparse.Namespace,
    side: int,
    fp32_floor: float | None,
) -> dict[str, Any]:
    """One row: medians over the rounds of one precision's evogan runs and floors."""
    r = runs[0] | {
        "rounds": args.rounds,
        "hidden": args.hidden,
        "phases": {p: statistics.median(run["phases"][p] for run in runs) for p in PHASES},
        "s_per_cell_generation": statistics.median(run["s_per_cell_generation"] for run in runs),
        "s_per_cell_generation_all": [run["s_per_cell_generation"] for run in runs],
        "cpu_s_per_cell_generation": statistics.median(run["cpu_s_per_cell_generation"] for run in runs),
        "training_all": [run["phases"]["training"] for run in runs],
        "floor": {variant: statistics.median(times) for variant, times in floors.items()},
        "floor_all": floors,
        "lipizzaner_s": statistics.median(lipizzaner) if lipizzaner else None,
        "lipizzaner_all": lipizzaner,
    }
    r["vs_floor"] = r["phases"]["training"] / min(r["floor"].values())
    r["vs_fp32_floor"] = r["phases"]["training"] / fp32_floor if fp32_floor else None
    # Whole grid per generation: evogan's cells one after another, Lipizzaner's in parallel processes.
    r["vs_lipizzaner"] = r["s_per_cell_generation"] * side * side / r["lipizzaner_s"] if r["lipizzaner_s"] else None
    return r


def print_row(r: dict[str, Any], side: int, threads: int) -> None:
    phases = " | ".join(f"{r['phases'][p]:.2f}" for p in PHASES)
    lip = f"{r['lipizzaner_s']:.2f}" if r["lipizzaner_s"] else "-"
    ratio = f"{r['vs_lipizzaner']:.2f}" if r["vs_lipizzaner"] else "-"
    vs32 = f"{r['vs_fp32_floor']:.2f}" if r["vs_fp32_floor"] else "-"
    spread = r["s_per_cell_generation_all"]
    print(
        f"| {r['grid']} | {threads} | {r['precision']} "
        f"| {r['s_per_cell_generation']:.2f} ({min(spread):.2f}-{max(spread):.2f}) "
        f"| {phases} | {r['floor']['separate']:.2f} | {r['floor']['joint']:.2f} | {r['vs_floor']:.2f} | {vs32} "
        f"| {r['cpu_s_per_cell_generation']:.2f} | {lip} | {ratio} "
        f"| {r['load_1min'][0]:.1f}-{r['load_1min'][1]:.1f} |",
        flush=True,
    )


if __name__ == "__main__":
    main()
