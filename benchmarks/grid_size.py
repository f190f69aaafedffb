"""Does a larger grid give better generators? On the demo's 5,000 real MNIST digits, against controls.

The demo recipe's settings (``recipes/demo.toml``) with ``g_mixture`` (``--pairing``) on 1x1, 2x2 and 3x3
tori, 100 generations of 50 batches of 100 for every grid (``--generations``, ``--batches``), 3 seeds by
default, every cell in this process; and the controls of ``_controls.py`` for 2x2 and 3x3: the lone GAN
at equal steps per cell (``lone-steps`` = ``grid-1x1``) and at the grid's training FLOPs
(``lone-flops-RxC``), the independent ensemble (``independent-RxC``: ``own_pair``, selection off) and
every built-in pairing (``pairing-NAME-RxC``). Figures of each run, all on the test stream (the recipe's
500 samples per score, the project's MNIST classifier: FID on its 50-d features, TVD of its class
histogram, classes covered; the test reference is the other half of the digits from the validation
one): the mixture chosen on the validation stream, the single generator chosen on validation, the means
over the cells of their mixtures and generators. The recipe is the demo's as shipped at the commit that
runs: lines before fc980de trained Lipizzaner's 256-wide networks, later ones the demo's 384-wide pair
with spectral norm and a generator average; each line since records the recipe's hash, and the tables
keep contents apart. One JSON line per run goes to
``benchmarks/logs/grid_size/<commit>.jsonl``; ``--summarise`` prints every table from such logs alone.

    .venv/bin/python benchmarks/grid_size.py --list                         # the configurations, no runs
    .venv/bin/python benchmarks/grid_size.py                                # the full matrix (a day on 2 cores)
    .venv/bin/python benchmarks/grid_size.py --configs grid-3x3 --seeds 1   # a part
    .venv/bin/python benchmarks/grid_size.py --grids 1x1 2x2 --generations 1 --batches 2 --seeds 1 \\
        --configs grid-1x1 grid-2x2 lone-flops-2x2 --log-dir /tmp/logs       # smoke
    .venv/bin/python benchmarks/grid_size.py --summarise                    # every log of benchmarks/logs/grid_size
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT
from _controls import Column, Script, main


def best_generator(cells: Mapping[str, Any]) -> str:
    """The lowest classifier FID on the validation stream."""
    return min(cells, key=lambda cell: cells[cell]["validation"]["generator"]["fid"])


def batches(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--batches", type=int, default=50, help="batches of 100 per generation")
    parser.set_defaults(pairing="g_mixture")


SCRIPT = Script(
    name="grid_size",
    recipe=ROOT / "recipes" / "demo.toml",
    grids=("1x1", "2x2", "3x3"),
    seeds=(1, 2, 3),
    generations=100,
    columns=(
        Column("mixture FID", ("test", "best_mixture", "fid"), 1),
        Column("mixture TVD", ("test", "best_mixture", "tvd"), 3),
        Column("mixture classes", ("test", "best_mixture", "classes_covered")),
        Column("mixture KID", ("test", "best_mixture", "kid"), 1),
        Column("mixture precision", ("test", "best_mixture", "precision"), 3),
        Column("mixture recall", ("test", "best_mixture", "recall"), 3),
        Column("mixture coverage", ("test", "best_mixture", "coverage"), 3),
        Column("best G FID", ("test", "best_generator", "fid"), 1),
        Column("mean cell mixture FID", ("test", "mean_over_cells", "mixture", "fid"), 1),
        Column("mean cell G FID", ("test", "mean_over_cells", "generator", "fid"), 1),
        Column("training TFLOPs", ("training_flops",), None, 1e-12),
        Column("wall s", ("wall_s",), 0),
    ),
    target=("fid",),
    higher_is_better=False,
    best_generator=best_generator,
    base=lambda args: [f"problem.batches_per_generation={args.batches}"],
)


if __name__ == "__main__":
    main(SCRIPT, __doc__ or "", batches)
