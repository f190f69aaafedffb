"""Mode collapse on the 25-mode grid: the grid against its controls, test-stream figures only.

``recipes/toy-grid.toml`` (unless --recipe) at 3x3 and 1x1, 5 seeds by default, and the controls of
``_controls.py``: the lone GAN at equal steps per cell (``lone-steps``) and at the grid's training FLOPs
(``lone-flops-3x3``, which counts each ``g_mixture`` generator step's extra discriminator forwards), the
independent ensemble (``independent-3x3``: ``own_pair``, selection off) and every built-in pairing
(``pairing-NAME-3x3``). Figures of each run (2,500 samples per score, the recipe's score_samples): modes
covered, high-quality fraction and mode TVD of the mixture chosen on the validation stream, scored on the
test stream; the same of the best single generator (chosen on validation); the test means over the cells
of their mixtures and generators. One JSON line per run goes to
``benchmarks/logs/mode_collapse/<commit>.jsonl``; ``--summarise`` prints every table from such logs
alone. Usage:

    .venv/bin/python benchmarks/mode_collapse.py --list                 # the configurations, no runs
    .venv/bin/python benchmarks/mode_collapse.py                        # the full matrix (hours on 2 cores)
    .venv/bin/python benchmarks/mode_collapse.py --configs grid-3x3 lone-steps --seeds 1 2   # a part
    .venv/bin/python benchmarks/mode_collapse.py --grids 2x2 --generations 2 --seeds 1 \\
        --set problem.batches_per_generation=5 --log-dir /tmp/logs     # smoke
    .venv/bin/python benchmarks/mode_collapse.py --summarise            # every log of benchmarks/logs/mode_collapse
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT
from _controls import Column, Script, main

MODES = ("modes_covered",)


def best_generator(cells: Mapping[str, Any]) -> str:
    """Most modes, then the highest high-quality fraction, on the validation stream."""
    def key(cell: str) -> tuple[float, float]:
        scores = cells[cell]["validation"]["generator"]
        return scores["modes_covered"], scores["hq_fraction"]

    return max(cells, key=key)


SCRIPT = Script(
    name="mode_collapse",
    recipe=ROOT / "recipes" / "toy-grid.toml",
    grids=("1x1", "3x3"),
    seeds=(1, 2, 3, 4, 5),
    generations=100,
    columns=(
        Column("modes (mixture)", ("test", "best_mixture", "modes_covered")),
        Column("HQ (mixture)", ("test", "best_mixture", "hq_fraction"), 2),
        Column("TVD (mixture)", ("test", "best_mixture", "tvd"), 3),
        Column("modes (best G)", ("test", "best_generator", "modes_covered")),
        Column("modes (mean cell mixture)", ("test", "mean_over_cells", "mixture", "modes_covered")),
        Column("modes (mean cell G)", ("test", "mean_over_cells", "generator", "modes_covered")),
        Column("training TFLOPs", ("training_flops",), None, 1e-12),
        Column("wall s", ("wall_s",), 0),
    ),
    target=MODES,
    higher_is_better=True,
    best_generator=best_generator,
)


if __name__ == "__main__":
    main(SCRIPT, __doc__ or "")
