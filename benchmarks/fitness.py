"""One all-vs-all fitness evaluation, looped against batched: milliseconds per evaluation of a neighbourhood
of generators and discriminators (5 x 5 by default, a von Neumann neighbourhood at population 1).

Three ways on the same networks and batch: ``looped`` (the reference, one discriminator forward per pair),
``per-network`` (batched fitness as the CPU runs it: each network once on the whole shared input) and
``stacked`` (batched fitness as CUDA runs it: the stacked rows, linear chains as ``baddbmm``). Times are
the minimum over rounds of the mean over repeats, in CPU seconds of this process (``--clock cpu``, the
default: other people's load shows less than in wall time) or wall seconds.

    nice -n 15 .venv/bin/python benchmarks/fitness.py --threads 1
    .venv/bin/python benchmarks/fitness.py --device cuda --clock wall --neighbourhood 5 13
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from evogan_gan import stacked_fitness
from evogan_gan.problem import GanProblem
from vectorized import WORKLOADS

from evogan.engine.run import build_settings
from evogan.plugins import make_plugin_manager
from evogan.recipe import load
from evogan.registry import Registries


def problem_for(workload: str, device: str, samples: int) -> GanProblem:
    recipe_path, extra = WORKLOADS[workload]
    registries = Registries.from_plugin_manager(make_plugin_manager())
    recipe = load(recipe_path, registries, [*extra, f"problem.fitness_samples={samples}"])
    problem = build_settings(recipe, registries, None, torch.device(device), scoring=False).problem
    assert isinstance(problem, GanProblem)
    return problem


def ways(problem: GanProblem, size: int, real: torch.Tensor, device: str) -> list[Callable[[], object]]:
    """The looped evaluation, and the batched one network by network and as stacked rows."""
    gens = [problem.create("generator", generator=torch.Generator().manual_seed(i)) for i in range(size)]
    discs = [problem.create("discriminator", generator=torch.Generator().manual_seed(99 + i)) for i in range(size)]

    def looped() -> object:
        return problem.fitness(gens, discs, real, generator=torch.Generator().manual_seed(0))

    def batched(stack: bool) -> Callable[[], object]:
        def run() -> object:
            stacked_fitness.STACK_ROWS[device] = stack
            evaluation = problem.stacked_fitness(gens, discs)
            assert not isinstance(evaluation, str), evaluation
            return evaluation.fitness(real, generator=torch.Generator().manual_seed(0))

        return run

    return [looped, batched(False), batched(True)]


def timed(function: Callable[[], object], clock: Callable[[], float], repeats: int, rounds: int) -> float:
    function()  # warm-up
    best = float("inf")
    for _ in range(rounds):
        started = clock()
        for _ in range(repeats):
            function()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        best = min(best, (clock() - started) / repeats)
    return 1e3 * best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", nargs="+", choices=tuple(WORKLOADS), default=list(WORKLOADS))
    parser.add_argument("--neighbourhood", type=int, nargs="+", default=[5], help="generators = discriminators")
    parser.add_argument("--samples", type=int, default=500, help="problem.fitness_samples")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="0: torch's default")
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    print(f"device {args.device}, {args.threads or 'default'} thread(s), {args.samples} samples, ms per evaluation "
          f"({args.clock} time, min of {args.rounds} rounds of {args.repeats})")
    print("| workload | G x D | looped | per-network | stacked | per-network / looped | stacked / looped | load |")
    print("|---|---|---|---|---|---|---|---|")
    for workload in args.workloads:
        problem = problem_for(workload, args.device, args.samples)
        real = problem.fitness_batch(generator=torch.Generator().manual_seed(1))
        for size in args.neighbourhood:
            load_before = os.getloadavg()[0]
            times = ways(problem, size, real, args.device)
            looped, per_network, stacked = (timed(f, clock, args.repeats, args.rounds) for f in times)
            print(
                f"| {workload} | {size} x {size} | {looped:.1f} | {per_network:.1f} | {stacked:.1f} "
                f"| {per_network / looped:.2f} | {stacked / looped:.2f} "
                f"| {load_before:.1f}-{os.getloadavg()[0]:.1f} |",
                flush=True,
            )

if __name__ == "__main__":
    main()
