"""Vectorised cells (``run.vectorize``): the training phases of all cells a process drives, as one
batched computation.

Cells of one generation are independent while they train (each faces its own population and the
neighbours' copies it received before the generation), so their training phases can run side by side.
Step by step, this loop asks every cell's pairing and mutation in the order the looped path does
(:meth:`Cell._train <evogan.engine.cell.Cell._train>`), each from its cell's own random streams, and hands
the whole step to the problem's :class:`~evogan.api.StackedTraining`. Same seed, same records run to run;
against the looped path the records agree within float tolerance (batched products round differently).

What is not vectorised trains through the looped path, with the reason logged: sparse cells (their
controllers act between steps), exchanges inside a generation, and whatever the problem declines
(:meth:`Problem.stacked_training <evogan.api.Problem.stacked_training>`: e.g. dropout, a random loss).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Literal

import torch

from evogan.api import Faced, StackedTraining
from evogan.engine.cell import CellSettings, TrainingJob
from evogan.errors import UserError
from evogan.individual import Individual

Setting = Literal["auto", True, False]


def engine_reason(settings: CellSettings) -> str:
    """Why the engine itself cannot train these cells together ('' when it can)."""
    if settings.sparsity is not None:
        return "sparse cells: the controller acts between steps, individual by individual"
    if settings.recipe.exchange.every_batches:
        return "exchange.every_batches: cells exchange inside the generation, taking turns"
    return ""


def decide(setting: Setting, settings: CellSettings, device: torch.device, cells: int) -> tuple[bool, str]:
    """Whether to vectorise, and the line saying so. ``auto`` vectorises on CUDA, where small networks
    leave the device idle one cell at a time; on the CPU the looped path stays the default, because it is
    bitwise the same whatever the number of cells per process (vectorised records agree only within
    float tolerance). ``true`` where it cannot be done is a user error."""
    if setting is False:
        return False, "training: looped (run.vectorize = false)"
    if setting == "auto" and device.type != "cuda":
        return False, "training: looped (run.vectorize = auto vectorises on CUDA only)"
    if setting == "auto" and cells < 2:
        return False, "training: looped (one cell in this process)"
    reason = engine_reason(settings)
    if reason and setting is True:
        raise UserError(f"run.vectorize: true, but {reason}")
    if reason:
        return False, f"training: looped ({reason})"
    return True, f"training: vectorised over the {cells} cells of this process"


def train_together(jobs: Sequence[TrainingJob]) -> str:
    """Train the jobs (one per cell) as one batched computation; '' when done, else the problem's
    reason for declining (nothing trained: the caller trains the jobs one by one)."""
    problem = jobs[0].cell.settings.problem
    gens = [g for job in jobs for g in job.gens]
    discs = [d for job in jobs for d in job.discs]
    started = time.perf_counter()
    stacked = problem.stacked_training(gens, discs)
    if isinstance(stacked, str):
        return stacked
    try:
        _loop(jobs, stacked)
    finally:
        stacked.close()
    share = (time.perf_counter() - started) / len(jobs)
    for job in jobs:
        job.seconds = share
    return ""


def _loop(jobs: Sequence[TrainingJob], stacked: StackedTraining) -> None:
    settings = jobs[0].cell.settings
    problem, pairing, mutate = settings.problem, settings.pairing, settings.mutation.mutate
    opponents = [job.cell.opponents(job) for job in jobs]
    batches = [iter(job.cell.batches(job.rnd)) for job in jobs]
    step = 0
    while True:
        reals = [next(it, None) for it in batches]
        if any(real is None for real in reals):
            if not all(real is None for real in reals):
                raise RuntimeError("cells trained together must have the same number of batches")
            return
        if _together(jobs, problem.train_generator_at, step):
            faced: list[Faced] = []
            real_g: list[torch.Tensor] = []
            streams: list[torch.Generator] = []
            for job, (for_g, _), real in zip(jobs, opponents, reals, strict=True):
                chosen = pairing.generator_opponents(for_g, rng=job.rnd.numpy)
                for g in job.gens:
                    g.set_hyper(mutate(g.hyper, rng=job.rnd.numpy))
                    faced.append(chosen)
                    real_g.append(real)  # type: ignore[arg-type]
                    streams.append(job.rnd.torch)
            stacked.generator_step(faced, real_g, streams)
        if _together(jobs, problem.train_discriminator_at, step):
            defenders: list[Individual] = []
            real_d: list[torch.Tensor] = []
            streams = []
            for job, (_, for_d), real in zip(jobs, opponents, reals, strict=True):
                defender = pairing.discriminator_opponent(for_d, rng=job.rnd.numpy)
                for d in job.discs:
                    d.set_hyper(mutate(d.hyper, rng=job.rnd.numpy))
                    defenders.append(defender)
                    real_d.append(real)  # type: ignore[arg-type]
                    streams.append(job.rnd.torch)
            stacked.discriminator_step(defenders, real_d, streams)
        step += 1


def _together(jobs: Sequence[TrainingJob], schedule: Callable[..., bool], step: int) -> bool:
    """The schedule's answer at ``step``, the same for every cell trained together (a schedule may depend
    on the cell and its generation; stacked rows cannot skip a step one by one)."""
    answers = {schedule(step, cell=job.cell.index, generation=job.cell.generation) for job in jobs}
    if len(answers) > 1:
        raise RuntimeError(f"cells trained together disagree on whether to train at batch {step}")
    return answers.pop()


__all__ = ["Setting", "decide", "engine_reason", "train_together"]
