"""Does a larger grid give better generators? Lipizzaner's claim, on the demo's 5,000 real MNIST digits.

1x1, 2x2 and 3x3 tori with the demo recipe's settings (``recipes/demo.toml``), the same number of
generations and batches for every grid, several seeds. For each run: the best cell's mixture ensemble and
the best single cell's generator (lowest classifier FID over all cells, from ``summary.json``), both scored
on the recipe's ``score_samples`` (500) by the project's MNIST classifier (FID on its 50-d features, TVD of
its class histogram), and the run's wall time. Cells run one after another in this process on
``--threads`` torch threads, so wall time grows with the number of cells.

    .venv/bin/python benchmarks/grid_size.py                        # 5 generations x 40 batches, seeds 1-3
    .venv/bin/python benchmarks/grid_size.py --generations 2 --batches 5 --seeds 1 --sides 1 2   # smoke
    .venv/bin/python benchmarks/grid_size.py --set 'pairing={use="reference"}' --json a.json   # one pairing
    .venv/bin/python benchmarks/grid_size.py --summarise a.json b.json   # runs split over processes
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import mean_sd, quiet_overrides, run_recipe

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "demo.toml"


def one_run(side: int, seed: int, args: argparse.Namespace, output: Path) -> dict[str, Any]:
    overrides = [
        *quiet_overrides(seed, args.generations, args.threads, output),
        f"topology.rows={side}",
        f"topology.cols={side}",
        f"problem.batches_per_generation={args.batches}",
        "run.workers=1",
        *args.set,
    ]
    summary, wall, run_dir = run_recipe(RECIPE, overrides)
    cells = summary["cells"]
    best_mixture = cells[str(summary["best_cell"])]["mixture"]
    single_cell = min(cells, key=lambda c: cells[c]["generator"]["fid"])
    single = cells[single_cell]["generator"]
    return {
        "side": side,
        "seed": seed,
        "wall_s": wall,
        "run_dir": str(run_dir),
        "best_cell": summary["best_cell"],
        "mixture_fid": best_mixture["fid"],
        "mixture_tvd": best_mixture["tvd"],
        "mixture_classes": best_mixture["classes_covered"],
        "single_cell": int(single_cell),
        "single_fid": single["fid"],
        "single_tvd": single["tvd"],
        "single_classes": single["classes_covered"],
        "mean_cell_mixture_fid": statistics.mean(cells[c]["mixture"]["fid"] for c in cells),
        "mean_cell_generator_fid": statistics.mean(cells[c]["generator"]["fid"] for c in cells),
    }


def table(rows: list[dict[str, Any]], sides: list[int]) -> str:
    lines = [
        "| grid | seeds | mixture TVD | mixture FID | mixture classes | best single G TVD | best single G FID "
        "| mean cell G FID | wall s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for side in sides:
        group = [r for r in rows if r["side"] == side]
        if not group:
            continue
        cols = ["mixture_tvd", "mixture_fid", "mixture_classes", "single_tvd", "single_fid",
                "mean_cell_generator_fid", "wall_s"]
        values = " | ".join(mean_sd([r[c] for r in group]) for c in cols)
        seeds = " ".join(str(r["seed"]) for r in group)
        lines.append(f"| {side}x{side} | {seeds} | {values} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--generations", type=int, default=5)
    parser.add_argument("--batches", type=int, default=40, help="batches of 100 per generation")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--sides", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--output-dir", type=Path, default=None, help="keep the runs here (default: temp)")
    parser.add_argument("--json", type=Path, default=None, help="also write every run's figures here")
    parser.add_argument("--set", nargs="+", default=[], help="further recipe overrides, KEY=VALUE")
    parser.add_argument("--summarise", type=Path, nargs="+", help="print the table of these --json files and stop")
    args = parser.parse_args()
    if args.summarise:  # runs split over several processes, each with its own --json
        rows = [row for path in args.summarise for row in json.loads(path.read_text())]
        print(table(rows, sorted({row["side"] for row in rows})))
        return
    output = args.output_dir or Path(tempfile.mkdtemp(prefix="evogan-grid-"))
    rows = []
    started = time.perf_counter()
    for seed in args.seeds:  # seeds outermost: a partial result still covers every grid
        for side in args.sides:
            row = one_run(side, seed, args, output)
            rows.append(row)
            print(
                f"{side}x{side} seed {seed}: mixture tvd={row['mixture_tvd']:.3f} fid={row['mixture_fid']:.1f} "
                f"(cell {row['best_cell']}); single G tvd={row['single_tvd']:.3f} fid={row['single_fid']:.1f} "
                f"(cell {row['single_cell']}); {row['wall_s']:.0f} s",
                flush=True,
            )
            if args.json:
                args.json.write_text(json.dumps(rows, indent=1))
    print(f"\n{args.generations} generations x {args.batches} batches of 100, seeds {args.seeds}, "
          f"threads {args.threads}, total {time.perf_counter() - started:.0f} s; runs in {output}\n")
    print(table(rows, args.sides))


if __name__ == "__main__":
    main()
