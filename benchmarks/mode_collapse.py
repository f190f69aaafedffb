"""Mode collapse on the 25-mode grid: one GAN (1x1) against 2x2 and 3x3 Lipizzaner grids.

Same recipe (recipes/toy-grid.toml), same generations, several seeds. For each run: modes covered and
the high-quality fraction of the best cell's mixture ensemble and of the best single generator (2,500
samples each), and wall time. Usage:

    .venv/bin/python benchmarks/mode_collapse.py [--generations 100] [--seeds 1 2 3] [--grids 1x1 2x2 3x3]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from _common import mean_sd, run_recipe
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--generations", type=int, default=100)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--grids", nargs="+", default=["1x1", "2x2", "3x3"])
    args = parser.parse_args()
    out = Path(tempfile.mkdtemp(prefix="evogan-mode-collapse-"))
    rows = []
    for grid in args.grids:
        r, c = grid.split("x")
        found: dict[str, list[float]] = {
            k: [] for k in ("mix_modes", "mix_hq", "gen_modes", "gen_hq", "wall")
        }
        for seed in args.seeds:
            summary, wall, _ = run_recipe(
                ROOT / "recipes" / "toy-grid.toml",
                [
                    f"run.seed={seed}",
                    f"run.generations={args.generations}",
                    f"topology.rows={r}",
                    f"topology.cols={c}",
                    f'run.output_dir="{out}"',
                ],
            )
            cells = summary["cells"].values()
            best_generator = max(
                cells, key=lambda cell: (cell["generator"]["modes_covered"], cell["generator"]["hq_fraction"])
            )["generator"]
            found["mix_modes"].append(summary["best_mixture"]["modes_covered"])
            found["mix_hq"].append(summary["best_mixture"]["hq_fraction"])
            found["gen_modes"].append(best_generator["modes_covered"])
            found["gen_hq"].append(best_generator["hq_fraction"])
            found["wall"].append(wall)
            print(
                f"{grid} seed {seed}: mixture {summary['best_mixture']} best generator {best_generator} "
                f"{wall:.0f} s",
                flush=True,
            )
        rows.append((grid, found))
    table = Table(title=f"25-mode grid, {args.generations} generations, seeds {args.seeds} (mean ± sd)")
    for column in (
        "grid",
        "modes covered (mixture)",
        "HQ fraction (mixture)",
        "modes covered (best G)",
        "HQ fraction (best G)",
        "wall s",
    ):
        table.add_column(column, justify="right")
    for grid, found in rows:
        table.add_row(
            grid,
            mean_sd(found["mix_modes"]),
            mean_sd(found["mix_hq"]),
            mean_sd(found["gen_modes"]),
            mean_sd(found["gen_hq"]),
            mean_sd(found["wall"]),
        )
    Console(width=140).print(table)


if __name__ == "__main__":
    main()
