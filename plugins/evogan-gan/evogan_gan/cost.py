"""Training FLOPs of a GAN run, from its recipe alone: the sparse ledger's cost model
(:mod:`evogan_gan.sparse.flops`) applied to the steps the problem's schedule trains, as the grid benchmarks
count them (``benchmarks/_controls.py`` imports them from here). Per sample, a generator step costs
``3 f_G + 2 k f_D`` (``k`` the discriminators it faces, asked of the pairing), a discriminator step
``6 f_D + f_G``; times the batch size, the population and the steps. E-GAN's children and their fitness are
counted; the engine's fitness, scoring and the mixture ES are not training and are not.

``python -m evogan_gan.cost RUN_DIR`` prints ``{"flops": [...], "steps": [...]}``, cumulative after each
generation of the run's recipe (``evogan sweep`` records them); a problem that is not the GAN problem
prints ``{}``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from evogan.recipe import Recipe
    from evogan.registry import Registries


def egan_step_cost(egan: Any, f_g: float, f_d: float, batch: int) -> float:
    """One generator step under ``[problem.egan]`` (None: off), ``f_d`` the forward FLOPs of every
    discriminator it faces: a plain step per child, and with two children or more each child's fitness."""
    from evogan_gan.sparse.flops import generator_step_cost

    children = 1 if egan is None else len(egan.losses)
    cost = children * generator_step_cost(f_g, f_d, batch)
    if children > 1:
        diversity = egan.gamma > 0
        per_child = f_g + (3.0 if diversity else 1.0) * f_d
        cost += children * batch * per_child + (3.0 * batch * f_d if diversity else 0.0)
    return cost


def discriminators_faced(
    pairing: Any, recipe: Recipe, neighbours: Sequence[int], cell: int, progress: float = 0.0
) -> int:
    """How many discriminators one generator step of ``cell`` runs, asked of the pairing itself."""
    import numpy as np

    from evogan.api import Opponents

    size = recipe.population.size
    own = [object() for _ in range(size)]
    peers = len(set(neighbours) - {cell})
    offspring_only = recipe.population.selection and recipe.population.opponents == "offspring"
    neighbourhood = own if offspring_only else own + [object() for _ in range(size * peers)]
    weights = [1 / len(neighbourhood)] * len(neighbourhood)
    opponents = Opponents(own=own, neighbourhood=neighbourhood, weights=weights, progress=progress)  # type: ignore[arg-type]
    return len(pairing.generator_opponents(opponents, rng=np.random.default_rng(0)))


def cost_per_generation(recipe: Recipe, registries: Registries) -> Iterator[tuple[float, int]]:
    """Training FLOPs of the whole grid and generator steps of cell 0 in each generation 1, 2, ..."""
    import torch

    from evogan.engine.run import build_settings, build_topology
    from evogan_gan.sparse.flops import count_forward_flops, discriminator_step_cost

    settings = build_settings(recipe, registries, None, torch.device("cpu"), scoring=False)
    problem: Any = settings.problem
    draw = torch.Generator().manual_seed(0)
    f_g = count_forward_flops(problem.create("generator", generator=draw), problem.noise(1, draw), {}).forward()
    real = problem.source.sample(1, generator=draw)
    f_d = count_forward_flops(problem.create("discriminator", generator=draw), real, {}).forward()
    topology = build_topology(recipe)
    size, batch = recipe.population.size, problem.options.batch_size
    generation = 0
    while True:
        generation += 1
        progress = (generation - 1) / max(1, recipe.run.generations)
        faced = [
            discriminators_faced(problem.pairing, recipe, topology.neighbours(c), c, progress)
            for c in range(topology.cells)
        ]
        total, steps = 0.0, 0
        for cell in range(topology.cells):
            where = {"cell": cell, "generation": generation}
            for step in range(problem.batches_per_generation(cell)):
                if problem.train_generator_at(step, **where):
                    total += size * egan_step_cost(problem.options.egan, f_g, faced[cell] * f_d, batch)
                    steps += cell == 0
                if problem.train_discriminator_at(step, **where):
                    total += size * discriminator_step_cost(f_d, f_g, batch)
        yield total, steps


def cumulative(recipe: Recipe, registries: Registries) -> dict[str, list[float]]:
    """Training FLOPs and generator steps after each generation of ``recipe`` (empty: not a GAN problem)."""
    try:
        costs = cost_per_generation(recipe, registries)
        flops, steps, total, count = [], [], 0.0, 0
        for _ in range(recipe.run.generations):
            cost, trained = next(costs)
            total, count = total + cost, count + trained
            flops.append(total)
            steps.append(float(count))
    except (AttributeError, TypeError):  # a problem without the GAN problem's networks and schedule
        return {}
    return {"flops": flops, "steps": steps}


def main(argv: Sequence[str] | None = None) -> None:
    from evogan import recipe as recipes
    from evogan.engine.rundir import RunDirectory
    from evogan.plugins import make_plugin_manager
    from evogan.registry import Registries

    (path,) = argv if argv is not None else sys.argv[1:]
    registries = Registries.from_plugin_manager(make_plugin_manager())
    recipe = recipes.load(RunDirectory.open_existing(Path(path)).recipe_path, registries)
    print(json.dumps(cumulative(recipe, registries)))


if __name__ == "__main__":
    main()


__all__ = ["cost_per_generation", "cumulative", "discriminators_faced", "egan_step_cost"]
