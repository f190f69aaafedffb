"""Sorting networks (Hillis 1990): the spatial grid against a panmictic population at equal evaluations.

Both coevolve hosts (sorting networks) against parasites (sets of binary test vectors) with the
``sortnet`` problem (``plugins/evogan-sortnet``), from ``recipes/sortnet.toml`` with the settings below,
every cell in this process, until a fixed budget of host-by-vector tests (``evaluations``: what the
problem's fitness ran; exhaustive checks are measurement and not counted); a run stops at the first
generation end at or past the budget (an overshoot of at most one generation, logged).

- ``grid-RxC``: a torus, one host and one parasite per cell, tournament of 2 in the von Neumann
  neighbourhood, the offspring replacing the cell's own only if better (the engine's default). 5x5 by
  default: each cell sees 5 of 25 individuals, so good networks take generations to spread (the point
  of Hillis' spatial grid), while a generation still costs only about 0.25 s on one core.
- ``grid-RxCxK`` (``--per-cell K``): the same torus with ``K`` hosts and parasites a cell, small demes:
  a cell's engine work hardly grows with its population, so the cost per test falls (RESULTS, "Cells of
  several hosts").
- ``panmictic-N``: one cell of ``N = R x C`` hosts and parasites, tournament of 3 among all and
  generational replacement, in the manner of DEAP's ``examples/coev/hillis.py`` (``eaSimple``-style).

Both get the same total population (unless ``--per-cell``), operators and vectors per parasite. 16
inputs start from Green's first 32 comparators (``prefix_layers = 4``) and evolve 40 more, as Hillis
seeded his hosts; 12 inputs evolve 60 comparators from scratch. Figures per configuration: runs that
verified a correct network within the budget, the smallest correct one (effective comparators: no-ops
and never-swapping comparators pruned), and evaluations to the first correct one; compared with Hillis'
61 comparators (16 inputs) and the best known 39 (12) and 60 (16). Budgets: 4e7 tests for 12 inputs, 1e8
for 16 (a 5x5 grid runs 55,000 (16 inputs) to 75,000 (12) tests a second on one core here: a 16-input
grid run takes about 30 minutes, the panmictic control about a third of that). One JSON line per run
goes to ``benchmarks/logs/sortnet/<commit>.jsonl``; ``--summarise`` prints the table from such logs
alone. Usage:

    .venv/bin/python benchmarks/sortnet.py --list                       # the configurations, no runs
    .venv/bin/python benchmarks/sortnet.py                              # 12 and 16 inputs, 5 seeds (4-5 h)
    .venv/bin/python benchmarks/sortnet.py --inputs 12 --seeds 1 2      # a part
    .venv/bin/python benchmarks/sortnet.py --inputs 12 --per-cell 8     # grid-5x5x8 beside panmictic-25
    .venv/bin/python benchmarks/sortnet.py --quick                      # smoke: 8 inputs, 3x3, < 1 minute
    .venv/bin/python benchmarks/sortnet.py --inputs 12 --per-cell 16 --cpu-seconds 60 --side-by-side
    # ^ each seed's grid and panmictic control at the same time, one core each: the per-test ratio
    .venv/bin/python benchmarks/sortnet.py --summarise                  # every log of benchmarks/logs/sortnet
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import LOGS, ROOT, append_log, git_commit, log_path, machine, quiet_overrides, read_logs

from evogan import hookimpl
from evogan.plugins import make_plugin_manager
from evogan.runtime.single import prepare, run_in_process

SCRIPT = "sortnet"
RECIPE = ROOT / "recipes" / "sortnet.toml"
HILLIS = {16: 61}  # Hillis 1990, with parasites (65 without)
BEST_KNOWN = {8: 19, 12: 39, 16: 60}
# Per number of inputs: the problem's settings and the default budget of host-by-vector tests.
PROBLEMS: dict[int, tuple[tuple[str, ...], int]] = {
    # the smoke: a 3x3 grid's first correct network came at about 1.1M tests (seed 1)
    8: (("problem.prefix_layers=0", "problem.comparators=32", "problem.vectors=12"), 1_250_000),
    # a 5x5 grid's first correct network came at 8M tests (53 comparators, seed 1): room to shrink it
    12: (("problem.prefix_layers=0", "problem.comparators=60"), 40_000_000),
    # after 8M tests a 5x5 grid's best host sorted 98.4 % of all inputs (seed 1)
    16: (("problem.prefix_layers=4", "problem.comparators=40"), 100_000_000),
}
NEVER = 10**9  # generations: runs end at their evaluation budget, never by length


@dataclass(frozen=True)
class Configuration:
    name: str
    inputs: int
    overrides: tuple[str, ...]
    population: int
    what: str


def parse_grid(text: str) -> tuple[int, int]:
    rows, _, cols = text.partition("x")
    if not (rows.isdigit() and cols.isdigit() and int(rows) > 0 and int(cols) > 0):
        raise SystemExit(f"--grid: {text!r} is not ROWSxCOLS")
    return int(rows), int(cols)


def plan(args: argparse.Namespace) -> list[Configuration]:
    rows, cols = parse_grid(args.grid)
    size = rows * cols
    configs = []
    for inputs in args.inputs:
        if inputs not in PROBLEMS:
            raise SystemExit(f"--inputs: {inputs} has no settings here (choose from {', '.join(map(str, PROBLEMS))})")
        problem = (f"problem.inputs={inputs}", *PROBLEMS[inputs][0])
        grid = (
            f"topology.rows={rows}",
            f"topology.cols={cols}",
            f"population.size={args.per_cell}",
            'selection={use="tournament", size=2}',
            'population.replacement="if_better"',
        )
        panmictic = (
            "topology.rows=1",
            "topology.cols=1",
            f"population.size={size}",
            'selection={use="tournament", size=3}',
            'population.replacement="generational"',
        )
        what = f"torus, {args.per_cell} per cell, tournament 2 in the neighbourhood, replace if better"
        name = f"grid-{rows}x{cols}" + (f"x{args.per_cell}" if args.per_cell > 1 else "")
        configs.append(Configuration(name, inputs, (*problem, *grid), size, what))
        what = "one cell, tournament 3 among all, generational (DEAP hillis.py style)"
        configs.append(Configuration(f"panmictic-{size}", inputs, (*problem, *panmictic), size, what))
    if args.configs:
        unknown = set(args.configs) - {c.name for c in configs}
        if unknown:
            raise SystemExit(f"--configs: unknown {', '.join(sorted(unknown))}; see --list")
        configs = [c for c in configs if c.name in args.configs]
    return configs


class Budget:
    """Watches the records' evaluation counter (this process runs every cell, so it is the run's) and
    says when the budget is spent; keeps the newest record's problem metrics, and the time from the run's
    start to its last generation's end (``loop_s``: the generations alone, without the start-up and the
    final scoring and plots, which cost the same for any budget), and the process's CPU time over the
    same span (``loop_cpu_s``: less sensitive than wall time to what else the machine runs)."""

    def __init__(self, budget: int, seconds: float = 0.0, cpu_seconds: float = 0.0) -> None:
        self.budget = budget
        self.seconds, self.cpu_seconds = seconds, cpu_seconds
        self.latest: dict[str, float] = {"evaluations": 0.0}
        self.generation = 0
        self.started = self.ended = self.cpu_started = self.cpu_ended = 0.0

    @hookimpl
    def evogan_run_start(self) -> None:
        self.started = self.ended = time.perf_counter()
        self.cpu_started = self.cpu_ended = time.process_time()

    @hookimpl
    def evogan_generation_end(self, generation: int, record: Mapping[str, Any]) -> None:
        metrics = record["best_metrics"] if "best_metrics" in record else record["mixture_metrics"]
        if metrics["evaluations"] >= self.latest["evaluations"]:
            self.latest = dict(metrics)
        self.generation = max(self.generation, generation)
        self.ended, self.cpu_ended = time.perf_counter(), time.process_time()

    def spent(self) -> bool:
        """The tests are spent, or (``seconds``, ``cpu_seconds``) the generations have run that long."""
        late = bool(self.seconds) and self.ended - self.started >= self.seconds
        late |= bool(self.cpu_seconds) and self.cpu_ended - self.cpu_started >= self.cpu_seconds
        return late or self.latest["evaluations"] >= self.budget


def budget_of(args: argparse.Namespace, inputs: int) -> int:
    if (args.seconds or args.cpu_seconds) and not args.budget:
        return UNLIMITED
    return int(args.budget) if args.budget else PROBLEMS[inputs][1]


UNLIMITED = 10**15  # tests: a run with --seconds (--cpu-seconds) and no --budget ends by its time alone


@contextlib.contextmanager
def batching(on: bool) -> Iterator[None]:
    """The problem's batched fitness (``Problem.prefetch_fitness``) as shipped, or (``on`` false) the
    engine's default, which prefetches nothing: the cell-by-cell path, every record the same."""
    from evogan_sortnet.problem import SortingNetworks

    from evogan.api import Problem

    shipped = SortingNetworks.__dict__["prefetch_fitness"]
    if not on:
        SortingNetworks.prefetch_fitness = Problem.prefetch_fitness  # type: ignore[method-assign]
    try:
        yield
    finally:
        SortingNetworks.prefetch_fitness = shipped  # type: ignore[method-assign]


def run_one(
    args: argparse.Namespace, config: Configuration, seed: int, output: Path, *, batched: bool = True
) -> dict[str, Any]:
    budget = budget_of(args, config.inputs)
    overrides = [
        *quiet_overrides(seed, NEVER, args.threads, output),
        "run.workers=1",
        "mixture.enabled=false",
        *config.overrides,
        *args.set,
    ]
    watch = Budget(budget, args.seconds or 0.0, args.cpu_seconds or 0.0)
    prepared = prepare(RECIPE, overrides=overrides, pm=make_plugin_manager(extra=[watch]))
    commit, dirty = git_commit()
    before, started = machine(), time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    clock = time.perf_counter()
    with batching(batched):
        run_in_process(prepared, stop=watch.spent)
    wall = time.perf_counter() - clock
    final = watch.latest
    first = int(final.get("first_correct_at", 0))
    summary = json.loads((prepared.run_dir.path / "summary.json").read_text())
    smallest = summary["problem"].get("smallest_correct", {})
    return {
        "script": SCRIPT,
        "config": config.name,
        "what": config.what,
        "inputs": config.inputs,
        "population": config.population,  # cells of a grid, hosts of the panmictic control: the pairing key
        "per_cell": args.per_cell if config.name.startswith("grid") else config.population,
        "seed": seed,
        "budget": budget,
        "seconds": args.seconds or None,
        "cpu_seconds": args.cpu_seconds or None,
        "recipe": str(RECIPE.relative_to(ROOT)),
        "set": list(args.set),
        "overrides": [o for o in overrides if not o.startswith("run.output_dir=")],
        "commit": commit,
        "dirty": dirty,
        "generations": watch.generation,
        "evaluations": int(final["evaluations"]),
        "found": first > 0,
        "first_correct_at": first or None,
        "smallest_correct": int(final["smallest_correct"]) or None,
        "smallest_correct_at": int(final["smallest_correct_at"]) or None,
        "smallest_correct_depth": int(final.get("smallest_correct_depth", 0)) or None,
        "smallest_correct_network": smallest.get("network"),  # wire pairs, prefix included
        "best_sorted": float(final["best_sorted"]),
        "wall_s": wall,
        "batched": batched,
        "cells": config.population if config.name.startswith("grid") else 1,
        "loop_s": watch.ended - watch.started,
        "loop_cpu_s": watch.cpu_ended - watch.cpu_started,
        "started": started,
        "machine": {**before, "load_end": machine()["load"]},
        "threads": args.threads,
        "run_dir": str(prepared.run_dir.path),
    }


def run_matrix(args: argparse.Namespace, configs: Sequence[Configuration]) -> Path:
    """Seeds outermost, so a matrix cut short still covers every configuration; one line per run."""
    output = args.output_dir or Path(tempfile.mkdtemp(prefix="evogan-sortnet-"))
    path = log_path(SCRIPT, args.log_dir)
    modes = {"on": (True,), "off": (False,), "both": (True, False)}[args.batching]
    pool = None
    if args.side_by_side:  # one process per configuration, fresh from spawn (no torch state forked)
        pool = ProcessPoolExecutor(max_workers=len(configs), mp_context=multiprocessing.get_context("spawn"))
    try:
        for seed in args.seeds:
            for batched in modes:
                if pool is None:
                    records = [run_one(args, config, seed, output, batched=batched) for config in configs]
                else:  # the same seed's configurations at the same time (RunDirectory.create names each apart)
                    jobs = [pool.submit(run_one, args, config, seed, output, batched=batched) for config in configs]
                    records = [job.result() for job in jobs]
                for record in records:
                    append_log(path, record)
                    report(record)
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    return path


def report(record: Mapping[str, Any]) -> None:
    found = f"correct with {record['smallest_correct']}" if record["found"] else "none correct"
    print(
        f"{record['inputs']} inputs {record['config']} seed {record['seed']}"
        f"{'' if record['batched'] else ' cell by cell'}: {found}, best sorts {record['best_sorted']:.4f} "
        f"({record['generations']} generations, {record['wall_s']:.0f} s, "
        f"{1e6 * record['loop_s'] / record['evaluations']:.2f} us a test in the generations)",
        flush=True,
    )


# ------------------------------------------------------------------------------------------ tables
def median(values: Sequence[float], spec: str = ".3g") -> str:
    return format(statistics.median(values), spec) if values else "-"


def table(records: Sequence[Mapping[str, Any]]) -> str:
    groups: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
    for record in records:
        key = (record["inputs"], budget_label(record), " ".join(record["set"]), mode(record))
        groups.setdefault(key, []).append(record)
    headers = [
        "inputs", "budget (tests)", "--set", "configuration", "seeds", "found", "smallest correct",
        "median smallest", "median evaluations to first", "median best sorted", "Hillis", "best known",
        "median wall s", "commit",
    ]
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for (inputs, budget, extra, name), runs in sorted(groups.items()):
        runs = sorted(runs, key=lambda r: r["seed"])
        found = [r for r in runs if r["found"]]
        sizes = [r["smallest_correct"] for r in found]
        commits = " ".join(sorted({r["commit"] + ("-dirty" if r["dirty"] else "") for r in runs}))
        cells = [
            str(inputs), budget, extra or "-", name, " ".join(str(r["seed"]) for r in runs),
            f"{len(found)}/{len(runs)}", str(min(sizes)) if sizes else "-", median(sizes),
            median([r["first_correct_at"] for r in found]), median([r["best_sorted"] for r in runs], ".4f"),
            str(HILLIS.get(inputs, "-")), str(BEST_KNOWN.get(inputs, "-")), median([r["wall_s"] for r in runs]),
            commits,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def budget_label(record: Mapping[str, Any]) -> str:
    """A run's budget as the tables print it: its tests, or its wall time (``--seconds``) or CPU time."""
    if record.get("cpu_seconds") and record["budget"] >= UNLIMITED:
        return f"{record['cpu_seconds']:.0f} CPU s"
    if record.get("seconds") and record["budget"] >= UNLIMITED:
        return f"{record['seconds']:.0f} s"
    return f"{record['budget']:.3g}" + (f" or {record['seconds']:.0f} s" if record.get("seconds") else "")


def mode(record: Mapping[str, Any]) -> str:
    """The configuration's name, marked where the run went cell by cell (logs before issue 39 did)."""
    return record["config"] + ("" if record.get("batched", True) else " (cell by cell)")


def per_test(record: Mapping[str, Any], key: str = "loop_s") -> float:
    """Microseconds of the generations' wall time (``key``: or CPU time, ``loop_cpu_s``) per test."""
    return 1e6 * float(record.get(key, record["loop_s"])) / max(1, int(record["evaluations"]))


CPU = "loop_cpu_s"


def speed_table(records: Sequence[Mapping[str, Any]]) -> str:
    """Wall and CPU time of the generations (``loop_s``, ``loop_cpu_s``: start-up and final scoring left
    out) per test and CPU time per cell-generation, and the ratios of CPU time per test of runs made side
    by side: batched against cell by cell (same seed), each grid against the panmictic population of the
    same mode, seed and budget."""
    timed = [r for r in records if "loop_s" in r]
    runs = {(r["inputs"], budget_label(r), " ".join(r["set"]), r["seed"], mode(r)): r for r in timed}
    groups: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
    for record in timed:
        key = (record["inputs"], budget_label(record), " ".join(record["set"]), mode(record))
        groups.setdefault(key, []).append(record)
    headers = [
        "inputs", "budget (tests)", "--set", "configuration", "cells", "seeds", "median generations",
        "median us per test (wall)", "median us per test (CPU)", "median CPU ms per cell-generation",
        "batched / cell by cell",
        "grid / panmictic per test", "load",
    ]
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for (inputs, budget, extra, name), group in sorted(groups.items()):
        group = sorted(group, key=lambda r: r["seed"])
        batched = [
            per_test(r, CPU) / per_test(runs[(inputs, budget, extra, r["seed"], mode(r) + " (cell by cell)")], CPU)
            for r in group
            if (inputs, budget, extra, r["seed"], mode(r) + " (cell by cell)") in runs
        ]
        suffix = "" if group[0].get("batched", True) else " (cell by cell)"
        panmictic = [
            per_test(r, CPU) / per_test(other, CPU)
            for r in group
            if r["config"].startswith("grid")
            for key, other in runs.items()
            if key[:4] == (inputs, budget, extra, r["seed"]) and key[4] == f"panmictic-{r['population']}{suffix}"
        ]
        cells = int(group[0].get("cells", 1))
        loads = [float(x[0]) for r in group for x in (r["machine"]["load"], r["machine"]["load_end"])]
        cells_line = [
            str(inputs), budget, extra or "-", name, str(cells), " ".join(str(r["seed"]) for r in group),
            median([r["generations"] for r in group], ".0f"), median([per_test(r) for r in group], ".2f"),
            median([per_test(r, CPU) for r in group], ".2f"),
            median([1e3 * r.get(CPU, r["loop_s"]) / (r["generations"] * cells) for r in group], ".2f"),
            " ".join(f"{x:.2f}" for x in batched) or "-", " ".join(f"{x:.2f}" for x in panmictic) or "-",
            f"{min(loads):.1f}-{max(loads):.1f}",
        ]
        lines.append("| " + " | ".join(cells_line) + " |")
    return "\n".join(lines)


def summarise(paths: Sequence[Path]) -> None:
    records = [r for r in read_logs(p for p in paths if p.exists()) if r.get("script") == SCRIPT]
    if not records:
        raise SystemExit(f"no {SCRIPT} runs in {', '.join(map(str, paths))}")
    print(table(records))
    if any("loop_s" in r for r in records):
        print()
        print(speed_table(records))


# ------------------------------------------------------------------------------------------ command line
def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--inputs", type=int, nargs="+", default=[12, 16])
    parser.add_argument("--grid", default="5x5", help="ROWSxCOLS of the grid; the panmictic control has as many")
    parser.add_argument(
        "--per-cell",
        type=int,
        default=1,
        help="hosts (and parasites) per grid cell, as population.size; the grid is then named grid-RxCxN and the "
        "panmictic control keeps R x C (all-vs-all fitness grows with the square of a population)",
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    parser.add_argument("--budget", type=float, help="host-by-vector tests per run (default: per inputs)")
    parser.add_argument(
        "--seconds",
        type=float,
        help="wall seconds of generations per run (equal wall time): a run ends at the first generation end "
        "past them, or at --budget if given and reached first",
    )
    parser.add_argument(
        "--cpu-seconds",
        type=float,
        help="CPU seconds of generations per run (this process's own time: runs that share the machine each "
        "get their time on one core); as --seconds otherwise",
    )
    parser.add_argument("--configs", nargs="+", help="run only these configurations (see --list)")
    parser.add_argument("--set", nargs="+", default=[], help="further recipe overrides, KEY=VALUE")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--batching",
        choices=("on", "off", "both"),
        default="on",
        help="the problem's batched fitness of all cells (on, as shipped), the cell-by-cell path (off), or "
        "each run both ways one after the other (records identical; for the wall-time ratio)",
    )
    parser.add_argument(
        "--side-by-side",
        action="store_true",
        help="run each seed's configurations at the same time, one process each (a core each on a quiet "
        "machine): their per-test ratio is then measured under the same load, not at different hours",
    )
    parser.add_argument("--output-dir", type=Path, help="keep the run directories here (default: a temporary one)")
    parser.add_argument("--log-dir", type=Path, default=LOGS, help="where sortnet/<commit>.jsonl goes")
    parser.add_argument("--quick", action="store_true", help="smoke: 8 inputs, 3x3, one seed, logs in a temp dir")
    parser.add_argument("--list", action="store_true", help="print the configurations and stop")
    parser.add_argument(
        "--summarise", type=Path, nargs="*", help="print the table of these logs (none: LOG_DIR/sortnet) and stop"
    )
    return parser


def main() -> None:
    args = arguments().parse_args()
    if args.per_cell < 1:
        raise SystemExit(f"--per-cell: {args.per_cell} is not a positive number of hosts")
    if args.summarise is not None:
        summarise(args.summarise or [args.log_dir / SCRIPT])
        return
    if args.quick:
        args.inputs, args.grid, args.seeds = [8], "3x3", args.seeds[:1]
        if args.log_dir == LOGS:  # smoke figures stay out of the kept logs
            args.log_dir = Path(tempfile.mkdtemp(prefix="evogan-sortnet-logs-"))
    configs = plan(args)
    if args.list:
        for config in configs:
            budget = budget_of(args, config.inputs)
            print(f"{config.inputs:3} inputs  {config.name:14} {budget:.3g} tests  {config.what}")
            print(f"    {' '.join(config.overrides)}")
        return
    path = run_matrix(args, configs)
    print(f"\nlog: {path}\n")
    summarise([path])


if __name__ == "__main__":
    main()
