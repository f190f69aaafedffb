"""A diverging cell on the 25-mode grid (issue 36): the toy 3x3 of ``recipes/toy-grid.toml`` trained
clean and with one cell's generator made non-finite early (NaN written into it after a generation's
training, by tests/divergence_fault.py, as a diverging GAN or an fp16 overflow would leave it), on the
same seeds. Figures on the test stream: modes covered by the mixture chosen on validation, the mean over
cells, how many cells end finite, and the cells the summary names as diverged. The target: every other
cell ends finite and the faulted run's chosen mixture covers at least 80 % of the modes the clean run
covers on the same seed. One JSON line per run goes to ``benchmarks/logs/divergence/<commit>.jsonl``.
Usage:

    .venv/bin/python benchmarks/divergence.py --seeds 1 2 3            # about 5 min a run on 2 cores
    .venv/bin/python benchmarks/divergence.py --summarise              # the tables from the logs alone
    .venv/bin/python benchmarks/divergence.py --overhead                # what the checks cost on the demo's pair
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the fault plugin lives with the tests
from _common import (
    LOGS,
    ROOT,
    append_log,
    git_commit,
    log_path,
    machine,
    mean_sd,
    quiet_overrides,
    read_logs,
    run_recipe,
)
from divergence_fault import FAULT_ENV

from evogan.plugins import PLUGINS_ENV

NAME = "divergence"
RECIPE = ROOT / "recipes" / "toy-grid.toml"


def one_run(args: argparse.Namespace, config: str, seed: int, output: Path) -> dict[str, Any]:
    fault = {"cells": [args.cell], "generations": [args.at], "role": args.role, "value": args.value}
    os.environ[FAULT_ENV] = json.dumps(fault if config == "faulted" else {})
    overrides = [*quiet_overrides(seed, args.generations, args.threads, output), "problem.use=gan_with_fault"]
    before, started = machine(), time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    summary, wall, run_dir = run_recipe(RECIPE, overrides)
    cells = summary["cells"]
    last: dict[int, dict[str, Any]] = {}
    for line in (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        last[record["cell"]] = record
    # a NaN generator still scores as finite figures (0 modes, TVD 1): finite means its losses are
    finite = [c for c, r in last.items() if all(math.isfinite(r[k]) for k in r if k.endswith("_loss"))]
    return {
        "config": config,
        "seed": seed,
        "fault": fault if config == "faulted" else None,
        "generations": args.generations,
        "commit": git_commit()[0],
        "started": started,
        "wall_s": round(wall, 1),
        "machine": {**before, "load_end": machine()["load"]},
        "best_mixture": summary["chosen"]["test"],
        "mean_over_cells": summary["mean_over_cells"],
        "finite_cells": len(finite),
        "cells": len(cells),
        "diverged": summary.get("diverged", {}),
        "diverged_at_end": summary.get("diverged_at_end", []),
        "run_dir": str(run_dir),
    }


def table(records: Sequence[Mapping[str, Any]]) -> str:
    rows = ["| configuration | runs | modes (chosen mixture) | modes (mean cell mixture) | cells finite | diverged |"]
    rows.append("|---|---|---|---|---|---|")
    for config in ("clean", "faulted"):
        group = [r for r in records if r["config"] == config]
        if not group:
            continue
        modes = [r["best_mixture"]["modes_covered"] for r in group]
        means = [r["mean_over_cells"]["mixture"]["modes_covered"] for r in group]
        finite = ", ".join(f"{r['finite_cells']}/{r['cells']}" for r in group)
        diverged = "; ".join(json.dumps(r["diverged"]) for r in group)
        rows.append(f"| {config} | {len(group)} | {mean_sd(modes)} | {mean_sd(means)} | {finite} | {diverged} |")
    clean = {r["seed"]: r for r in records if r["config"] == "clean"}
    ratios = [
        r["best_mixture"]["modes_covered"] / clean[r["seed"]]["best_mixture"]["modes_covered"]
        for r in records
        if r["config"] == "faulted" and clean.get(r["seed"], {}).get("best_mixture", {}).get("modes_covered")
    ]
    if ratios:
        rows.append(
            f"\nfaulted / clean modes, same seed: mean {statistics.mean(ratios):.2f}, lowest {min(ratios):.2f} "
            f"(target: at least 0.80), over {len(ratios)} seeds"
        )
    return "\n".join(rows)


def overhead(repeats: int = 50) -> None:
    """Seconds per call of what containment adds each generation, on the demo's networks (after one
    generation, so Adam's state exists): the finiteness check of one individual, and the copy a cell with
    selection off keeps of it; beside the generation's own time (one cell, ``recipes/demo.toml``)."""
    import torch

    from evogan.engine.cell import Cell
    from evogan.engine.divergence import snapshot
    from evogan.engine.run import build_settings
    from evogan.plugins import make_plugin_manager
    from evogan.recipe import load
    from evogan.registry import Registries

    torch.set_num_threads(1)
    registries = Registries.from_plugin_manager(make_plugin_manager())
    recipe = load(ROOT / "recipes" / "demo.toml", registries, ["topology.rows=1", "topology.cols=1", "run.workers=1"])
    settings = build_settings(recipe, registries, None, torch.device("cpu"))
    cell = Cell(0, (), settings)
    cell.initialise()
    started = time.perf_counter()
    cell.step()
    generation = time.perf_counter() - started
    print(f"| {machine()['load']} load | seconds per call | share of a generation ({generation:.2f} s) |")
    print("|---|---|---|")
    for role in cell.roles:
        individual = cell.best(role)
        for what, call in (
            ("finite", lambda one=individual: settings.problem.finite(one)),
            ("copy", lambda one=individual: snapshot([one], settings.problem)),
        ):
            started = time.perf_counter()
            for _ in range(repeats):
                call()
            each = (time.perf_counter() - started) / repeats
            print(f"| {role} {what} | {each * 1e3:.2f} ms | {each / generation:.2%} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--configs", nargs="+", default=["clean", "faulted"], choices=["clean", "faulted"])
    parser.add_argument("--generations", type=int, default=100)
    parser.add_argument("--cell", type=int, default=4, help="the cell that diverges (the 3x3's centre)")
    parser.add_argument("--at", type=int, default=1, help="after which generation's training")
    parser.add_argument("--role", default="generator", choices=["generator", "discriminator"])
    parser.add_argument("--value", default="nan", choices=["nan", "inf"])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--output-dir", type=Path, help="keep the run directories here")
    parser.add_argument("--log-dir", type=Path, default=LOGS)
    parser.add_argument("--summarise", type=Path, nargs="*", help="print the table of these logs and stop")
    parser.add_argument("--overhead", action="store_true", help="time the checks on the demo's networks and stop")
    args = parser.parse_args()
    if args.overhead:
        overhead()
        return
    if args.summarise is not None:
        print(table(read_logs(args.summarise or [LOGS / NAME])))
        return
    os.environ[PLUGINS_ENV] = "divergence_fault"
    output = args.output_dir or Path(tempfile.mkdtemp(prefix="evogan-divergence-"))
    log = log_path(NAME, args.log_dir)
    done = []
    for seed in args.seeds:
        for config in args.configs:
            record = one_run(args, config, seed, output)
            append_log(log, record)
            done.append(record)
            print(table(done), flush=True)
    print(f"log: {log}")


if __name__ == "__main__":
    main()
