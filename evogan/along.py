"""Scoring a run along its training: every checkpoint generation a run kept, scored as its end is scored
(the mixture chosen on the validation stream, reported on the test stream, and the test means over the
cells), so one run per seed gives a curve of test figures against generator steps.

How many checkpoints a run keeps is the recipe's: ``run.checkpoint_every`` (every how many generations)
and ``run.keep_checkpoints`` (how many of the newest). ``evogan evaluate RUN_DIR --along`` and
``evogan sweep --along`` score with :func:`score_along`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from evogan.api import Problem
    from evogan.trained import TrainedRun


def generator_steps(problem: Problem, generation: int) -> int | None:
    """Generator steps cell 0 has trained by the end of ``generation`` (the problem's schedule), or None
    when the problem does not say (it lacks ``batches_per_generation`` / ``train_generator_at``)."""
    batches = getattr(problem, "batches_per_generation", None)
    trains = getattr(problem, "train_generator_at", None)
    if not callable(batches) or not callable(trains):
        return None
    try:
        return sum(
            1
            for g in range(1, generation + 1)
            for step in range(int(batches(0)))
            if trains(step, cell=0, generation=g)
        )
    except Exception:  # a problem whose schedule needs more than the loaded run holds: no steps, not a crash
        return None


def score_along(
    trained: TrainedRun, progress: Callable[[int, int, int], None] = lambda generation, done, total: None
) -> list[dict[str, Any]]:
    """One row per generation at which every cell kept a checkpoint, oldest first: ``generation``,
    ``steps`` (when the problem says), ``best_cell``, ``test`` (the test figures of the chosen mixture, or
    individual where the run has no mixture), ``validation`` (its validation figures, which chose it) and
    ``mean_over_cells`` (test).

    :param progress: called before each generation is scored with (generation, index, how many).
    """
    from evogan.engine.run import reported

    alone = trained.problem.roles[0]
    generations = trained.generations
    rows: list[dict[str, Any]] = []
    for index, generation in enumerate(generations):
        progress(generation, index, len(generations))
        result = reported(trained.at(generation).scores(), alone)
        row: dict[str, Any] = {"generation": generation}
        steps = generator_steps(trained.problem, generation)
        if steps is not None:
            row["steps"] = steps
        row |= {
            "best_cell": result["best_cell"],
            "test": result["chosen"]["test"],
            "validation": result["chosen"]["validation"],
            "mean_over_cells": result["mean_over_cells"],
        }
        rows.append(row)
    return rows


__all__ = ["generator_steps", "score_along"]
