"""Mixture optimisation after training: a (1+1)-ES on the weights of a finished run's ensembles.

As Lipizzaner's ``optimize_mixture`` and its follow-up (Toutouh et al., GECCO 2020): ``pool = "neighbourhood"``
optimises each cell's mixture over its neighbourhood, ``pool = "all"`` one ensemble over every cell's best generator
(a weight at zero leaves the ensemble). Candidates are scored on the validation stream with common random numbers
(each generator's samples come from its own cell's seed), so scores compare across ensembles and pools; the test
stream only reports. The result goes to ``optimized-mixture.json``, written atomically; checkpoints are only read.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from torch import nn

from evogan.api import Problem
from evogan.engine.cell import Cell
from evogan.engine.rundir import RunDirectory, atomic_write, writing
from evogan.errors import UserError
from evogan.recipe import POOLS, OptimizeSection
from evogan.rng import score_generator, score_seed, seed_sequence

OPTIMIZED_FILE = "optimized-mixture.json"


@dataclass
class Ensemble:
    """Generators of some cells: ``centre`` is the cell whose neighbourhood it is (None: the grid's)."""

    centre: int | None
    members: list[int]
    networks: list[nn.Module]
    trained: list[float] | None  # the mixture weights training left (neighbourhoods only)


def ensembles(cells: Sequence[Cell], pool: str) -> list[Ensemble]:
    """The ensembles a pool optimises, from cells loaded with their neighbours' final models."""
    if pool == "all":
        networks = [cell.best_scored() for cell in cells]
        return [Ensemble(None, [cell.index for cell in cells], networks, None)]
    out = []
    for cell in cells:
        out.append(Ensemble(cell.index, *cell.mixture_ensemble()))
    return out


def _rng(seed: int, cell: int) -> np.random.Generator:
    """The ES's draws: generation index 0 of a cell's "mixture" stream for the ensemble centred on it
    (the grid's ensemble uses the number of cells). Its samples' seeds come from the validation stream."""
    return np.random.default_rng(seed_sequence(seed, cell, 0, "mixture"))


def optimise(
    problem: Problem,
    ensemble: Ensemble,
    options: OptimizeSection,
    *,
    seed: int,
    grid: int,
    test_seed: int | None = None,
) -> dict[str, Any]:
    """One ensemble's (1+1)-ES on the validation stream: ``w' = normalise(max(0, w + N(0, sigma^2)))``,
    kept when its score is lower (the problem's objective). Returns the weights before and after with
    their validation ``metrics`` and ``score``, and under ``test`` the same weights on the test stream of
    ``test_seed`` (default ``seed``; the run's seed keeps them comparable with summary.json)."""
    rng = _rng(seed, grid if ensemble.centre is None else ensemble.centre)
    seeds = [score_seed(seed, "validation", member) for member in ensemble.members]
    score = problem.ensemble_scorer(ensemble.networks, seeds, samples=options.samples)
    n = len(ensemble.members)
    baseline = ensemble.trained or [1.0 / n] * n
    if options.random_init:
        draw = rng.random(n)
        start = [float(w) for w in draw / draw.sum()]
    else:
        start = list(baseline)
    before = score(baseline)
    weights = np.array(start)
    metrics = score(start) if options.random_init else before
    accepted = 0
    for _ in range(options.generations if n > 1 else 0):
        candidate = np.clip(weights + rng.normal(0.0, options.sigma, n), 0.0, None)
        if candidate.sum() <= 0:
            continue
        candidate = candidate / candidate.sum()
        trial = score([float(w) for w in candidate])
        if problem.objective(trial) < problem.objective(metrics):
            weights, metrics, accepted = candidate, trial, accepted + 1

    def named(values: Sequence[float] | np.ndarray) -> dict[str, float]:
        return {str(c): float(w) for c, w in zip(ensemble.members, values, strict=True)}

    def reported(values: Sequence[float], validation: dict[str, float]) -> dict[str, Any]:
        test = problem.evaluate_on(
            ensemble.networks,
            [float(w) for w in values],
            stream="test",
            generator=score_generator(seed if test_seed is None else test_seed, "test"),
        )
        return {
            "weights": named(values),
            "metrics": validation,
            "score": problem.objective(validation),
            "test": {"metrics": test, "score": problem.objective(test)},
        }

    return {
        "centre": ensemble.centre,
        "members": [str(c) for c in ensemble.members],
        "before": reported(baseline, before),
        "start": named(start),
        "after": reported([float(w) for w in weights], metrics),
        "accepted": accepted,
    }


def optimise_run(
    run_dir: RunDirectory,
    problem: Problem,
    cells: Sequence[Cell],
    options: OptimizeSection,
    *,
    seed: int,
    test_seed: int | None = None,
) -> dict[str, Any]:
    """Optimise the pool's ensembles of ``cells`` (loaded from ``run_dir``'s checkpoints, see
    :func:`evogan.engine.run.load_cells`) on the validation stream of ``seed``, choose the best on it,
    report each on the test stream of ``test_seed`` (default ``seed``), and record the result under the
    pool's name in ``optimized-mixture.json``. Returns that entry."""
    test = seed if test_seed is None else test_seed
    results = [
        optimise(problem, e, options, seed=seed, grid=len(cells), test_seed=test)
        for e in ensembles(cells, options.pool)
    ]
    best = min(range(len(results)), key=lambda i: results[i]["after"]["score"])  # validation: it chooses
    entry = {
        "pool": options.pool,
        "generations": options.generations,
        "samples": options.samples,
        "sigma": options.sigma,
        "random_init": options.random_init,
        "seed": seed,
        "test_seed": test,
        "evaluation": {"chosen_on": "validation", "reported_on": "test"},
        "checkpoints": {str(cell.index): cell.generation for cell in cells},
        "best": best,
        "ensembles": results,
    }
    path = run_dir.path / OPTIMIZED_FILE
    recorded = read_optimized(run_dir.path) if path.exists() else {}
    recorded[options.pool] = entry
    text = json.dumps(recorded, indent=2, sort_keys=True, default=float)
    with writing(path):
        atomic_write(path, lambda f: f.write(text + "\n"), binary=False)
    return entry


def read_optimized(run_dir: Path) -> dict[str, Any]:
    path = run_dir / OPTIMIZED_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{path}: not found; run `evogan optimize {run_dir}` first") from None
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: unreadable: {exc}") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: not an optimisation record")
    return data


def optimized_ensemble(
    run_dir: Path, pool: str, cells: Sequence[Cell]
) -> tuple[list[nn.Module], list[float], dict[str, Any]]:
    """The best optimised ensemble of ``pool`` as networks and weights (the cells are the run's, loaded
    from the checkpoints the optimisation read), and its record."""
    path = run_dir / OPTIMIZED_FILE
    entry = read_optimized(run_dir).get(pool)
    if not isinstance(entry, Mapping):
        raise UserError(f"{path}: no {pool!r} ensemble; run `evogan optimize {run_dir} --pool {pool}`")
    generations = {str(cell.index): cell.generation for cell in cells}
    if entry.get("checkpoints") != generations:
        raise UserError(f"{path}: computed on other checkpoints than the run's newest; run `evogan optimize` again")
    by_index = {cell.index: cell for cell in cells}  # a neighbour's model is its own cell's best
    networks, weights = [], []
    try:
        chosen = entry["ensembles"][entry["best"]]
        for member, weight in chosen["after"]["weights"].items():
            cell = by_index[int(member)]
            networks.append(cell.best_scored())
            weights.append(float(weight))
    except (KeyError, IndexError, TypeError, ValueError, AttributeError):  # edited or cut by hand
        raise UserError(
            f"{path}: the {pool!r} entry is not an optimisation record; run `evogan optimize` again"
        ) from None
    return networks, weights, dict(chosen)


__all__ = ["OPTIMIZED_FILE", "POOLS", "Ensemble", "ensembles", "optimise", "optimise_run", "optimized_ensemble"]
