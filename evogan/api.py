"""The contracts between the engine and its plugins.

Every extension point is a *component kind*: a class with a ``name``, an ``Options`` model (a
:class:`ComponentOptions`; unknown keys are errors) and its kind's methods, generic over its options so that
``self.options`` has its own type (``class Tournament(Selection["Tournament.Options"])``). Plugins register components
through :mod:`evogan.hookspecs` and recipes pick them by name. Abstract methods are checked at registration;
optional capabilities are base classes of their own (:class:`ConnectableTransport`), tested with ``issubclass``.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar

import numpy as np
from pydantic import BaseModel, ConfigDict

from evogan import deprecated
from evogan.errors import UserError
from evogan.individual import ROLES, Individual, Role, all_finite, individual_tensors
from evogan.rng import CellRandom, ScoreStream
from evogan.scores import LazyMetrics

if TYPE_CHECKING:
    import torch
    from torch import nn


class ComponentOptions(BaseModel):
    """Base for every component's options: unknown keys are errors, values are validated."""

    model_config = ConfigDict(extra="forbid", frozen=True)


OptionsT = TypeVar("OptionsT", bound=ComponentOptions)


class Component(abc.ABC, Generic[OptionsT]):
    """Base of every registered component: a name, a one-line description and an ``Options`` model.

    The type argument is the class ``Options`` names (``Selection["Tournament.Options"]``), so a type
    checker knows ``self.options``. ``default = True`` marks the component a recipe gets when it leaves
    its kind's optional table out (at most one per kind).
    """

    kind: ClassVar[str]  # set by each kind's base class below, with the hook that registers it
    hook: ClassVar[str]
    name: ClassVar[str]
    description: ClassVar[str] = ""
    Options: ClassVar[type[ComponentOptions]] = ComponentOptions
    default: ClassVar[bool] = False

    def __init__(self, options: OptionsT) -> None:
        self.options: OptionsT = options

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        deprecated.rename_keywords(cls)  # random-stream keywords named ``generator`` until 0.3.0


# --------------------------------------------------------------------------------------------- topology
class Topology(Component[OptionsT]):
    """Which cells exist and who neighbours whom.

    ``neighbours(cell)`` returns the *distinct* other cells whose best individuals ``cell`` pulls, sorted,
    never including ``cell`` itself. The engine adds the cell itself to form its neighbourhood.
    """

    kind: ClassVar[str] = "topology"
    hook: ClassVar[str] = "evogan_register_topologies"

    @property
    @abc.abstractmethod
    def cells(self) -> int:
        raise NotImplementedError

    @abc.abstractmethod
    def neighbours(self, cell: int) -> tuple[int, ...]:
        raise NotImplementedError

    def describe(self) -> str:
        """Short human label such as ``torus 3x3 (von_neumann)``."""
        return self.name

    def layout(self) -> tuple[int, int] | None:
        """``(rows, cols)`` when cell ``r * cols + c`` sits at row ``r``, column ``c`` of a 2-D grid (the live
        view and ``plots/grid.png`` draw it so); None when the cells have no such place (shown as a list)."""
        return None


# --------------------------------------------------------------------------------------------- selection
class Selection(Component[OptionsT]):
    """Picks ``k`` parents from a population; lower ``fitness`` (a loss) is better.

    Implementations must draw every random number from ``rng`` and must not change their input.
    """

    kind: ClassVar[str] = "selection"
    hook: ClassVar[str] = "evogan_register_selections"

    @abc.abstractmethod
    def select(
        self, population: Sequence[Individual], k: int, *, rng: np.random.Generator
    ) -> list[Individual]:
        raise NotImplementedError


# --------------------------------------------------------------------------------------------- problem
@dataclass(frozen=True)
class Opponents:
    """The individuals one role's training steps may face during a generation.

    :param own: the cell's own live individuals of the opposing role (the ones training this generation).
    :param neighbourhood: what the reference draws from: own plus the neighbours' copies, frozen for the
        generation (with selection on: the offspring, as Lipizzaner).
    :param weights: the cell's mixture weight of each ``neighbourhood`` member's cell, summing to one.
    :param progress: how far the run is, from 0 in its first generation to just under 1 in its last
        (``(generation - 1) / run.generations``): for pairings whose coupling follows a schedule.
    """

    own: Sequence[Individual]
    neighbourhood: Sequence[Individual]
    weights: Sequence[float]
    progress: float = 0.0


class ComponentRegistry(Protocol):
    """One kind's registered component classes, by name (an :class:`evogan.registry.Registry`)."""

    def get(self, name: str) -> type[Component[Any]]:
        """The component called ``name``; an unknown name is a ``UserError``."""

    def default(self) -> type[Component[Any]] | None:
        """The kind's component marked ``default = True``, if one is registered."""


class ComponentRegistries(Protocol):
    """Every kind's :class:`ComponentRegistry`, by kind: the run's :class:`evogan.registry.Registries`,
    from which a problem builds the components its options name (:func:`evogan.recipe.build_nested`).
    A protocol, not the registry's class: the registry is built from the kinds below, so the contracts
    do not import it."""

    def __getitem__(self, kind: str) -> ComponentRegistry: ...


@dataclass
class ProblemContext:
    """What a problem may know about the run it serves.

    :param build: makes the nested component a problem's options name, ``build(Dataset, options.data)``
        (a ``ComponentRef`` of the recipe, validated with it): the one way a problem reaches other
        components.
    :param source: the engine's registries, behind :attr:`registries` (deprecated).
    :param precision: ``run.precision`` (``fp32``, ``bf16``, ``fp16``), already checked against ``device``:
        the arithmetic of the problem's forwards (:class:`evogan.precision.Precision`).
    """

    build: Callable[[type[Any], Any], Any]
    device: torch.device
    seed: int = 0
    run_dir: Path | None = None
    recipe_path: Path | None = None
    source: ComponentRegistries | None = field(default=None, repr=False)
    precision: str = "fp32"

    @property
    def registries(self) -> ComponentRegistries:
        """Deprecated (0.3.0): every registry of the run; build nested components with :attr:`build`."""
        deprecated.warn("evogan.api.ProblemContext.registries")
        if self.source is None:
            raise RuntimeError("this context was made without registries")
        return self.source


class StackedFitness(abc.ABC):
    """A problem's all-vs-all fitness of given generators and discriminators as one batched computation
    (vectorised cells: :mod:`evogan.engine.vectorized`). Made per evaluation by
    :meth:`Problem.stacked_fitness`; :meth:`fitness` returns what :meth:`Problem.fitness` returns for the
    same networks and arguments within float tolerance, drawing the same random numbers in the same order."""

    @abc.abstractmethod
    def fitness(
        self,
        real: torch.Tensor,
        *,
        generator: torch.Generator,
        score: Sequence[Role] = ROLES,
        memo: dict[nn.Module, Any] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(g_loss[len(G), len(D)], d_loss[len(D), len(G)])``, as :meth:`Problem.fitness`."""


@dataclass(frozen=True)
class FitnessGame:
    """A :meth:`Problem.fitness` call a cell will make: ``first`` against ``second`` on ``data``, both scored."""

    first: Sequence[nn.Module]
    second: Sequence[nn.Module]
    data: Any


@dataclass
class Sampler:
    """A problem's ensemble as one module that needs only torch: ``module(*inputs)`` returns samples.

    :param module: on the CPU, in eval mode; every input is batch-first (row ``i`` of each input makes
        sample ``i``), so the exported file takes any number of samples.
    :param inputs: per input, JSON-ready: its ``name``, per-sample ``shape`` and how to ``draw`` it
        (written into the exported file, for users without evogan).
    """

    module: nn.Module
    inputs: list[dict[str, Any]]


@dataclass
class Variation:
    """One cell's variation phase of one generation: whom the problem varies, from whom, with what.

    :param members: per role, the individuals to vary in place (offspring under selection, else the population).
    :param pool: per role, the cell's neighbourhood (its own and the neighbours' copies): mates, never changed.
    :param opponents: per role, whom its members may face (a pairing draws from these).
    :param incumbents: per role, the cell's own population when ``members`` are its offspring, else empty.
    :param rnd: the cell's random streams for this generation; draw every random number from them.
    :param exchange_every: batches between exchanges inside a generation (``exchange.every_batches``; 0: none);
        a problem that honours them yields at each step :meth:`exchange_due` names.
    :param seconds: deprecated (0.3.0), never read: the driver measures the phase and passes the time
        to the cell's generation (:func:`evogan.engine.cell.finish`).
    :param problem: the problem varying the job; it owns the pairing, mutation and sparsity (0.2's fields
        of those names read them from it, with a deprecation warning).
    """

    cell_index: int
    generation: int
    members: Mapping[Role, list[Individual]]
    pool: Mapping[Role, Sequence[Individual]]
    opponents: Mapping[Role, Opponents]
    incumbents: Mapping[Role, Sequence[Individual]]
    rnd: CellRandom
    exchange_every: int = 0
    seconds: float = 0.0
    #: the problem varying this job: only for the deprecated ``pairing``, ``mutation`` and ``sparsity``
    problem: Any = field(default=None, repr=False, compare=False)

    pairing = deprecated.moved_attribute("evogan.api.Variation.pairing", "problem")
    mutation = deprecated.moved_attribute("evogan.api.Variation.mutation", "problem")
    sparsity = deprecated.moved_attribute("evogan.api.Variation.sparsity", "problem")

    def exchange_due(self, step: int) -> bool:
        """Whether the run exchanges models before batch ``step`` (counted from 0; never before the first)."""
        return bool(self.exchange_every and step and step % self.exchange_every == 0)


class Problem(Component[OptionsT]):
    """A two-population coevolution problem: its roles, individuals, variation, games and scores.

    ``roles`` names the two populations; the first is the one scored (its ensemble is the run's result).
    ``role_keys`` name them in records (``g_loss``, ``neighbourhood_g``...). Individuals are modules: a
    network, or a genome held in buffers of fixed shape per role (the engine checkpoints, copies and sends
    their ``state_dict``). All randomness comes from the streams the engine passes in. Fitness values are
    losses: lower is better. GANs implement the richer :class:`evogan.adversarial.AdversarialProblem`.
    """

    kind: ClassVar[str] = "problem"
    hook: ClassVar[str] = "evogan_register_problems"
    roles: ClassVar[tuple[Role, Role]]
    role_keys: ClassVar[tuple[str, str] | None] = None

    def __init__(self, options: OptionsT, context: ProblemContext) -> None:
        super().__init__(options)
        self.context = context

    @classmethod
    def keys(cls) -> tuple[str, str]:
        """The roles' names in records: ``role_keys``, or the roles themselves."""
        return cls.role_keys or cls.roles

    def setup(self) -> None:
        """Load data and check that the chosen pieces fit; raise ``UserError`` on bad input."""

    def prepare_scoring(self) -> None:
        """Get ready to score (a metric's statistics of the real data): called after :meth:`setup` before
        a run trains or ``evogan evaluate`` scores, not when a run is loaded only to sample or export.
        Nothing by default."""

    def hyper(self, role: Role) -> dict[str, float]:
        """A new individual's hyper-parameters (a gradient-trained one's ``lr``); none by default."""
        return {}

    @abc.abstractmethod
    def create(self, role: Role, *, generator: torch.Generator) -> nn.Module:
        """A new individual of ``role`` (its network, or its genome in buffers)."""
        raise NotImplementedError

    def make_optimizer(self, role: Role, network: nn.Module, learning_rate: float) -> torch.optim.Optimizer | None:
        """The optimizer of a gradient-trained individual; None (the default) for one varied without."""
        return None

    def extra_layout(self, role: Role) -> dict[str, tuple[torch.dtype, tuple[int, ...]]]:
        """What the problem may keep in an individual's ``extra`` (:class:`~evogan.individual.Individual`):
        name -> dtype and shape. The engine checkpoints, copies and sends those tensors with the weights
        and drops a neighbour's message whose ``extra`` is not this layout (all of it, or nothing). None
        by default. The names in :data:`evogan.individual.SLOTS` (``sparse``, ``average``) are taken."""
        return {}

    def evaluation_network(self, individual: Individual) -> nn.Module:
        """The network evaluation and sample pictures use for ``individual`` where the sparsity controller
        has no other (its weight average, from its ``extra``); never trained. The default is its network."""
        return individual.network

    def individual_metrics(self, individual: Individual) -> dict[str, float]:
        """Numbers about one individual (from its ``extra``) for the records: each generation's record
        holds them for every role's best under ``individual_metrics``, each name prefixed with the role's
        key (a GAN discriminator's ``aug_p`` as ``d_aug_p``). None by default."""
        return {}

    def finite(self, individual: Individual) -> bool:
        """Whether every number of ``individual`` is finite: its network's floating parameters and
        buffers, its moving average, its optimizer state and its ``extra``. A cell whose individual is
        not after its variation restores it (:mod:`evogan.engine.divergence`); a problem whose genomes
        may hold infinities on purpose overrides this."""
        return all_finite(individual_tensors(individual))

    def fitness_batch(self, *, generator: torch.Generator, cell: int = 0) -> Any:
        """What one generation's fitness games of ``cell`` share (a GAN's real samples); None by default."""
        return None

    @abc.abstractmethod
    def fitness(
        self,
        first: Sequence[nn.Module],
        second: Sequence[nn.Module],
        data: Any,
        *,
        generator: torch.Generator,
        score: Sequence[Role] = ROLES,
        memo: dict[nn.Module, Any] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """All-vs-all losses of the two roles: ``(first_loss[len(first), len(second)],
        second_loss[len(second), len(first)])``, ``data`` from :meth:`fitness_batch`.

        Only the roles in ``score`` need values (the other matrix may hold anything). ``memo`` lets one
        generation's games on the same ``data`` share work: the problem may store outputs that depend on
        one network and ``data`` only, keyed by that network; the engine removes every network that
        changes, so what is found is exactly what would be computed again."""
        raise NotImplementedError

    def stacked_fitness(self, first: Sequence[nn.Module], second: Sequence[nn.Module]) -> StackedFitness | str:
        """All-vs-all fitness of these networks as one batched computation, or a one-line reason why it
        cannot be (then :meth:`fitness` scores them). Deciding draws no random numbers."""
        return f"problem {self.name} scores fitness pair by pair"

    def prefetch_fitness(self, games: Sequence[FitnessGame]) -> None:
        """The first :meth:`fitness` call of each of a process's cells this generation, in the order the
        cells will make them: a problem may play them now as one batched computation and answer those
        calls from the results, each returning, counting and drawing exactly what it would have. Overriding
        it makes the driver gather every local cell's neighbours first (two cells or more). Nothing by default."""

    @abc.abstractmethod
    def vary(self, job: Variation) -> Iterator[int] | None:
        """Vary ``job.members`` in place for one generation: gradient training for a GAN, recombination
        and mutation for a genetic problem. To exchange inside the generation, be a generator that yields
        ``step`` wherever ``job.exchange_due(step)``: the engine swaps in the neighbours' models, then
        resumes it."""
        raise NotImplementedError

    def together_obstacle(self, populations: Sequence[Mapping[Role, Sequence[Individual]]], *, hooks: bool) -> str:
        """Why these cells' variation cannot run as one batched computation ('' when it can); ``hooks``:
        a sparsity controller acts after every step. Deciding changes nothing."""
        return f"problem {self.name} varies one cell at a time"

    def vary_together(self, jobs: Sequence[Variation]) -> None:
        """Vary several cells' jobs as one batched computation, each as :meth:`vary` would (within float
        tolerance). Called only when :meth:`together_obstacle` found none, and never with exchanges inside
        the generation."""
        raise NotImplementedError(self.together_obstacle([job.members for job in jobs], hooks=False))

    @abc.abstractmethod
    def evaluate(
        self, networks: Sequence[nn.Module], weights: Sequence[float], *, generator: torch.Generator
    ) -> dict[str, float]:
        """The problem's metrics for a weighted ensemble of the first role (one network: weights ``[1.0]``)."""
        raise NotImplementedError

    def evaluate_on(
        self,
        generators: Sequence[nn.Module],
        weights: Sequence[float],
        *,
        stream: ScoreStream,
        generator: torch.Generator,
    ) -> dict[str, float]:
        """:meth:`evaluate` for one of the run's score streams: ``validation`` (every score that chooses)
        or ``test`` (what is reported); ``generator`` holds that stream's noise. A problem that also scores
        against real data may keep separate real samples (and sample counts) per stream; the default
        scores both alike through :meth:`evaluate`."""
        return self.evaluate(generators, weights, generator=generator)

    def evaluate_lazily(
        self,
        generators: Sequence[nn.Module],
        weights: Sequence[float],
        *,
        stream: ScoreStream,
        generator: torch.Generator,
    ) -> LazyMetrics:
        """:meth:`evaluate_on`, its metrics computed as they are read: what :meth:`objective` reads at once,
        the rest from the same samples when first asked for (:class:`evogan.scores.LazyMetrics`), with
        the values :meth:`evaluate_on` gives. The mixture ES scores two candidates and records only the
        kept one's metrics. The default computes everything through :meth:`evaluate_on`."""
        return LazyMetrics(self.evaluate_on(generators, weights, stream=stream, generator=generator))

    @abc.abstractmethod
    def objective(self, metrics: Mapping[str, float]) -> float:
        """The number the mixture ES minimises, taken from :meth:`evaluate`'s result."""
        raise NotImplementedError

    def ensemble_scorer(
        self, generators: Sequence[nn.Module], seeds: Sequence[int], *, samples: int = 0
    ) -> Callable[[Sequence[float]], dict[str, float]]:
        """A function scoring weight vectors of one ensemble on common random numbers: every call sees
        the same noise, so candidates differ only in their weights (the mixture optimisation after
        training, which chooses with it: it scores as the ``validation`` stream does, its seeds drawn from
        that stream). ``seeds`` has one seed per member; ``samples`` is the sample size (0: the
        problem's choice). The default calls :meth:`evaluate` with a generator seeded from ``seeds[0]``
        and the problem's own sample size; a problem may draw each member's samples once (faster, and
        the same member then gives the same samples in every ensemble)."""
        import torch

        def score(weights: Sequence[float]) -> dict[str, float]:
            return self.evaluate(generators, weights, generator=torch.Generator().manual_seed(seeds[0]))

        return score

    # The three below serve ``evogan.load(...).sample()`` and ``evogan export``; a problem that leaves
    # them out can still train, evaluate and draw pictures.
    def mixture_samples(
        self, generators: Sequence[nn.Module], weights: Sequence[float], n: int, *, generator: torch.Generator
    ) -> torch.Tensor:
        """``n`` samples from the weighted ensemble, every random number drawn from ``generator``."""
        raise UserError(f"problem {self.name}: cannot draw samples (it has no mixture_samples)")

    def sampler(self, generators: Sequence[nn.Module], weights: Sequence[float]) -> Sampler:
        """A module that draws from the ensemble without evogan (:class:`Sampler`), for ``evogan export``."""
        raise UserError(f"problem {self.name}: cannot be exported (it has no sampler)")

    def sampler_inputs(
        self, weights: Sequence[float], n: int, *, generator: torch.Generator
    ) -> tuple[torch.Tensor, ...]:
        """Inputs for :meth:`sampler`'s module that give what :meth:`mixture_samples` gives for the same
        ``weights``, ``n`` and generator state (up to float rounding)."""
        raise UserError(f"problem {self.name}: cannot be exported (it has no sampler_inputs)")

    def save_pictures(
        self,
        generators: Sequence[nn.Module],
        weights: Sequence[float],
        path: Path,
        *,
        generator: torch.Generator,
        title: str = "",
        count: int | None = None,
    ) -> None:
        """Write a PNG of ``count`` samples (default: the problem's choice) from the ensemble to ``path``."""

    def describe(self) -> dict[str, Any]:
        """Facts about the problem as set up (data, sizes, networks), JSON-ready: ``summary.json`` holds
        them under ``problem`` and ``evogan evaluate`` prints them. Nothing by default."""
        return {}


# --------------------------------------------------------------------------------------------- transport
@dataclass
class TransportStats:
    """What a transport counted; ``dropped`` maps a reason (``manifest``, ``header_fields``, ...) to the
    messages dropped for it."""

    sent_messages: int = 0
    sent_bytes: int = 0
    received_messages: int = 0
    received_bytes: int = 0
    dropped: dict[str, int] = field(default_factory=dict)


class Transport(Component[OptionsT]):
    """Carries encoded envelopes between cells. Knows bytes, topics and peers, never what a model is."""

    kind: ClassVar[str] = "transport"
    hook: ClassVar[str] = "evogan_register_transports"

    @abc.abstractmethod
    def publish(self, cell: int, frames: Sequence[bytes | memoryview]) -> None:
        raise NotImplementedError

    @abc.abstractmethod
    def gather(
        self,
        cell: int,
        peers: Sequence[int],
        generation: int,
        *,
        max_staleness: int,
        timeout: float,
        substep: int = 0,
    ) -> dict[int, list[bytes | memoryview]]:
        """Frames of each peer's message for ``(generation, substep)`` (or the newest no older than
        ``(generation - max_staleness, substep)``, waiting at most ``timeout`` seconds; then whatever is
        newest). Messages are ordered by their header's ``(generation, substep)``; the engine passes
        ``substep`` only for exchanges inside a generation (``exchange.every_batches``)."""
        raise NotImplementedError

    def stats(self) -> TransportStats:
        """Messages and bytes sent and received, and messages dropped by reason, since this transport
        started (a worker writes them into its timings records); the default counts nothing."""
        return TransportStats()

    def close(self) -> None:
        pass


class ConnectableTransport(Transport[OptionsT]):
    """A transport between processes: what ``run.workers > 1`` (and every torchrun node) needs.

    A worker drives it through one round: :meth:`bind` its local cells, exchange the returned endpoints
    over the control plane, :meth:`connect` to every cell's endpoint, :meth:`wait_ready` (the startup
    barrier), then ``publish``/``gather`` each generation and ``close``. A single-process run uses a
    plain :class:`Transport` instead: nothing there would connect this one.
    """

    @abc.abstractmethod
    def bind(self, local_cells: Sequence[int]) -> dict[int, str]:
        """Open the publishing endpoints of the local cells (one may serve them all); return cell -> the
        address peers connect to (at most 512 UTF-8 bytes each)."""

    @abc.abstractmethod
    def connect(
        self,
        endpoints: Mapping[int, str],
        peers: Mapping[int, Sequence[int]],
        subscribers: Mapping[int, Sequence[int]] | None = None,
    ) -> None:
        """Receive from each local cell's ``peers`` at their ``endpoints``; ``subscribers`` (local cell
        -> the cells that receive from it) is what :meth:`wait_ready` waits for."""

    @abc.abstractmethod
    def wait_ready(self, timeout: float | None = None) -> None:
        """Block until every subscription is in place and every peer was heard from; raise
        ``RunFailure`` naming who is missing."""

    def liveness(self) -> dict[int, float]:
        """Seconds since each peer was last heard from (``inf``: never); empty when the transport
        cannot tell. Recorded in ``timings.jsonl`` and shown as the live view's peer age."""
        return {}


# ------------------------------------------------------------------------------------------ the kinds
# The generic component kinds. With the adversarial problem's kinds (evogan.adversarial.contracts.KINDS)
# they make evogan.kinds.KINDS, the one list the registry, the registration hookspecs and the reference
# docs follow. A new kind is a base class (with `kind` and `hook`) listed in one of the two.
KINDS: tuple[type[Component[Any]], ...] = (Topology, Selection, Problem, Transport)

if TYPE_CHECKING:
    Options = ComponentOptions  # deprecated: type checkers see the alias, the warning is for run time
else:
    # Renamed and moved names (evogan.deprecated.DEPRECATIONS: Options -> ComponentOptions, Pairing ->
    # evogan.adversarial.contracts.Pairing, ...) warn, then work.
    __getattr__ = deprecated.module_getattr(__name__, globals())


__all__ = [
    "KINDS",
    "ROLES",
    "Component",
    "ComponentOptions",
    "ComponentRegistries",
    "ComponentRegistry",
    "ConnectableTransport",
    "FitnessGame",
    "LazyMetrics",
    "Opponents",
    "OptionsT",
    "Problem",
    "ProblemContext",
    "Role",
    "Sampler",
    "ScoreStream",
    "Selection",
    "StackedFitness",
    "Topology",
    "Transport",
    "TransportStats",
    "Variation",
]
