"""One cell of the grid: its populations, neighbours' copies, mixture, messages and the mechanics its
generation calls (fitness games, replacement, the mixture's ES, the record). The generation itself, top to
bottom, is :mod:`evogan.engine.generation`; the turn-taking of a process's cells, :mod:`evogan.engine.scheduler`.

The cell speaks to its components only through the base classes of :mod:`evogan.api`. DEAP's Statistics
summarise the neighbourhood, and the cell's DEAP Logbook holds one record per generation: the record
``metrics.jsonl``, the reporter and ``evogan_generation_end`` receive.
"""

from __future__ import annotations

import copy
import functools
import math
from collections import deque
from collections.abc import Generator, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch
from deap import tools

from evogan.api import FitnessGame, Problem, Role, Selection, Variation
from evogan.engine.codec import Codec, Manifest, Message, WireState
from evogan.engine.generation import VaryTogether, generation, run_alone
from evogan.engine.optimizer_state import load_optimizer_state
from evogan.errors import MessageRejected, UserError
from evogan.individual import AVERAGE, SPARSE, Individual
from evogan.recipe import Recipe
from evogan.rng import CellRandom
from evogan.transport import envelope


@runtime_checkable
class StateController(WireState, Protocol):
    """What a cell asks of a problem's controller of per-individual state (a GAN problem's sparsity
    controller, :class:`evogan.adversarial.contracts.SparsityController`): a protocol, so the engine imports
    no problem's contracts."""

    def prepare(self, individual: Individual, *, stream: torch.Generator) -> None: ...

    def evaluation_network(self, individual: Individual) -> torch.nn.Module: ...

    def metrics(self, generator: Individual, discriminator: Individual) -> dict[str, float]: ...

    def check(self, individual: Individual) -> None: ...


@dataclass
class CellSettings:
    """What every cell of a run shares."""

    recipe: Recipe
    problem: Problem
    selection: Selection
    run_id: str
    max_message_bytes: int = 1 << 30

    @functools.cached_property  # a runtime protocol check walks the protocol's members: once, not per call
    def sparsity(self) -> StateController | None:
        """The problem's sparsity controller, if it has one (an adversarial problem's ``[problem.sparsity]``)."""
        sparsity = getattr(self.problem, "sparsity", None)
        return sparsity if isinstance(sparsity, StateController) else None

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


Phases = Generator[Variation, float, dict[str, float]]


def finish(phases: Phases, seconds: float = 0.0) -> dict[str, float]:
    """Resume a generation after its variation phase, which took ``seconds`` (whoever varied the job
    measured them: a share when cells varied together); its timings."""
    try:
        phases.send(seconds)
    except StopIteration as end:
        return end.value
    raise RuntimeError("a generation yields one variation job")


class Cell:
    LOGBOOK_KEPT = 64  # the latest records a cell holds in memory

    def __init__(self, index: int, neighbours: Sequence[int], settings: CellSettings) -> None:
        self.index = index
        self.neighbours = tuple(neighbours)
        self.settings = settings
        self.generation = 0
        self.incarnation = 0
        self.sequence = 0
        self.roles = settings.problem.roles
        self.populations: dict[Role, list[Individual]] = {role: [] for role in self.roles}
        # neighbour cell -> its latest best individual of each role, with fresh optimizers
        self.foreign: dict[int, dict[Role, Individual]] = {}
        self.mixture: dict[int, float] = {}
        self.exchange = ExchangeLog()
        self.statistics = tools.Statistics(key=lambda ind: ind.fitness.loss)
        for name, function in (("min", np.min), ("avg", np.mean), ("max", np.max)):
            self.statistics.register(name, function)
        # this cell's latest records, one per generation (see _record); metrics.jsonl holds the whole
        # run: a cell that kept all of them would grow by gigabytes over a long run of a cheap problem
        self.logbook: deque[dict[str, Any]] = deque(maxlen=self.LOGBOOK_KEPT)
        self.codec = Codec(
            index,
            run_id=settings.run_id,
            recipe=settings.recipe.digest,
            optimizer_state=settings.optimizer_state,
            max_bytes=settings.max_message_bytes,
            roles=self.roles,
            wire=settings.recipe.exchange.wire,
            sparsity=settings.sparsity,
        )
        self._expected: Manifest | None = None
        self._parameters: set[str] | None = None
        self._extras: Manifest | None = None
        self._training: Mapping[Role, list[Individual]] | None = None  # the individuals being varied now
        self._memo: dict[torch.nn.Module, Any] = {}  # this generation's per-network fitness outputs
        self._stacked = False  # this generation scores through the problem's stacked_fitness where it can
        self.unrestored = False  # an individual diverged this generation and no finite copy was found

    # -------------------------------------------------------------------------------- creation
    @property
    def problem(self) -> Problem:
        return self.settings.problem

    def new_individual(self, role: Role, number: int, generator: torch.Generator) -> Individual:
        network = self.problem.create(role, generator=generator)
        hyper = self.problem.hyper(role)
        individual = Individual(
            role=role,
            network=network,
            optimizer=self.problem.make_optimizer(role, network, hyper.get("lr", 0.0)),
            hyper=hyper,
            origin=self.index,
            uid=f"{self.index}/{role[0].upper()}{number}",
        )
        if self.settings.sparsity is not None:
            self.settings.sparsity.prepare(individual, stream=generator)
        return individual

    def initialise(self) -> None:
        """Create the populations (generation 0) and uniform mixture weights over the neighbourhood."""
        rnd = CellRandom.for_generation(self.settings.seed, self.index, 0, "init")
        size = self.settings.recipe.population.size
        for role in self.roles:
            self.populations[role] = [self.new_individual(role, i, rnd.torch) for i in range(size)]
        neighbourhood = (self.index, *self.neighbours)
        self.mixture = {cell: 1.0 / len(neighbourhood) for cell in neighbourhood}
        self.generation = 0

    def population(self, role: Role) -> list[Individual]:
        return self.populations[role]

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
        """The envelope publishing this cell's best individual of each role (see
        :class:`~evogan.engine.codec.Codec`). Inside a generation (``substep`` batches into it) the
        message is stamped with the last finished generation and ``substep``."""
        self.sequence += 1
        return self.codec.encode(
            {role: self._published(role) for role in self.roles},
            generation=self.generation - 1 if substep else self.generation,
            substep=substep,
            sequence=self.sequence,
            incarnation=self.incarnation,
        )

    def _expected_manifest(self) -> Manifest:
        if self._expected is None:
            states = [self._state(role) for role in self.roles]
            self._expected = {
                name: (tensor.dtype, tuple(tensor.shape)) for state in states for name, tensor in state.items()
            }
        return self._expected

    def _parameter_names(self) -> set[str]:
        """``role/name`` of every parameter (what a moving average holds), as the manifest names them."""
        if self._parameters is None:
            self._parameters = {
                f"{role}/{name}" for role in self.roles for name, _ in self.best(role).network.named_parameters()
            }
        return self._parameters

    def _extra_manifest(self) -> Manifest:
        """The problem's ``extra_layout`` of every role, named ``role/name`` as the manifest names tensors."""
        if self._extras is None:
            layouts = {role: self.problem.extra_layout(role) for role in self.roles}
            self._extras = {f"{role}/{name}": kind for role, layout in layouts.items() for name, kind in layout.items()}
        return self._extras

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
                message = self.codec.decode(
                    peer, frames, self._expected_manifest(), self._parameter_names(), self._extra_manifest()
                )
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
            individual.hyper = self.problem.hyper(role)
            if model.lr is not None:
                individual.hyper["lr"] = model.lr
            lr = individual.hyper.get("lr", 0.0)
            individual.optimizer = self.problem.make_optimizer(role, individual.network, lr)
            if model.optimizer is not None:
                load_optimizer_state(individual, model.optimizer)
            individual.uid = model.uid if model.uid is not None else f"{peer}/{role[0].upper()}"
            extra: dict[str, Any] = {k: v.clone() for k, v in model.extra.items()}
            if model.average is not None:
                extra[AVERAGE] = {k: v.clone() for k, v in model.average.items()}
            if model.sparse:  # the sender's masks and controller state (never fresh random masks)
                extra[SPARSE] = {**copy.deepcopy(model.sparse), "masks": dict(model.masks)}
            individual.extra = extra
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
        first: Sequence[Individual],
        second: Sequence[Individual],
        data: Any,
        rnd: CellRandom,
        *,
        score: Sequence[Role] | None = None,
    ) -> None:
        """All-vs-all: each individual of the first role against every one of the second and vice versa.
        Only the roles in ``score`` (default both) get new fitness values; the others serve as opponents.
        In a generation asked to stack its fitness, as one batched computation where the problem can
        (else pair by pair)."""
        score = self.roles if score is None else score
        networks = ([ind.network for ind in first], [ind.network for ind in second])
        stacked = self.problem.stacked_fitness(*networks) if self._stacked else None
        if stacked is None or isinstance(stacked, str):  # a decline draws nothing: the looped path's streams
            losses = self.problem.fitness(*networks, data, generator=rnd.torch, score=score, memo=self._memo)
        else:
            losses = stacked.fitness(data, generator=rnd.torch, score=score, memo=self._memo)
        for role, individuals, loss in zip(self.roles, (first, second), losses, strict=True):
            if role in score:
                for individual, value in zip(individuals, self._aggregate(loss).tolist(), strict=True):
                    # a non-finite loss ranks last: selection and replacement never prefer it
                    individual.fitness.values = (value if math.isfinite(value) else math.inf,)

    # -------------------------------------------------------------------------------- one generation
    def neighbourhood(self, role: Role) -> list[Individual]:
        foreign = [slots[role] for peer, slots in sorted(self.foreign.items()) if peer in self.neighbours]
        return self.population(role) + foreign

    def upcoming_fitness(self) -> FitnessGame:
        """The game the next generation's fitness phase plays (its neighbourhood against itself on the
        generation's batch), as it will be played, from a fresh copy of that generation's streams: the
        neighbours must have been gathered. Asking draws nothing the generation will draw."""
        rnd = CellRandom.for_generation(self.settings.seed, self.index, self.generation + 1)
        pool, data = self._fitness_inputs(rnd)
        first, second = ([ind.network for ind in pool[role]] for role in self.roles)
        return FitnessGame(first, second, data)

    def _fitness_inputs(self, rnd: CellRandom) -> tuple[dict[Role, list[Individual]], Any]:
        """The generation's neighbourhood per role and its fitness batch (drawn from ``rnd``)."""
        pool = {role: self.neighbourhood(role) for role in self.roles}
        return pool, self.problem.fitness_batch(generator=rnd.torch, cell=self.index)

    def start_generation(self, *, stacked_fitness: bool = False) -> CellRandom:
        """Step to the next generation (:func:`evogan.engine.generation.generation` runs it); its random
        streams. ``stacked_fitness``: score its games through :meth:`Problem.stacked_fitness` where the
        problem can (vectorised cells)."""
        self._stacked = stacked_fitness
        self.generation += 1
        return CellRandom.for_generation(self.settings.seed, self.index, self.generation)

    def forget_outputs(self) -> None:
        """Drop the memoised fitness outputs: a new batch, or a phase that must not reuse them."""
        self._memo = {}

    @contextmanager
    def training(self, members: Mapping[Role, list[Individual]]) -> Iterator[None]:
        """While ``members`` vary: messages publish the best of them, and afterwards their memoised
        fitness outputs are stale."""
        self._training = members
        try:
            yield
        finally:
            self._training = None
        for role in self.roles:
            for varied in members[role]:
                self._memo.pop(varied.network, None)

    def step(self) -> dict[str, float]:
        """Run one generation alone (no exchange inside it), append its record to :attr:`logbook`;
        return the per-phase timings (seconds)."""
        return run_alone(generation(self))

    def generation_phases(self, *, stacked_fitness: bool = False) -> Phases:
        """One generation, paused at its variation phase: it yields the :class:`~evogan.api.Variation`,
        the caller varies it, then resumes it to the end with the seconds that took (:func:`finish`).
        Kept for callers of 0.3.0; :func:`evogan.engine.generation.generation` is the generation."""
        steps = generation(self, together=True, stacked_fitness=stacked_fitness)
        pause = next(steps)
        assert isinstance(pause, VaryTogether)
        seconds = yield pause.job
        try:
            steps.send(seconds)
        except StopIteration as end:
            return end.value
        raise RuntimeError("a generation yields one variation job")

    def varying(self, job: Variation) -> Iterator[int]:
        """The problem's variation of ``job``, paused at each exchange inside the generation (it yields
        the batches done there)."""
        return iter(self.problem.vary(job) or ())

    def vary(self, job: Variation) -> None:
        """Vary one generation's job on its own, without exchanges inside it."""
        for _ in self.varying(job):
            pass

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
        offspring: Mapping[Role, list[Individual]],
        pool: Mapping[Role, list[Individual]],
        data: Any,
        rnd: CellRandom,
    ) -> dict[str, bool]:
        """Offspring and incumbents are scored against the same opponents on the same batch, so the
        comparison is fair (Lipizzaner compared against a stale, start-of-generation loss). ``if_better``
        and ``always`` put the best offspring in place of the worst incumbent; ``generational`` (comma
        replacement) puts the offspring in place of the whole population."""
        first, second = self.roles
        self.evaluate([*offspring[first], *self.population(first)], pool[second], data, rnd, score=(first,))
        self.evaluate(pool[first], [*offspring[second], *self.population(second)], data, rnd, score=(second,))
        mode = self.settings.recipe.population.replacement
        replaced: dict[str, bool] = {}
        for role in self.roles:
            local, new = self.population(role), offspring[role]
            if mode == "generational":
                for child, parent in zip(new, local, strict=True):
                    child.uid = parent.uid
                local[:] = new
                replaced[role] = True
                continue
            best_new = min(new, key=lambda ind: ind.fitness.loss)
            worst = max(range(len(local)), key=lambda i: local[i].fitness.loss)
            if mode == "mixture" and role == first:
                accept = self._improves_mixture(best_new, local[worst], rnd)
            else:
                accept = mode == "always" or best_new.fitness.loss < local[worst].fitness.loss
            if accept:
                best_new.uid = local[worst].uid
                local[worst] = best_new
            replaced[role] = accept
        return replaced

    def _on_validation(
        self, networks: Sequence[torch.nn.Module], weights: Sequence[float], seed: int
    ) -> dict[str, float]:
        """The mixture's metrics on the validation stream, on noise fixed by ``seed``: candidates compared
        with one seed are compared on the same samples."""
        noise = torch.Generator().manual_seed(seed)
        return self.problem.evaluate_on(networks, list(weights), stream="validation", generator=noise)

    def _improves_mixture(self, offspring: Individual, incumbent: Individual, rnd: CellRandom) -> bool:
        """Whether the cell's mixture scores better on the validation stream with ``offspring`` standing for
        this cell than with ``incumbent``: what a generator adds to its neighbourhood's ensemble, not its
        loss against this generation's critics (issue 35). Both on the same noise."""
        cells, networks = self.mixture_members()
        weights = [self.mixture[c] for c in cells]
        if self.index not in cells:  # no weight of its own (left out): it joins at the members' mean weight
            cells, weights = [*cells, self.index], [*weights, (sum(weights) or 1.0) / max(1, len(weights))]
            networks = [*networks, self.best_scored()]
        total = sum(weights) or 1.0
        share = [w / total for w in weights]
        seed = int(rnd.numpy.integers(2**62))

        def objective(candidate: Individual) -> float:
            own = self.evaluated(candidate)
            members = [own if c == self.index else n for c, n in zip(cells, networks, strict=True)]
            return self.problem.objective(self._on_validation(members, share, seed))

        return objective(offspring) < objective(incumbent)

    def evaluated(self, individual: Individual) -> torch.nn.Module:
        """The network evaluation and pictures use for ``individual``: the sparsity controller's choice
        (SEMA), else the problem's (a moving average where the individual keeps one), else its network."""
        sparsity = self.settings.sparsity
        network = individual.network if sparsity is None else sparsity.evaluation_network(individual)
        if network is individual.network:
            return self.problem.evaluation_network(individual)
        return network

    def best_scored(self) -> torch.nn.Module:
        """The network that stands for this cell's best of the scored role (the problem's first: a GAN's
        generator) in evaluation and ensembles."""
        return self.evaluated(self.best(self.roles[0]))

    def mixture_members(self) -> tuple[list[int], list[torch.nn.Module]]:
        cells, networks = [], []
        for cell in sorted(self.mixture):
            if cell == self.index:
                if self.unrestored and len(self.mixture) > 1:
                    continue  # a non-finite generator is never weighted while another member exists
                networks.append(self.best_scored())
            elif cell in self.foreign:
                networks.append(self.evaluated(self.foreign[cell][self.roles[0]]))
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
        a seed drawn from the generation's evolution stream, never the test stream (:mod:`evogan.rng`).
        With the mixture disabled the weights stay as they are and the cell's best individual of the
        scored role is scored alone (what its record reports as ``best_score`` and ``best_metrics``)."""
        mixture = self.settings.recipe.mixture
        if not mixture.enabled:  # no ensemble: the cell's best individual alone stands for it
            return self._on_validation([self.best_scored()], [1.0], int(rnd.numpy.integers(2**62)))
        cells, networks = self.mixture_members()
        weights = np.array([self.mixture[c] for c in cells], dtype=float)
        weights = weights / weights.sum() if weights.sum() > 0 else np.full(len(cells), 1 / len(cells))
        seed = int(rnd.numpy.integers(2**62))
        from evogan.scores import LazyMetrics  # here: the generation's restructuring owns this module's head

        def score(candidate: np.ndarray) -> LazyMetrics:
            # as _on_validation, but lazily: both candidates need the objective, only the kept one the rest
            noise = torch.Generator().manual_seed(seed)
            return self.problem.evaluate_lazily(networks, candidate.tolist(), stream="validation", generator=noise)

        metrics = score(weights)
        if len(cells) > 1:
            candidate = np.clip(weights + rnd.numpy.normal(0, mixture.sigma, len(cells)), 0, None)
            if candidate.sum() > 0:
                candidate = candidate / candidate.sum()
                trial = score(candidate)
                if self.problem.objective(trial) < self.problem.objective(metrics):
                    weights, metrics = candidate, trial
        self.mixture.update({c: float(w) for c, w in zip(cells, weights, strict=True)})
        return metrics.complete()

    def _record(
        self,
        pool: Mapping[Role, Sequence[Individual]],
        replaced: Mapping[str, bool],
        mixture_metrics: Mapping[str, float],
        extra: Mapping[str, Any],
    ) -> None:
        """Append the generation's record to the logbook. Appended whole: ``Logbook.record`` would move
        each nested table (neighbourhood statistics, mixture, staleness...) into a chapter of its own.
        Per-role fields carry the problem's keys for the roles (``g_loss``, ``lr_d``...)."""
        best = {role: self.best(role) for role in self.roles}
        keys = dict(zip(self.roles, self.problem.keys(), strict=True))
        record: dict[str, Any] = {"cell": self.index, "generation": self.generation}
        record.update({f"{keys[role]}_loss": best[role].fitness.loss for role in self.roles})
        record.update({f"lr_{keys[role]}": best[role].hyper["lr"] for role in self.roles if "lr" in best[role].hyper})
        record.update({f"neighbourhood_{keys[role]}": self.statistics.compile(list(pool[role])) for role in self.roles})
        score = self.problem.objective(mixture_metrics)
        if self.settings.recipe.mixture.enabled:
            chosen = {
                "mixture": {str(c): w for c, w in sorted(self.mixture.items())},
                "mixture_score": score,
                "mixture_metrics": dict(mixture_metrics),
            }
        else:  # no weights: what the cell's best individual alone scores
            chosen = {"best_score": score, "best_metrics": dict(mixture_metrics)}
        record.update({
            "replaced": dict(replaced),
            **chosen,
            "exchange": {str(p): g for p, g in sorted(self.exchange.used.items())},
            "exchanges": self.exchange.count,
            "staleness": {
                str(p): {"generations": lag[0], "batches": lag[1]}
                for p, lag in sorted(self.exchange.staleness.items())
            },
            "dropped": dict(self.exchange.dropped),
        })
        if self.settings.sparsity is not None:
            record["sparsity"] = self.settings.sparsity.metrics(*(best[role] for role in self.roles))
        metrics = {
            f"{keys[role]}_{name}": value
            for role in self.roles
            for name, value in self.problem.individual_metrics(best[role]).items()
        }
        if metrics:  # records of a problem that reports none stay as they were
            record["individual_metrics"] = metrics
        record.update(extra)
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
            **{f"{role}s": [ind.state() for ind in self.population(role)] for role in self.roles},
            "mixture": {str(c): w for c, w in self.mixture.items()},
        }

    def load_state(self, state: Mapping[str, Any]) -> None:
        generator = torch.Generator().manual_seed(0)  # weights come from the checkpoint
        for role in self.roles:
            key = f"{role}s"
            if key not in state:
                raise UserError(f"checkpoint of cell {self.index} holds no {key} (written for another problem?)")
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


__all__ = ["Cell", "CellSettings", "ExchangeLog", "finish"]
