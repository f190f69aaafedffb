"""Driving a run: build the components a recipe names, then step cells generation by generation.

The :class:`Driver` runs any subset of the grid's cells through any transport, so the single-process
mode (every cell, in-process transport) and a launched worker (its share of cells, ZeroMQ) share one loop.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import pluggy
import torch

from evogan import precision
from evogan.api import (
    Problem,
    ProblemContext,
    Role,
    Selection,
    Topology,
    Transport,
)
from evogan.engine.cell import Cell, CellSettings
from evogan.engine.divergence import DivergenceTally
from evogan.engine.plots import BestSeen, MetricLines, plot_grid, plot_metrics, record_score
from evogan.engine.rundir import RunDirectory, writing
from evogan.engine.scheduler import Scheduler
from evogan.engine.vectorized import decide
from evogan.errors import UserError
from evogan.recipe import Recipe, build_nested
from evogan.registry import Registries
from evogan.rng import SCORE_STREAMS, CellRandom, score_generator


@dataclass
class RunInfo:
    """What lifecycle hooks learn about the run.

    :param cells: the grid's cells, all of them; ``local_cells``: those the process firing the hook runs.
    :param start_generation: the generation the run starts from (the least advanced cell's, on resume).
    :param workers: worker processes of the whole run (1: a single-process run).
    :param layout: ``(rows, cols)`` of the topology's 2-D layout, or None (see ``Topology.layout``).
    """

    recipe: Recipe
    run_dir: RunDirectory
    topology: str
    cells: int
    local_cells: tuple[int, ...]
    generations: int
    start_generation: int
    device: str
    workers: int = 1
    layout: tuple[int, int] | None = None


def pick_device(setting: str, local_rank: int = 0) -> torch.device:
    """``auto``: ``cuda:LOCAL_RANK`` (modulo the visible GPUs) when CUDA is present, else the CPU."""
    if setting == "cpu":
        return torch.device("cpu")
    if torch.cuda.is_available():
        return torch.device(f"cuda:{local_rank % torch.cuda.device_count()}")
    if setting == "cuda":
        raise UserError("run.device: cuda was asked for, but no CUDA device is visible")
    return torch.device("cpu")


def build_topology(recipe: Recipe) -> Topology:
    return recipe.choices["topology"].create(Topology)


def build_settings(
    recipe: Recipe,
    registries: Registries,
    run_dir: RunDirectory | None,
    device: torch.device,
    *,
    scoring: bool = True,
    precision_on: torch.device | None = None,
) -> CellSettings:
    """Instantiate the recipe's components; the problem loads its data here (UserError if missing) and,
    unless ``scoring`` is off (a run loaded to sample from), prepares its metric. ``run.precision`` must
    suit ``precision_on`` (default ``device``; the launcher builds on the CPU for workers that may not)."""
    choices = recipe.choices
    unsupported = precision.unsupported(recipe.run.precision, precision_on or device)
    if unsupported:
        raise UserError(f"{recipe.path}: run.precision: {unsupported}")
    context = ProblemContext(
        build=partial(build_nested, registries),
        source=registries,
        device=device,
        seed=recipe.run.seed,
        run_dir=run_dir.path if run_dir else None,
        recipe_path=recipe.path,
        precision=recipe.run.precision,
    )
    problem = choices["problem"].create(Problem, context)
    problem.setup()
    if scoring:
        problem.prepare_scoring()
    return CellSettings(
        recipe=recipe,
        problem=problem,
        selection=choices["selection"].create(Selection),
        run_id=run_dir.run_id if run_dir else "run",
    )


class Driver:
    """Steps ``cells`` (indices into the topology) until every one reaches the last generation."""

    def __init__(
        self,
        recipe: Recipe,
        pm: pluggy.PluginManager,
        settings: CellSettings,
        topology: Topology,
        run_dir: RunDirectory,
        transport: Transport,
        cells: Sequence[int],
        *,
        device: torch.device,
        workers: int = 1,
        summarise: bool = True,
        drives: bool = True,
        annotate: Callable[[int], Mapping[str, Any]] | None = None,
    ) -> None:
        """:param drives: this process fires the per-run hooks (``evogan_run_start``/``evogan_run_end``):
            one process per run does, the one whose :meth:`finish` returns the whole summary.
        :param annotate: cell -> extra fields for its timings record (a runtime's observations, such
            as peer liveness); kept out of metrics.jsonl, which must stay deterministic."""
        self.recipe, self.pm, self.settings, self.topology = recipe, pm, settings, topology
        self.run_dir, self.transport = run_dir, transport
        self.cells = [Cell(i, topology.neighbours(i), settings) for i in cells]
        self.device, self.workers, self.summarise, self.drives = device, workers, summarise, drives
        self.annotate = annotate
        self.info: RunInfo | None = None
        self.vectorize, self.training_note = False, ""  # decided at start, when the populations exist
        self.stacked_fitness = False  # vectorised cells score through Problem.stacked_fitness (decided then)
        self.scheduler: Scheduler | None = None  # the cells' turn-taking, built at start
        self._unnoted: set[int] = set()

    # -------------------------------------------------------------------------------- start
    def start(self, *, resume_at: Mapping[int, int] | None = None) -> RunInfo:
        """Fresh populations, or each cell from its checkpoint of generation ``resume_at[cell]``
        (``resume_at`` may name every cell of the run: the run starts at the least advanced one)."""
        if resume_at is not None:
            for cell in self.cells:
                state = self.run_dir.load_checkpoint(cell.index, resume_at[cell.index])
                if state["recipe"] != self.recipe.digest:
                    path = self.run_dir.checkpoint_path(cell.index, resume_at[cell.index])
                    raise UserError(f"{path}: checkpoint was written by another recipe")
                cell.load_state(state)
                self.run_dir.discard_checkpoints_after(cell.index, cell.generation)  # an abandoned timeline
            self.run_dir.truncate_records({cell.index: cell.generation for cell in self.cells})
            # each logbook holds its cell's latest records, as an unbroken run's would
            owners = {cell.index: cell for cell in self.cells}
            for record in self.run_dir.iter_metrics():
                owner = owners.get(record["cell"])
                if owner is not None and record["generation"] <= owner.generation:
                    owner.logbook.append(record)  # a bounded deque: the latest stay
        else:
            for cell in self.cells:
                cell.initialise()
        populations = [cell.populations for cell in self.cells]
        self.vectorize, self.training_note = decide(
            self.recipe.run.vectorize, self.settings, self.device, len(self.cells), populations
        )
        if self.vectorize:
            self._probe_fitness()
        self._unnoted = {cell.index for cell in self.cells}  # the training note leads each cell's log
        self.scheduler = Scheduler(
            self.settings.problem,
            self.transport,
            self.recipe.exchange,
            vectorize=self.vectorize,
            stacked_fitness=self.stacked_fitness,
            progress=self.progress,
            gathered=self._gathered,
            finished=self.finish_step,
        )
        start = min(resume_at.values()) if resume_at else 0
        self.info = RunInfo(
            recipe=self.recipe,
            run_dir=self.run_dir,
            topology=self.topology.describe(),
            cells=self.topology.cells,
            local_cells=tuple(cell.index for cell in self.cells),
            generations=self.recipe.run.generations,
            start_generation=start,
            device=str(self.device),
            workers=self.workers,
            layout=self.topology.layout(),
        )
        for cell in self.cells:
            self.transport.publish(cell.index, cell.message())
        return self.info

    # -------------------------------------------------------------------------------- loop
    def run(
        self, *, resume_at: Mapping[int, int] | None = None, stop: Callable[[], bool] = lambda: False
    ) -> dict[str, Any]:
        info = self.start(resume_at=resume_at)
        if self.drives:
            self.pm.hook.evogan_run_start(run=info)
        interrupted = False
        last = self.recipe.run.generations
        while any(cell.generation < last for cell in self.cells):
            # Only the least advanced cells step: after a restart from different generations, a cell
            # ahead would wait (up to the exchange timeout) for a neighbour behind it that cannot move
            # while this process is blocked; the cells behind never wait, so they catch up at full speed.
            behind = min(cell.generation for cell in self.cells)
            self.step_cells([cell for cell in self.cells if cell.generation == behind])
            if stop() and any(cell.generation < last for cell in self.cells):
                interrupted = True
                break
        self.progress("finishing")
        for cell in self.cells:
            self.checkpoint(cell)
        summary = self.finish(interrupted) if self.summarise else {}
        finished = "best_cell" in summary and not summary.get("interrupted", interrupted)
        if finished and self.recipe.mixture.optimize.generations:
            self.optimise_mixtures()  # the process that wrote the whole summary; every checkpoint is in
        if self.drives:
            # A worker's own ``interrupted`` is its cells'; the summary's is the run's.
            stopped = bool(summary.get("interrupted", interrupted))
            self.pm.hook.evogan_run_end(run=info, summary=summary, interrupted=stopped)
        return summary

    def optimise_mixtures(self) -> None:
        """``[mixture.optimize]``: the (1+1)-ES on the finished run's ensembles, from its checkpoints."""
        from evogan.engine.ensemble import optimise_run

        cells = load_cells(self.run_dir, self.settings, self.topology)
        options = self.recipe.mixture.optimize
        optimise_run(self.run_dir, self.settings.problem, cells, options, seed=self.recipe.run.seed)

    def progress(self, phase: str, *, expected: float = 0.0) -> None:
        """Where the loop is and how long that may take (seconds); a runtime's watchdog listens."""

    def _probe_fitness(self) -> None:
        """Vectorised cells score fitness as one batched evaluation each where the problem can; the
        training note's second line says which (the probe builds nothing and draws nothing)."""
        cell = self.cells[0]
        fitness = self.settings.problem.stacked_fitness(
            *([ind.network for ind in cell.neighbourhood(role)] for role in cell.roles)
        )
        if isinstance(fitness, str):
            self.training_note += f"\nfitness: pair by pair ({fitness})"
            return
        self.training_note += "\nfitness: all-vs-all as one batched evaluation per cell"
        self.stacked_fitness = True

    def step_cells(self, cells: Sequence[Cell]) -> None:
        """One generation of each of ``cells`` (:class:`~evogan.engine.scheduler.Scheduler`: vectorised,
        as one batched computation; otherwise taking turns at the exchanges inside the generation)."""
        assert self.scheduler is not None, "start() comes first"
        self.scheduler.step(cells)

    def _gathered(self, cell: Cell, accepted: Mapping[int, Mapping[str, Any]]) -> None:
        self.pm.hook.evogan_exchange(run=self.info, cell=cell.index, generation=cell.generation + 1, received=accepted)

    def finish_step(self, cell: Cell, timings: dict[str, float], exchange_seconds: float) -> None:
        """Publish, record, log, fire the generation's hook, checkpoint and draw as the recipe asks.
        ``exchange_seconds``: this generation's exchanges so far (the publishing here is added)."""
        record = cell.logbook[-1]  # the generation's record: metrics.jsonl, the log and the hook get it
        started = time.perf_counter()
        self.transport.publish(cell.index, cell.message())
        timings["exchange"] = exchange_seconds + time.perf_counter() - started
        extra = dict(self.annotate(cell.index)) if self.annotate is not None else {}
        self.run_dir.append_metrics(record)
        self.run_dir.append_timings({"cell": cell.index, "generation": cell.generation, **timings, **extra})
        note = f"{self.training_note}\n" if cell.index in self._unnoted else ""  # one write: one line more
        self._unnoted.discard(cell.index)
        roles = "".join(f"{k}={record[k]:.4f} " for k in record if k.endswith("_loss"))  # the problem's keys
        roles += "".join(f"{k}={record[k]:.3g} " for k in record if k.startswith("lr_"))
        name, score, _ = record_score(record)
        self.run_dir.log(cell.index, f"{note}generation={cell.generation} {roles}{name}_score={score:.4f}")
        run = self.recipe.run
        if run.samples_every and cell.generation % run.samples_every == 0:  # before the hook, which may show it
            self.pictures(cell, f"gen-{cell.generation:04d}")
        self.pm.hook.evogan_generation_end(
            run=self.info,
            cell=cell.index,
            generation=cell.generation,
            record={**record, "timings": {**timings, **extra}},
        )
        if run.checkpoint_every and cell.generation % run.checkpoint_every == 0:
            self.progress("checkpoint")
            self.checkpoint(cell)
        self.progress("generation-end")

    def checkpoint(self, cell: Cell) -> None:
        path = self.run_dir.save_checkpoint(cell.index, cell.state(), keep=self.recipe.run.keep_checkpoints)
        self.pm.hook.evogan_checkpoint(run=self.info, cell=cell.index, generation=cell.generation, path=path)

    def pictures(self, cell: Cell, label: str) -> None:
        _, networks, weights = cell.mixture_ensemble()
        rnd = CellRandom.for_generation(self.recipe.run.seed, cell.index, cell.generation, "evaluation")
        path = self.run_dir.picture_path(label, cell.index)
        with writing(path):
            self.settings.problem.save_pictures(
                networks,
                weights,
                path,
                generator=rnd.torch,
                title=f"cell {cell.index}, generation {cell.generation} (mixture)",
            )

    # -------------------------------------------------------------------------------- end
    def finish(self, interrupted: bool) -> dict[str, Any]:
        """Score every cell's best individual of the scored role and its mixture ensemble on the
        validation and the test stream; pick the best on validation."""
        cells = self.score()
        best = best_cell(cells)
        self.pictures(self.cells[[c.index for c in self.cells].index(int(best))], "final-best")
        return write_summary(
            self.run_dir,
            self.recipe,
            self.topology,
            cells,
            interrupted,
            self.settings.problem.describe(),
            self.settings.problem.roles[0],
        )

    def score(self) -> dict[str, Any]:
        """Scores of this driver's cells (see :func:`score_cells`), after gathering the final models."""
        for cell in self.cells:  # mixtures use the neighbours' final models, as `evogan evaluate` does
            cell.receive(
                self.transport.gather(
                    cell.index,
                    cell.neighbours,
                    cell.generation,
                    max_staleness=0,
                    timeout=self.recipe.exchange.timeout,
                )
            )
        return score_cells(self.cells, self.settings, self.recipe.run.seed)


def best_cell(scores: Mapping[str, Any]) -> str:
    """The cell (its key in ``scores``, as :func:`score_cells` gives them) whose choice (its mixture, or
    its best individual where the mixture is disabled) scored best on the validation stream: the test
    stream never chooses."""
    return min(scores, key=lambda c: _score(scores[c]["validation"]))


def _score(stream: Mapping[str, Any]) -> float:
    """A cell's score on one stream; summaries written before 0.3 have only ``mixture_score``."""
    return float(stream["score"] if "score" in stream else stream["mixture_score"])


def chosen_part(scores: Mapping[str, Any], alone: Role) -> str:
    """The key of what stands for a cell in ``scores`` (:func:`score_cells`): ``mixture``, or the
    scored role (``alone``) where the mixture is disabled."""
    return "mixture" if "mixture" in next(iter(scores.values())) else alone


def mean_over_cells(scores: Mapping[str, Any], alone: Role) -> dict[str, dict[str, float]]:
    """The test metrics of every cell's mixture (where the mixture is enabled) and of every cell's best
    individual of the scored role (``alone``: a GAN's generator), averaged over the cells: figures no
    choice among the cells touched."""
    means: dict[str, dict[str, float]] = {}
    for part in dict.fromkeys((chosen_part(scores, alone), alone)):
        keys = next(iter(scores.values()))[part]
        means[part] = {key: statistics.fmean(float(s[part][key]) for s in scores.values()) for key in keys}
    return means


def reported(scores: Mapping[str, Any], alone: Role) -> dict[str, Any]:
    """What a run reports of its cells' scores: what was chosen on validation (``chosen``: the best
    cell's mixture, or its best individual where the mixture is disabled) on test and (labelled) on
    validation, and the test means over the cells; summary.json and ``evogan evaluate`` hold these.
    Runs with a mixture also carry ``best_mixture`` and ``best_mixture_validation``, deprecated
    aliases of ``chosen["test"]`` and ``chosen["validation"]`` (to go in 0.4)."""
    best = best_cell(scores)
    part = chosen_part(scores, alone)
    chosen = {
        "cell": int(best),
        "what": "mixture" if part == "mixture" else "individual",
        "role": alone,
        "test": scores[best][part],
        "validation": scores[best]["validation"][part],
    }
    report: dict[str, Any] = {
        "evaluation": {"chosen_on": "validation", "reported_on": "test"},
        "best_cell": int(best),
        "chosen": chosen,
    }
    if part == "mixture":  # deprecated aliases, GAN runs' summaries before 0.3
        report["best_mixture"] = chosen["test"]
        report["best_mixture_validation"] = chosen["validation"]
    report["mean_over_cells"] = mean_over_cells(scores, alone)
    return report


def write_summary(
    run_dir: RunDirectory,
    recipe: Recipe,
    topology: Topology,
    cells: Mapping[str, Any],
    interrupted: bool,
    problem: Mapping[str, Any],
    alone: Role,
) -> dict[str, Any]:
    """Pick the best cell among ``cells`` (every cell's scores) on the validation stream, report what
    stands for it on the test stream beside its validation figures, write summary.json and the plots.

    Shared by the single-process driver and the launcher that merges its workers' parts. The records are
    read once, in one pass that feeds the divergence summary and both plots (a long run's are hundreds of MB).
    """
    tally, lines, seen = DivergenceTally(), MetricLines(), BestSeen()
    for record in run_dir.iter_metrics():
        tally.add(record)
        lines.add(record)
        seen.add(record)
    summary = {
        "run": run_dir.run_id,
        "recipe": recipe.digest,
        "topology": topology.describe(),
        "generations": max(int(scores["generation"]) for scores in cells.values()),
        "interrupted": interrupted,
        "cells": dict(cells),
        **reported(cells, alone),
        **tally.summary(),
    }
    if problem:
        summary["problem"] = dict(problem)
    run_dir.write_summary(summary)
    with writing(run_dir.path / "plots"):
        plot_metrics(run_dir, lines=lines)
        final = {int(cell): _score(scores) for cell, scores in cells.items()}
        plot_grid(run_dir, final, topology.layout(), chosen=summary["best_cell"], seen=seen)
    return summary


def score_cells(cells: Sequence[Cell], settings: CellSettings, seed: int) -> dict[str, Any]:
    """Each cell's best individual of the scored role alone (under that role's name: a GAN's
    ``generator``) and, where the recipe's mixture is enabled, its mixture, on both score streams
    (:mod:`evogan.rng`): the test figures at the top (the role, ``mixture``, ``score``: the objective of
    what stands for the cell, its mixture or else its best individual; ``mixture_score`` as well where
    there is a mixture), the validation figures under ``validation`` (what chooses). Every cell sees
    the same noise of a stream."""
    problem = settings.problem
    alone = problem.roles[0]
    enabled = settings.recipe.mixture.enabled
    scores: dict[str, Any] = {}
    for cell in cells:
        _, networks, weights = cell.mixture_ensemble()
        streams: dict[str, dict[str, Any]] = {}
        for stream in SCORE_STREAMS:
            single = problem.evaluate_on(
                [cell.best_scored()], [1.0], stream=stream, generator=score_generator(seed, stream)
            )
            if not enabled:
                streams[stream] = {alone: single, "score": problem.objective(single)}
                continue
            mixture = problem.evaluate_on(networks, weights, stream=stream, generator=score_generator(seed, stream))
            score = problem.objective(mixture)
            streams[stream] = {alone: single, "mixture": mixture, "score": score, "mixture_score": score}
        scores[str(cell.index)] = {
            "generation": cell.generation,
            **streams["test"],
            "validation": streams["validation"],
        }
        if enabled:
            scores[str(cell.index)]["weights"] = {str(c): w for c, w in cell.mixture.items()}
        if settings.sparsity is not None:
            scores[str(cell.index)]["sparsity"] = settings.sparsity.metrics(*(cell.best(r) for r in cell.roles))
    return scores


def load_cells(
    run_dir: RunDirectory, settings: CellSettings, topology: Topology, generation: int | None = None
) -> list[Cell]:
    """Every cell from its checkpoint (the newest, or every cell's at ``generation``), each holding its
    neighbours' best individuals (for mixtures)."""
    cells = [Cell(i, topology.neighbours(i), settings) for i in range(topology.cells)]
    if generation is None:
        points = run_dir.resume_points(range(topology.cells))
    else:
        shared = run_dir.shared_generations(range(topology.cells))
        if generation not in shared:
            kept = f"generations every cell kept: {', '.join(map(str, shared))}" if shared else "no generation has"
            raise UserError(f"{run_dir.path}: generation {generation} has no checkpoint of every cell ({kept})")
        points = dict.fromkeys(range(topology.cells), generation)
    for cell in cells:
        cell.load_state(run_dir.load_checkpoint(cell.index, points[cell.index]))
    for cell in cells:
        for peer in cell.neighbours:
            cell.foreign[peer] = {role: cells[peer].best(role) for role in cell.roles}
    return cells


def set_threads(threads: int) -> None:
    if threads:
        torch.set_num_threads(threads)
        os.environ.setdefault("OMP_NUM_THREADS", str(threads))


def default_threads(processes_here: int) -> int:
    """This machine's usable cores divided by the worker processes on it (as torchrun does), at least 1:
    torch's own default gives every process all cores, and they then slow each other down badly
    (benchmarks/RESULTS.md, 'Scaling (issue 4)')."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, cores // max(1, processes_here))


__all__ = [
    "Driver",
    "RunInfo",
    "best_cell",
    "build_settings",
    "build_topology",
    "chosen_part",
    "default_threads",
    "load_cells",
    "mean_over_cells",
    "pick_device",
    "reported",
    "score_cells",
    "set_threads",
    "write_summary",
]
