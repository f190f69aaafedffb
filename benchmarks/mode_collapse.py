"""Mode collapse on the 25-mode grid: one GAN (1x1) against 2x2 and 3x3 Lipizzaner grids, per pairing.

Same recipe (recipes/toy-grid.toml unless --recipe), same generations (so equal generator steps per
cell), several seeds, every pairing named by --pairings. For each run: modes covered and the
high-quality fraction of the best cell's mixture ensemble and of the best single generator (2,500
samples each), the mean modes of the cells' generators, and wall time. A compute-fair lone GAN is a 1x1
given the grid's total steps: ``--grids 1x1 --generations 900`` against a 3x3 of 100. ``--log`` appends
one JSON line per run; ``--summarise LOG...`` prints the table of runs logged by earlier invocations
(two processes side by side each write their own log). Usage:

    .venv/bin/python benchmarks/mode_collapse.py [--generations 100] [--seeds 1 2 3] [--grids 1x1 2x2 3x3]
        [--pairings reference g_mixture] [--recipe recipes/toy-ring.toml] [--set KEY=VALUE ...]
        [--log runs.jsonl]
    .venv/bin/python benchmarks/mode_collapse.py --summarise a.jsonl b.jsonl
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _common import mean_sd, run_recipe
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
COLUMNS = ("mix_modes", "mix_hq", "gen_modes", "gen_hq", "cell_modes", "wall")


def measure(
    recipe: Path, grid: str, pairing: str, seed: int, generations: int, out: Path, extra: Sequence[str] = ()
) -> dict[str, Any]:
    rows, cols = grid.split("x")
    summary, wall, _ = run_recipe(
        recipe,
        [
            f"run.seed={seed}",
            f"run.generations={generations}",
            f"topology.rows={rows}",
            f"topology.cols={cols}",
            f'pairing={{use="{pairing}"}}',
            f'run.output_dir="{out}"',
            *extra,
        ],
    )
    cells = [cell["generator"] for cell in summary["cells"].values()]
    best = max(cells, key=lambda g: (g["modes_covered"], g["hq_fraction"]))
    return {
        "recipe": " ".join([recipe.name, *extra]),
        "grid": grid,
        "pairing": pairing,
        "generations": generations,
        "seed": seed,
        "mix_modes": summary["best_mixture"]["modes_covered"],
        "mix_hq": summary["best_mixture"]["hq_fraction"],
        "gen_modes": best["modes_covered"],
        "gen_hq": best["hq_fraction"],
        "cell_modes": statistics.mean(g["modes_covered"] for g in cells),
        "per_cell_modes": sorted((g["modes_covered"] for g in cells), reverse=True),
        "wall": wall,
    }


def table(results: Sequence[dict[str, Any]]) -> Table:
    groups: dict[tuple[str, str, str, int], list[dict[str, Any]]] = {}
    for result in results:
        key = (result["recipe"], result["grid"], result["pairing"], result["generations"])
        groups.setdefault(key, []).append(result)
    out = Table(title="best mixture and cells' generators (mean ± sd over seeds)")
    headers = ("recipe", "grid", "pairing", "generations", "seeds")
    headers += ("modes (mixture)", "HQ (mixture)", "modes (best G)", "HQ (best G)", "modes (mean cell G)", "wall s")
    for column in headers:
        out.add_column(column, justify="right")
    for (recipe, grid, pairing, generations), runs in groups.items():
        seeds = ",".join(str(r["seed"]) for r in runs)
        figures = [mean_sd([r[c] for r in runs]) for c in COLUMNS]
        out.add_row(recipe, grid, pairing, str(generations), seeds, *figures)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--generations", type=int, default=100)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--grids", nargs="+", default=["1x1", "2x2", "3x3"])
    parser.add_argument("--pairings", nargs="+", default=["reference"], help="registered pairing names")
    parser.add_argument("--recipe", type=Path, default=ROOT / "recipes" / "toy-grid.toml")
    parser.add_argument("--set", nargs="+", default=[], help="further recipe overrides, KEY=VALUE")
    parser.add_argument("--log", type=Path, help="append one JSON line per run here")
    parser.add_argument("--summarise", type=Path, nargs="+", help="print the table of these logs and stop")
    args = parser.parse_args()
    console = Console(width=180)
    if args.summarise:
        logged = [json.loads(line) for path in args.summarise for line in path.read_text().splitlines()]
        console.print(table(logged))
        return
    out = Path(tempfile.mkdtemp(prefix="evogan-mode-collapse-"))
    results = []
    for grid in args.grids:
        for pairing in args.pairings:
            for seed in args.seeds:
                result = measure(args.recipe, grid, pairing, seed, args.generations, out, args.set)
                results.append(result)
                print(json.dumps(result), flush=True)
                if args.log:
                    with args.log.open("a") as log:
                        log.write(json.dumps(result) + "\n")
    console.print(table(results))


if __name__ == "__main__":
    main()
