"""Vectorised cells (``run.vectorize``): the training phases of all cells a process drives, as one
batched computation.

Cells of one generation are independent while they train (each faces its own population and the
neighbours' copies it received before the generation), so their training phases can run side by side.
Step by step, this loop asks every cell's pairing and mutation in the order the looped path does
(:meth:`Cell._train <evogan.engine.cell.Cell._train>`), each from its cell's own random streams, and hands
the whole step to the problem's :class:`~evogan.api.StackedTraining`. Same seed, same records run to run;
against the looped path the records agree within float tolerance (batched products round differently).

Sparse cells: after each stacked step the sparsity controller's hooks run on every individual, cell by
cell in the looped path's order (``after_generator_step`` with the row's noise, batch, logits and principal
opponent; ``after_discriminator_step``; ``end_generation`` after the last batch). While the stack is open
the individuals' parameters, gradients, optimizer moments and running statistics are views of its rows
(:class:`~evogan.api.StackedTraining`), so the hooks' in-place masking, regrowth and balance-ratio forwards
act on what the next stacked step trains. A controller must be marked ``stackable`` (it changes tensors
only in place); the built-in ones are.

What is not vectorised trains through the looped path, with the reason logged: a controller not marked
stackable, exchanges inside a generation, and whatever the problem declines
(:meth:`Problem.stacked_training <evogan.api.Problem.stacked_training>`: e.g. dropout, a random loss).
One rule decides, for the recipe's check, :func:`decide` and the driver's probe of the problem alike:
:func:`evogan.recipe.vectorize_choice` (``auto`` vectorises only on devices where this path has run).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, Literal

import torch

from evogan.api import StackedTraining
from evogan.engine.cell import CellSettings, TrainingJob
from evogan.individual import Individual
from evogan.recipe import vectorize_choice, vectorize_obstacle

Setting = Literal["auto", True, False]


def engine_reason(settings: CellSettings) -> str:
    """Why the engine itself cannot train these cells together ('' when it can)."""
    sparsity = settings.sparsity
    return vectorize_obstacle(type(sparsity) if sparsity is not None else None, settings.recipe.exchange.every_batches)


def decide(setting: Setting, settings: CellSettings, device: torch.device, cells: int) -> tuple[bool, str]:
    """Whether to vectorise, and the line saying so (:func:`evogan.recipe.vectorize_choice`, the one rule:
    ``auto`` vectorises only on devices where the vectorised path has run, ``true`` where it cannot be
    done is a user error)."""
    return vectorize_choice(setting, device=device.type, cells=cells, obstacle=engine_reason(settings))


def train_together(jobs: Sequence[TrainingJob]) -> str:
    """Train the jobs (one per cell) as one batched computation; '' when done, else the problem's
    reason for declining (nothing trained: the caller trains the jobs one by one)."""
    problem = jobs[0].cell.settings.problem
    gens = [g for job in jobs for g in job.gens]
    discs = [d for job in jobs for d in job.discs]
    started = time.perf_counter()
    stacked = problem.stacked_training(gens, discs, hooks=jobs[0].cell.settings.sparsity is not None)
    if isinstance(stacked, str):
        return stacked
    try:
        _loop(jobs, stacked, gens, discs)
    finally:
        stacked.close()
    share = (time.perf_counter() - started) / len(jobs)
    for job in jobs:
        job.seconds = share
    return ""


def _loop(
    jobs: Sequence[TrainingJob], stacked: StackedTraining, gens: list[Individual], discs: list[Individual]
) -> None:
    settings = jobs[0].cell.settings
    problem, pairing, mutate = settings.problem, settings.pairing, settings.mutation.mutate
    sparsity = settings.sparsity
    opponents = [job.cell.opponents(job) for job in jobs]
    batches = [iter(job.cell.batches(job.rnd)) for job in jobs]

    step = 0
    while True:
        batch = [next(it, None) for it in batches]
        if any(real is None for real in batch):
            if not all(real is None for real in batch):
                raise RuntimeError("cells trained together must have the same number of batches")
            break
        reals: list[torch.Tensor] = [real for real in batch if real is not None]
        if _together(jobs, problem.train_generator_at, step):
            faced, real_g, streams = _rows(
                jobs, reals, lambda k, rng: pairing.generator_opponents(opponents[k][0], rng=rng), "gens", mutate
            )
            infos = stacked.generator_step(faced, real_g, streams)
            if sparsity is not None:  # row by row, as the looped path calls it after each G step
                for g, chosen, info in zip(gens, faced, infos, strict=True):
                    info.step = step
                    sparsity.after_generator_step(g, chosen[0][0], info, problem)
        if _together(jobs, problem.train_discriminator_at, step):
            defenders, real_d, streams = _rows(
                jobs, reals, lambda k, rng: pairing.discriminator_opponent(opponents[k][1], rng=rng), "discs", mutate
            )
            stacked.discriminator_step(defenders, real_d, streams)
            if sparsity is not None:
                for d in discs:
                    sparsity.after_discriminator_step(d)
        step += 1
    if sparsity is not None:
        for job in jobs:
            sparsity.end_generation(job.gens, job.discs)


def _rows(
    jobs: Sequence[TrainingJob],
    reals: Sequence[torch.Tensor],
    pick: Callable[[int, Any], Any],
    members: Literal["gens", "discs"],
    mutate: Callable[..., dict[str, float]],
) -> tuple[list[Any], list[torch.Tensor], list[torch.Generator]]:
    """One step's rows of one role: whom each individual faces, its real batch and its cell's torch
    stream. Each cell draws its pairing (``pick(cell position, numpy rng)``), then each member's mutation,
    from its own streams, in ``Cell.train``'s order."""
    chosen_rows: list[Any] = []
    real_rows: list[torch.Tensor] = []
    streams: list[torch.Generator] = []
    for k, (job, real) in enumerate(zip(jobs, reals, strict=True)):
        chosen = pick(k, job.rnd.numpy)
        for individual in getattr(job, members):
            individual.set_hyper(mutate(individual.hyper, rng=job.rnd.numpy))
            chosen_rows.append(chosen)
            real_rows.append(real)
            streams.append(job.rnd.torch)
    return chosen_rows, real_rows, streams


def _together(jobs: Sequence[TrainingJob], schedule: Callable[..., bool], step: int) -> bool:
    """The schedule's answer at ``step``, the same for every cell trained together (a schedule may depend
    on the cell and its generation; stacked rows cannot skip a step one by one)."""
    answers = {schedule(step, cell=job.cell.index, generation=job.cell.generation) for job in jobs}
    if len(answers) > 1:
        raise RuntimeError(f"cells trained together disagree on whether to train at batch {step}")
    return answers.pop()


__all__ = ["Setting", "decide", "engine_reason", "train_together"]
