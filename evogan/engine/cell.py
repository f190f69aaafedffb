"""One cell of the grid and its Lipizzaner generation: gather, evaluate, select, train, replace, mix.

The cell speaks to its components only through the base classes of :mod:`evogan.api`. DEAP's Statistics
summarise the neighbourhood, and the cell's DEAP Logbook holds one record per generation: the record
``metrics.jsonl``, the reporter and ``evogan_generation_end`` receive.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from deap import tools

from evogan.api import (
    ROLES,
    Mutation,
    Opponents,
    Pairing,
    Problem,
    Role,
    Selection,
    SparsityController,
)
from evogan.engine.codec import Codec, Manifest, Message
from evogan.engine.optimizer_state import load_optimizer_state
from evogan.errors import MessageRejected
from evogan.individual import Individual
from evogan.recipe import Recipe
from evogan.rng import CellRandom
from evogan.sparse.wire import sparse_state
from evogan.transport import envelope


@dataclass
class CellSettings:
    """What every cell of a run shares."""

    recipe: Recipe
    problem: Problem
    selection: Selection
    mutation: Mutation
    sparsity: SparsityController | None
    pairing: Pairing
    run_id: str
    max_message_bytes: int = 1 << 30

    @property
    def seed(self) -> int:
        return self.recipe.run.seed

    @property
    def optimizer_state(self) -> bool:
        """Whether messages carry the optimizer state (``exchange.optimizer_state``)."""
        return self.recipe.exchange.carries_optimizer(self.recipe.population.selection)


@dataclass
class ExchangeLog:
    """Which neighbour generation each cell used, and what was dropped.

    ``staleness`` (this generation's exchanges): per neighbour, the largest lag of a message used behind
    the one wanted, as ``(generations, batches)`` of the ``(generation, substep)`` stamps; ``(0, 0)`` in
    lockstep. ``count``: exchanges this generation (1 + those inside it).
    """

    used: dict[int, int] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)
    staleness: dict[int, tuple[int, int]] = field(default_factory=dict)
    count: int = 0

    def begin_generation(self) -> None:
        self.staleness.clear()
        self.count = 0


@dataclass
class TrainingJob:
    """One cell's training phase of one generation: who trains, whom they may face, the random streams.

    ``seconds``: the time the phase took, set by whoever trained it (a share, when cells train together).
    """

    cell: Cell
    gens: list[Individual]
    discs: list[Individual]
    g_opponents: Sequence[Individual]
    d_opponents: Sequence[Individual]
    rnd: CellRandom
    seconds: float = 0.0


def finish(phases: Generator[TrainingJob, None, dict[str, float]]) -> dict[str, float]:
    """Resume a generation after its training phase; its timings."""
    try:
        next(phases)
    except StopIteration as end:
        return end.value
    raise RuntimeError("a generation yields one training job")


class Cell:
    def __init__(self, index: int, neighbours: Sequence[int], settings: CellSettings) -> None:
        self.index = index
        self.neighbours = tuple(neighbours)
        self.settings = settings
        self.generation = 0
        self.incarnation = 0
        self.sequence = 0
        self.generators: list[Individual] = []
        self.discriminators: list[Individual] = []
        # neighbour cell -> its latest best G and D, as individuals with fresh optimizers
        self.foreign: dict[int, dict[Role, Individual]] = {}
        self.mixture: dict[int, float] = {}
        self.exchange = ExchangeLog()
        self.statistics = tools.Statistics(key=lambda ind: ind.fitness.loss)
        for name, function in (("min", np.min), ("avg", np.mean), ("max", np.max)):
            self.statistics.register(name, function)
        self.logbook = tools.Logbook()  # this cell's records, one per generation (see _record)
        self.codec = Codec(
            index,
            run_id=settings.run_id,
            recipe=settings.recipe.digest,
            optimizer_state=settings.optimizer_state,
            max_bytes=settings.max_message_bytes,
        )
        self._expected: Manifest | None = None
        # called with the number of batches trained, every exchange.every_batches batches of a generation
        self.between_batches: Callable[[int], None] | None = None
        self._training: dict[Role, list[Individual]] | None = None  # the individuals being trained now
        self._memo: dict[torch.nn.Module, Any] = {}  # this generation's per-network fitness outputs
        # vectorised cells: all-vs-all fitness through the problem's stacked_fitness where it can
        self.batched_fitness = False

    # -------------------------------------------------------------------------------- creation
    @property
    def problem(self) -> Problem:
        return self.settings.problem

    def new_individual(self, role: Role, number: int, generator: torch.Generator) -> Individual:
        network = self.problem.create(role, generator=generator)
        lr = self.problem.learning_rate
        individual = Individual(
            role=role,
            network=network,
            optimizer=self.problem.make_optimizer(role, network, lr),
            hyper={"lr": lr, "lr0": lr},
            origin=self.index,
            uid=f"{self.index}/{role[0].upper()}{number}",
        )
        if self.settings.sparsity is not None:
            self.settings.sparsity.prepare(individual, generator=generator)
        return individual

    def initialise(self) -> None:
        """Create the populations (generation 0) and uniform mixture weights over the neighbourhood."""
        rnd = CellRandom.for_generation(self.settings.seed, self.index, 0, "init")
        size = self.settings.recipe.population.size
        self.generators = [self.new_individual("generator", i, rnd.torch) for i in range(size)]
        self.discriminators = [self.new_individual("discriminator", i, rnd.torch) for i in range(size)]
        neighbourhood = (self.index, *self.neighbours)
        self.mixture = {cell: 1.0 / len(neighbourhood) for cell in neighbourhood}
        self.generation = 0

    def population(self, role: Role) -> list[Individual]:
        return self.generators if role == "generator" else self.discriminators

    def best(self, role: Role) -> Individual:
        return min(self.population(role), key=lambda ind: ind.fitness.loss)

    # -------------------------------------------------------------------------------- exchange
    def _state(self, role: Role) -> dict[str, torch.Tensor]:
        return {f"{role}/{k}": v for k, v in self.best(role).network.state_dict().items()}

    def _published(self, role: Role) -> Individual:
        """Between generations the best individual; inside one, the best of those being trained."""
        live = self._training[role] if self._training else None
        return min(live, key=lambda ind: ind.fitness.loss) if live else self.best(role)

    def message(self, *, substep: int = 0) -> list[bytes | memoryview]:
        """The envelope publishing this cell's best generator and discriminator (see
        :class:`~evogan.engine.codec.Codec`). Inside a generation (``substep`` batches into it) the
        message is stamped with the last finished generation and ``substep``."""
        self.sequence += 1
        return self.codec.encode(
            {role: self._published(role) for role in ROLES},
            generation=self.generation - 1 if substep else self.generation,
            substep=substep,
            sequence=self.sequence,
            incarnation=self.incarnation,
        )

    def _expected_manifest(self) -> Manifest:
        if self._expected is None:
            self._expected = {
                name: (tensor.dtype, tuple(tensor.shape))
                for name, tensor in {**self._state("generator"), **self._state("discriminator")}.items()
            }
        return self._expected

    def receive(
        self, messages: Mapping[int, Sequence[bytes | memoryview]], *, wanted: tuple[int, int] | None = None
    ) -> dict[int, dict[str, Any]]:
        """Gather neighbours' messages into the foreign individuals.

        A message the codec rejects is dropped and counted; the neighbour's last good model stays.
        ``wanted`` is the ``(generation, substep)`` asked for: each used message's lag behind it goes into
        the exchange log's staleness. Returns the headers that were accepted.
        """
        accepted: dict[int, dict[str, Any]] = {}
        for peer, frames in messages.items():
            try:
                message = self.codec.decode(peer, frames, self._expected_manifest())
            except MessageRejected as exc:
                reason = str(exc).split(":")[0][:60]
                self.exchange.dropped[reason] = self.exchange.dropped.get(reason, 0) + 1
                continue
            self._adopt(peer, message)
            accepted[peer] = message.header
            self.exchange.used[peer] = message.header["generation"]
            if wanted is not None:
                got = envelope.stamp(message.header)
                lag = (wanted[0] - got[0], wanted[1] - got[1])
                self.exchange.staleness[peer] = max(lag, self.exchange.staleness.get(peer, lag))
        if wanted is not None:
            self.exchange.count += 1
        return accepted

    def _adopt(self, peer: int, message: Message) -> None:
        slots = self.foreign.setdefault(peer, {})
        for role, model in message.models.items():
            individual = slots.get(role)
            if individual is None:
                generator = torch.Generator().manual_seed(0)  # weights are overwritten right away
                individual = self.new_individual(role, 0, generator)
                individual.origin = peer
                slots[role] = individual
            individual.network.load_state_dict(model.weights)
            self._memo.pop(individual.network, None)  # its outputs on this generation's batch are stale
            lr = self.problem.learning_rate if model.lr is None else model.lr
            individual.hyper = {"lr": lr, "lr0": self.problem.learning_rate}
            individual.optimizer = self.problem.make_optimizer(role, individual.network, lr)
            if model.optimizer is not None:
                load_optimizer_state(individual, model.optimizer)
            individual.uid = model.uid if model.uid is not None else f"{peer}/{role[0].upper()}"
            # The sender's masks and controller state travel with its weights (never fresh random masks).
            individual.sparse = sparse_state(model.sparse, model.masks) if model.sparse else {}
            if model.fitness is not None:
                individual.fitness.values = (model.fitness,)

    # -------------------------------------------------------------------------------- fitness
    def _aggregate(self, losses: torch.Tensor) -> torch.Tensor:
        mode = self.settings.recipe.population.fitness_mode
        if mode == "best":
            return losses.min(dim=1).values
        if mode == "worst":
            return losses.max(dim=1).values
        return losses.mean(dim=1)

    def evaluate(
        self,
        gens: Sequence[Individual],
        discs: Sequence[Individual],
        real: torch.Tensor,
        rnd: CellRandom,
        *,
        score: Sequence[Role] = ROLES,
    ) -> None:
        """All-vs-all: each generator against every discriminator and vice versa. Only the roles in
        ``score`` get new fitness values; the others serve as opponents. With :attr:`batched_fitness` as
        one batched computation where the problem can (else, as always, pair by pair)."""
        networks = ([g.network for g in gens], [d.network for d in discs])
        stacked = self.problem.stacked_fitness(*networks) if self.batched_fitness else None
        if stacked is None or isinstance(stacked, str):  # a decline draws nothing: the looped path's streams
            g_loss, d_loss = self.problem.fitness(*networks, real, generator=rnd.torch, score=score, memo=self._memo)
        else:
            g_loss, d_loss = stacked.fitness(real, generator=rnd.torch, score=score, memo=self._memo)
        if "generator" in score:
            for individual, value in zip(gens, self._aggregate(g_loss).tolist(), strict=True):
                individual.fitness.values = (value,)
        if "discriminator" in score:
            for individual, value in zip(discs, self._aggregate(d_loss).tolist(), strict=True):
                individual.fitness.values = (value,)

    # -------------------------------------------------------------------------------- one generation
    def neighbourhood(self, role: Role) -> list[Individual]:
        foreign = [slots[role] for peer, slots in sorted(self.foreign.items()) if peer in self.neighbours]
        return self.population(role) + foreign

    def step(self) -> dict[str, float]:
        """Run one generation, append its record to :attr:`logbook`; return the per-phase timings (seconds)."""
        phases = self.generation_phases()
        job = next(phases)
        started = time.perf_counter()
        self.train(job)
        job.seconds = time.perf_counter() - started
        return finish(phases)

    def generation_phases(self) -> Generator[TrainingJob, None, dict[str, float]]:
        """One generation, paused at its training phase: it yields the :class:`TrainingJob`, whoever
        drives it trains the job (:meth:`train`, or several cells' jobs at once) and sets ``job.seconds``,
        then resumes it to the end; it returns the per-phase timings and appends the record."""
        self.generation += 1
        settings, problem = self.settings, self.problem
        population = settings.recipe.population
        rnd = CellRandom.for_generation(settings.seed, self.index, self.generation)
        timings: dict[str, float] = {}
        clock = time.perf_counter()

        def lap(phase: str) -> None:
            nonlocal clock
            now = time.perf_counter()
            timings[phase] = timings.get(phase, 0.0) + now - clock
            clock = now

        all_g, all_d = self.neighbourhood("generator"), self.neighbourhood("discriminator")
        real = problem.fitness_batch(generator=rnd.torch, cell=self.index)
        self._memo = {}  # the re-evaluations below reuse what this one computes on the same batch
        self.evaluate(all_g, all_d, real, rnd)
        lap("fitness")

        clone, select = problem.make_optimizer, settings.selection.select
        if population.selection:
            new_g = [ind.clone(clone) for ind in select(all_g, population.size, rng=rnd.numpy)]
            new_d = [ind.clone(clone) for ind in select(all_d, population.size, rng=rnd.numpy)]
            for ind in (*new_g, *new_d):
                ind.origin = self.index
            g_opponents, d_opponents = new_d, new_g
        else:
            new_g, new_d = self.generators, self.discriminators
            g_opponents, d_opponents = all_d, all_g
        lap("selection")

        if settings.sparsity is not None:  # which Ds are the cell's own; offspring share lineage state
            incumbents = self.discriminators if population.selection else ()
            settings.sparsity.begin_generation(new_g, new_d, incumbents)
        job = TrainingJob(self, new_g, new_d, g_opponents, d_opponents, rnd)
        self._training = {"generator": new_g, "discriminator": new_d}
        try:
            yield job
        finally:
            self._training = None
        for trained in (*new_g, *new_d):
            self._memo.pop(trained.network, None)
        timings["training"] = job.seconds
        clock = time.perf_counter()  # the driver's time between the yield and now is not this cell's

        replaced = self._replace(new_g, new_d, all_g, all_d, real, rnd) if population.selection else {}
        if not population.selection:
            self.evaluate(self.generators, all_d, real, rnd, score=("generator",))
            self.evaluate(all_g, self.discriminators, real, rnd, score=("discriminator",))
        lap("replacement")

        self._memo = {}
        mixture_metrics = self._evolve_mixture(rnd)
        lap("mixture")

        self._record(all_g, all_d, replaced, mixture_metrics)
        return timings

    def opponents(self, job: TrainingJob) -> tuple[Opponents, Opponents]:
        """Whom the job's generators and discriminators may face (the pairing draws from these)."""
        return (
            Opponents(own=job.discs, neighbourhood=job.g_opponents, weights=self._cell_weights(job.g_opponents)),
            Opponents(own=job.gens, neighbourhood=job.d_opponents, weights=self._cell_weights(job.d_opponents)),
        )

    def train(self, job: TrainingJob) -> None:
        """Train one generation's job on its own, individual by individual (the reference path): the
        pairing picks, step by step, whom each faces among the job's live opponents."""
        gens, discs, rnd = job.gens, job.discs, job.rnd
        problem, sparsity, numpy_rng = self.problem, self.settings.sparsity, rnd.numpy
        pairing, mutate = self.settings.pairing, self.settings.mutation.mutate
        for_g, for_d = self.opponents(job)
        where = {"cell": self.index, "generation": self.generation}
        for step, real in enumerate(self.batches(rnd)):
            if problem.train_generator_at(step, **where):
                faced = pairing.generator_opponents(for_g, rng=numpy_rng)
                principal = faced[0][0]
                # One opponent keeps the plain call (and its exact arithmetic); several are weighted.
                defence = principal.network if len(faced) == 1 else [(d.network, w) for d, w in faced]
                for g in gens:
                    g.set_hyper(mutate(g.hyper, rng=numpy_rng))
                    info = problem.generator_step(g, defence, real, generator=rnd.torch)
                    info.step = step
                    if sparsity is not None:
                        sparsity.after_generator_step(g, principal, info, problem)
            if not problem.train_discriminator_at(step, **where):
                continue
            defender = pairing.discriminator_opponent(for_d, rng=numpy_rng)
            for d in discs:
                d.set_hyper(mutate(d.hyper, rng=numpy_rng))
                problem.discriminator_step(d, defender.network, real, generator=rnd.torch)
                if sparsity is not None:
                    sparsity.after_discriminator_step(d)
        if sparsity is not None:
            sparsity.end_generation(gens, discs)

    def batches(self, rnd: CellRandom) -> Iterator[torch.Tensor]:
        """The problem's batches, with :attr:`between_batches` called every ``exchange.every_batches``
        batches (never before the first or after the last). It draws no random numbers."""
        every = self.settings.recipe.exchange.every_batches
        for step, real in enumerate(self.problem.training_batches(generator=rnd.torch, cell=self.index)):
            if every and step and step % every == 0 and self.between_batches is not None:
                self.between_batches(step)
            yield real

    def _cell_weights(self, individuals: Sequence[Individual]) -> list[float]:
        """Each individual's share of its cell's mixture weight (cells split evenly among their members),
        normalised; uniform when the mixture gives these cells no weight."""
        counts: dict[int, int] = {}
        for individual in individuals:
            counts[individual.origin] = counts.get(individual.origin, 0) + 1
        weights = [self.mixture.get(ind.origin, 0.0) / counts[ind.origin] for ind in individuals]
        total = sum(weights)
        if total <= 0:
            return [1.0 / len(individuals)] * len(individuals)
        return [w / total for w in weights]

    def _replace(
        self,
        new_g: list[Individual],
        new_d: list[Individual],
        all_g: list[Individual],
        all_d: list[Individual],
        real: torch.Tensor,
        rnd: CellRandom,
    ) -> dict[str, bool]:
        """Offspring and incumbents are scored against the same opponents on the same batch, so the
        comparison is fair (Lipizzaner compared against a stale, start-of-generation loss)."""
        always = self.settings.recipe.population.replacement == "always"
        self.evaluate([*new_g, *self.generators], all_d, real, rnd, score=("generator",))
        self.evaluate(all_g, [*new_d, *self.discriminators], real, rnd, score=("discriminator",))
        replaced: dict[str, bool] = {}
        for role, offspring in zip(ROLES, (new_g, new_d), strict=True):
            local = self.population(role)
            best_new = min(offspring, key=lambda ind: ind.fitness.loss)
            worst = max(range(len(local)), key=lambda i: local[i].fitness.loss)
            accept = always or best_new.fitness.loss < local[worst].fitness.loss
            if accept:
                best_new.uid = local[worst].uid
                local[worst] = best_new
            replaced[role] = accept
        return replaced

    def evaluated(self, individual: Individual) -> torch.nn.Module:
        """The network evaluation and pictures use for ``individual`` (the sparsity controller's choice)."""
        sparsity = self.settings.sparsity
        return individual.network if sparsity is None else sparsity.evaluation_network(individual)

    def best_generator(self) -> torch.nn.Module:
        """The network that stands for this cell's best generator in evaluation and ensembles."""
        return self.evaluated(self.best("generator"))

    def mixture_members(self) -> tuple[list[int], list[torch.nn.Module]]:
        cells, networks = [], []
        for cell in sorted(self.mixture):
            if cell == self.index:
                networks.append(self.best_generator())
            elif cell in self.foreign:
                networks.append(self.evaluated(self.foreign[cell]["generator"]))
            else:
                continue  # never heard from: left out, weights renormalised
            cells.append(cell)
        return cells, networks

    def mixture_ensemble(self) -> tuple[list[int], list[torch.nn.Module], list[float]]:
        """The mixture as an ensemble: its members (cells heard from), their networks, normalised weights."""
        cells, networks = self.mixture_members()
        weights = [self.mixture[c] for c in cells]
        total = sum(weights) or 1.0
        return cells, networks, [w / total for w in weights]

    def _evolve_mixture(self, rnd: CellRandom) -> dict[str, float]:
        """One (1+1)-ES step on the mixture weights, both candidates scored on the same validation noise:
        a seed drawn from the generation's evolution stream, never the test stream (:mod:`evogan.rng`)."""
        cells, networks = self.mixture_members()
        weights = np.array([self.mixture[c] for c in cells], dtype=float)
        weights = weights / weights.sum() if weights.sum() > 0 else np.full(len(cells), 1 / len(cells))
        seed = int(rnd.numpy.integers(2**62))

        def score(candidate: np.ndarray) -> dict[str, float]:
            noise = torch.Generator().manual_seed(seed)
            return self.problem.evaluate_on(networks, candidate.tolist(), stream="validation", generator=noise)

        metrics = score(weights)
        mixture = self.settings.recipe.mixture
        if mixture.enabled and len(cells) > 1:
            candidate = np.clip(weights + rnd.numpy.normal(0, mixture.sigma, len(cells)), 0, None)
            if candidate.sum() > 0:
                candidate = candidate / candidate.sum()
                trial = score(candidate)
                if self.problem.objective(trial) < self.problem.objective(metrics):
                    weights, metrics = candidate, trial
        self.mixture.update({c: float(w) for c, w in zip(cells, weights, strict=True)})
        return metrics

    def _record(
        self,
        all_g: Sequence[Individual],
        all_d: Sequence[Individual],
        replaced: Mapping[str, bool],
        mixture_metrics: Mapping[str, float],
    ) -> None:
        """Append the generation's record to the logbook. Appended whole: ``Logbook.record`` would move
        each nested table (neighbourhood statistics, mixture, staleness...) into a chapter of its own."""
        best_g, best_d = self.best("generator"), self.best("discriminator")
        stats = self.statistics.compile(list(all_g))
        d_stats = self.statistics.compile(list(all_d))
        record: dict[str, Any] = {
            "cell": self.index,
            "generation": self.generation,
            "g_loss": best_g.fitness.loss,
            "d_loss": best_d.fitness.loss,
            "lr_g": best_g.learning_rate,
            "lr_d": best_d.learning_rate,
            "neighbourhood_g": stats,
            "neighbourhood_d": d_stats,
            "replaced": dict(replaced),
            "mixture": {str(c): w for c, w in sorted(self.mixture.items())},
            "mixture_score": self.problem.objective(mixture_metrics),
            "mixture_metrics": dict(mixture_metrics),
            "exchange": {str(p): g for p, g in sorted(self.exchange.used.items())},
            "exchanges": self.exchange.count,
            "staleness": {
                str(p): {"generations": lag[0], "batches": lag[1]}
                for p, lag in sorted(self.exchange.staleness.items())
            },
            "dropped": dict(self.exchange.dropped),
        }
        if self.settings.sparsity is not None:
            record["sparsity"] = self.settings.sparsity.metrics(best_g, best_d)
        self.logbook.append(record)

    # -------------------------------------------------------------------------------- checkpoints
    def state(self) -> dict[str, Any]:
        return {
            "format": 1,
            "cell": self.index,
            "generation": self.generation,
            "incarnation": self.incarnation,
            "sequence": self.sequence,
            "recipe": self.settings.recipe.digest,
            "generators": [ind.state() for ind in self.generators],
            "discriminators": [ind.state() for ind in self.discriminators],
            "mixture": {str(c): w for c, w in self.mixture.items()},
        }

    def load_state(self, state: Mapping[str, Any]) -> None:
        generator = torch.Generator().manual_seed(0)  # weights come from the checkpoint
        for role, key in zip(ROLES, ("generators", "discriminators"), strict=True):
            individuals = [
                Individual.from_state(
                    entry, self.problem.create(role, generator=generator), self.problem.make_optimizer
                )
                for entry in state[key]
            ]
            if self.settings.sparsity is not None:
                for individual in individuals:
                    self.settings.sparsity.check(individual)
            self.population(role)[:] = individuals
        self.generation = int(state["generation"])
        self.incarnation = int(state["incarnation"]) + 1
        self.sequence = int(state["sequence"])
        self.mixture = {int(c): float(w) for c, w in state["mixture"].items()}


__all__ = ["Cell", "CellSettings", "ExchangeLog", "TrainingJob", "finish"]
