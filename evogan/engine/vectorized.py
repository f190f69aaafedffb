"""Vectorised cells (``run.vectorize``): whether the variation phases of all cells a process drives run
as one batched computation (:meth:`evogan.api.Problem.vary_together`; for GANs, stacked training in
:mod:`evogan.adversarial`, whose sparsity hooks run row by row in the looped order).

What is not vectorised varies cell by cell, with the reason logged: a sparsity controller not marked
stackable, exchanges inside a generation, and whatever the problem declines
(:meth:`evogan.api.Problem.together_obstacle`: e.g. dropout, a random loss). One rule decides, for the
recipe's check, :func:`decide` and the driver's probe of the problem alike:
:func:`evogan.recipe.vectorize_choice` (``auto`` vectorises only on devices where this path has run).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

import torch

from evogan.api import Role
from evogan.engine.cell import CellSettings
from evogan.individual import Individual
from evogan.recipe import vectorize_choice, vectorize_obstacle

Setting = Literal["auto", True, False]


def engine_reason(settings: CellSettings) -> str:
    """Why the engine itself cannot train these cells together ('' when it can)."""
    sparsity = settings.sparsity
    return vectorize_obstacle(type(sparsity) if sparsity is not None else None, settings.recipe.exchange.every_batches)


def decide(
    setting: Setting,
    settings: CellSettings,
    device: torch.device,
    cells: int,
    populations: Sequence[Mapping[Role, Sequence[Individual]]] | None = None,
) -> tuple[bool, str]:
    """Whether to vectorise, and the line saying so (:func:`evogan.recipe.vectorize_choice`, the one rule:
    ``auto`` vectorises only on devices where the vectorised path has run, ``true`` where it cannot be
    done is a user error). The engine's obstacles first; then, given the cells' ``populations``, the
    problem's (:meth:`evogan.api.Problem.together_obstacle`)."""
    together, note = vectorize_choice(setting, device=device.type, cells=cells, obstacle=engine_reason(settings))
    if together and populations is not None:
        obstacle = settings.problem.together_obstacle(populations, hooks=settings.sparsity is not None)
        if obstacle:
            together, note = vectorize_choice(setting, device=device.type, cells=cells, obstacle=obstacle)
    return together, note


__all__ = ["Setting", "decide", "engine_reason"]
