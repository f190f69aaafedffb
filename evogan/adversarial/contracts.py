"""The adversarial problem's contracts: what its nested components (pairing, hyper-parameter mutation,
sparsity controller, data, networks, loss, augment, metric) and its batched training backend implement.
They moved here from :mod:`evogan.api` (0.3.0), which keeps only the generic contracts; the old paths
warn once (:data:`evogan.deprecated.DEPRECATIONS`).
"""

from __future__ import annotations

import abc
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from pydantic import Field

from evogan import deprecated
from evogan.api import Component, ComponentOptions, Opponents, OptionsT, Problem
from evogan.errors import MessageRejected
from evogan.individual import Individual, Role
from evogan.scores import LazyMetrics

if TYPE_CHECKING:
    import torch
    from torch import nn


# --------------------------------------------------------------------------------------------- mutation
class Mutation(Component[OptionsT]):
    """Mutates an individual's hyper-parameters; returns a new mapping, never edits its input.

    Called for every attacker before each of its training steps (Lipizzaner mutates per step).
    """

    kind: ClassVar[str] = "mutation"
    hook: ClassVar[str] = "evogan_register_mutations"

    @abc.abstractmethod
    def mutate(self, hyper: Mapping[str, float], *, rng: np.random.Generator) -> dict[str, float]:
        raise NotImplementedError


# --------------------------------------------------------------------------------------------- pairing
Faced = list[tuple["Individual", float]]


class Pairing(Component[OptionsT]):
    """Who each training step of a cell trains against.

    Asked once per generator step and once per discriminator step; every individual of the cell trained
    in that step faces the same opponents. A generator step may face several discriminators: its loss
    is the weighted sum over them (weights summing to one). The first entry is the step's principal
    opponent, the one a sparsity controller hears about; keep it a member of ``own`` where the pairing
    has one. Draw every random number from ``rng``.
    """

    kind: ClassVar[str] = "pairing"
    hook: ClassVar[str] = "evogan_register_pairings"

    @abc.abstractmethod
    def generator_opponents(self, discriminators: Opponents, *, rng: np.random.Generator) -> Faced:
        raise NotImplementedError

    @abc.abstractmethod
    def discriminator_opponent(self, generators: Opponents, *, rng: np.random.Generator) -> Individual:
        raise NotImplementedError


# --------------------------------------------------------------------------------------------- sparsity
@dataclass
class GeneratorStep:
    """What one generator step leaves for a sparsity controller (the balance ratio needs all of it).

    :param z: the noise the step used.
    :param real: the real batch of the step.
    :param fake_logits_pre: D(G_pre(z)) from the step's own forward pass, detached.
    :param step: the index of the step's batch within its generation (the engine sets it; the
        controllers keep their own step counts).
    """

    z: torch.Tensor
    real: torch.Tensor
    fake_logits_pre: torch.Tensor
    step: int


class SparsityController(Component[OptionsT]):
    """Keeps masks and density schedules of generators and discriminators.

    One instance per cell. State lives in ``individual.extra[SPARSE]`` (:data:`evogan.individual.SPARSE`, a
    dict of tensors and numbers), so it travels with checkpoints, selection copies and the exchange
    envelope. By contract its ``"masks"`` maps parameter names to boolean masks: the exchange sends those
    tensors as their active values plus a bitmap (:mod:`evogan.transport.masked`), and the rest as
    :meth:`wire_state`, which a receiving cell's controller checks with :meth:`check_wire_state`. The
    methods sit on the training hot path and are plain method calls, not broadcast hooks.
    """

    kind: ClassVar[str] = "sparsity"
    hook: ClassVar[str] = "evogan_register_sparsity_controllers"

    stackable: ClassVar[bool] = False
    """True when the hooks change an individual's tensors only in place (parameters, their ``.grad``,
    optimizer state, buffers: never a tensor swapped for another), so that they can act on the rows of
    cells trained as one batched computation (``run.vectorize``), where those tensors are views of the
    stack."""

    def prepare(self, individual: Individual, *, stream: torch.Generator) -> None:
        """A new individual was created: build its masks and state in ``individual.extra[SPARSE]``, drawing
        from the random ``stream``."""

    def begin_generation(
        self,
        generators: Sequence[Individual],
        discriminators: Sequence[Individual],
        incumbents: Sequence[Individual] = (),
    ) -> None:
        """Called once per generation before training, with the individuals the cell trains. With
        selection on they are offspring and ``incumbents`` holds the cell's own discriminators (state that
        belongs to the local lineage must survive whichever of the two replacement keeps); opponents not
        listed here are neighbours' copies, replaced by the next message."""

    def after_discriminator_step(self, discriminator: Individual) -> None:
        """Called after every discriminator optimizer step."""

    def after_generator_step(
        self, generator: Individual, discriminator: Individual, step: GeneratorStep, problem: Problem
    ) -> None:
        """Called after every generator optimizer step, with the step's noise and pre-update logits."""

    def end_generation(self, generators: Sequence[Individual], discriminators: Sequence[Individual]) -> None:
        """Called once per generation after training, before replacement."""

    def metrics(self, generator: Individual, discriminator: Individual) -> dict[str, float]:
        """Numbers for ``metrics.jsonl`` and the live view (balance ratio, densities, FLOPs)."""
        return {}

    def evaluation_network(self, individual: Individual) -> nn.Module:
        """The network evaluation and sample pictures use for ``individual`` (e.g. a weight average);
        never trained. The default is the individual's own network."""
        return individual.network

    def check(self, individual: Individual) -> None:
        """A checkpointed individual was loaded: raise ``UserError`` if its sparse state does not fit."""

    def wire_state(self, state: Mapping[str, Any]) -> dict[str, Any]:
        """The part of an individual's state (``extra[SPARSE]``, not empty) its envelope's meta carries:
        a JSON object. The masks travel as the weights' bitmaps and come back beside it. The default
        sends nothing."""
        return {}

    def check_wire_state(self, state: Any, role: Role, local: Mapping[str, Any] | None) -> dict[str, Any]:
        """A neighbour's :meth:`wire_state` of ``role``, checked before this controller reads it: raise
        :class:`~evogan.errors.MessageRejected` naming the field (the cell drops the message). ``local`` is
        this cell's own wire state of the role, where known. The default takes any JSON object."""
        if not isinstance(state, dict):
            raise MessageRejected(f"meta.sparse: the {role}'s state is not an object")
        return state

    def conflict(self, problem: Problem[Any]) -> str:
        """Why this controller cannot run with ``problem`` as configured (one line naming the keys; '' when
        it can). Asked once, when the run's components are built."""
        return ""


class TrainingBackend(abc.ABC):
    """How a generation's training steps its individuals (rows): one by one or as one batched computation.

    :class:`~evogan.adversarial.RowByRow` steps each through the problem's own ``generator_step`` and
    ``discriminator_step``; a stacked backend, made per generation by
    :meth:`~evogan.adversarial.AdversarialProblem.stacked_training` (``run.vectorize``), steps the cells of one
    process as one batched computation (:mod:`evogan.engine.vectorized`) and holds the stacked weights and
    optimizer state until :meth:`close` writes them back. Row ``i`` trains as the problem's own steps would,
    with its own ``hyper["lr"]`` and noise from the random stream ``streams[i]`` in order, within float tolerance.
    A stacked backend made with ``hooks`` must keep each individual's parameters, their latest ``.grad``, moments
    and buffers as views of the stack while open, so that a sparsity controller's in-place changes act on the stack.
    """

    @abc.abstractmethod
    def generator_step(
        self, faced: Sequence[Faced], real: Sequence[torch.Tensor], streams: Sequence[torch.Generator]
    ) -> list[GeneratorStep]:
        """One step of every generator, ``i`` against the discriminators ``faced[i]`` (weighted as
        ``generator_step`` weighs several) on the batch ``real[i]``, drawing from ``streams[i]``; per row,
        what the step leaves for a sparsity controller (as
        :meth:`~evogan.adversarial.AdversarialProblem.generator_step` returns it)."""

    @abc.abstractmethod
    def discriminator_step(
        self, defenders: Sequence[Individual], real: Sequence[torch.Tensor], streams: Sequence[torch.Generator]
    ) -> None:
        """One step of every discriminator, ``i`` against the generator ``defenders[i]``."""

    @abc.abstractmethod
    def close(self) -> None:
        """Write the weights and optimizer state back into the individuals (nothing, where they never left)."""


# ------------------------------------------------------------------------------ GAN problem parts
class DataSource(abc.ABC):
    """Real samples in the network's value range (images in [-1, 1]), served as batches.

    ``labels`` is set when the data has classes (MNIST-like), for class-based metrics.
    """

    sample_shape: tuple[int, ...]
    labels: torch.Tensor | None = None
    num_classes: int | None = None

    @abc.abstractmethod
    def __len__(self) -> int:
        raise NotImplementedError

    @abc.abstractmethod
    def batches(self, batch_size: int, count: int, *, generator: torch.Generator) -> Iterator[torch.Tensor]:
        """``count`` batches (0 = one full pass) of ``batch_size`` samples, order drawn from ``generator``."""
        raise NotImplementedError

    @abc.abstractmethod
    def sample(self, n: int, *, generator: torch.Generator) -> torch.Tensor:
        """``n`` samples drawn without replacement (with replacement only if ``n`` exceeds the data)."""
        raise NotImplementedError

    def subset(self, indices: torch.Tensor) -> DataSource:
        """A source serving only the samples at ``indices`` (data dieting); sources that cannot are
        refused when a recipe asks for a ``sampling_ratio`` below 1."""
        raise NotImplementedError(f"{type(self).__name__} cannot serve a subset of its samples")


class DatasetOptions(ComponentOptions):
    """Options every built-in dataset shares; a dataset whose options derive from these supports data
    dieting (the GAN problem tests ``isinstance``)."""

    sampling_ratio: float = Field(
        1.0,
        gt=0,
        le=1,
        description="data dieting: each cell trains on its own random share of the samples, drawn from "
        "the run seed and the cell index (Lipizzaner's dataloader.sampling_ratio)",
    )


class Dataset(Component[OptionsT]):
    """A source of real training samples (a 2-D mixture, MNIST, CelebA, an image folder...)."""

    kind: ClassVar[str] = "dataset"
    hook: ClassVar[str] = "evogan_register_datasets"

    @abc.abstractmethod
    def load(self, device: torch.device) -> DataSource:
        raise NotImplementedError


class Networks(Component[OptionsT]):
    """A generator/discriminator architecture pair. Discriminators return raw logits of shape (N,)."""

    kind: ClassVar[str] = "network"
    hook: ClassVar[str] = "evogan_register_networks"

    @abc.abstractmethod
    def latent_shape(self) -> tuple[int, ...]:
        raise NotImplementedError

    def check(self, sample_shape: tuple[int, ...]) -> None:
        """Raise ``UserError`` when the data's sample shape does not fit this architecture."""

    @abc.abstractmethod
    def build(self, role: Role, sample_shape: tuple[int, ...], *, generator: torch.Generator) -> nn.Module:
        raise NotImplementedError


class Loss(Component[OptionsT]):
    """Adversarial losses on discriminator logits; lower is better for the network being trained."""

    kind: ClassVar[str] = "loss"
    hook: ClassVar[str] = "evogan_register_losses"

    stackable: ClassVar[bool] = False
    """True when both losses are plain tensor functions of the logits (no random draws, no Python
    branching on values), so that many individuals can train in one batched step (``run.vectorize``)."""

    @abc.abstractmethod
    def generator_loss(
        self, fake_logits: torch.Tensor, *, stream: torch.Generator | None = None
    ) -> torch.Tensor:
        """``stream`` is the cell's random stream during training (None during fitness evaluation),
        for losses that draw at random (Mustangs)."""
        raise NotImplementedError

    @abc.abstractmethod
    def discriminator_loss(self, real_logits: torch.Tensor, fake_logits: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class Augment(Component[OptionsT]):
    """Differentiable augmentation of every discriminator input in training, real and fake alike (a GAN
    problem's ``[problem.augment]``); drawn from the stream it is given, so runs stay reproducible.

    How many numbers a call draws must depend on the batch's shape only (the stacked steps draw a shared
    stream's numbers in the looped order by it). An ``adaptive`` augmentation is steered by a state each
    discriminator carries (ADA's probability): :meth:`start` makes it, :meth:`observe` updates it after
    each of the discriminator's steps, and every call for that discriminator's inputs receives it."""

    kind: ClassVar[str] = "augment"
    hook: ClassVar[str] = "evogan_register_augments"
    identity: ClassVar[bool] = False  # True: changes nothing and draws nothing (the default)
    adaptive: ClassVar[bool] = False  # True: steered by each discriminator's own state

    @abc.abstractmethod
    def __call__(
        self, images: torch.Tensor, *, stream: torch.Generator, state: Mapping[str, torch.Tensor] | None = None
    ) -> torch.Tensor:
        """The batch ``images`` (N, C, H, W), each sample transformed on its own, drawing from ``stream``;
        ``state``: the discriminator's (adaptive augmentations; None: one that has not trained yet, or not
        adaptive)."""
        raise NotImplementedError

    def start(self) -> dict[str, torch.Tensor]:
        """A new discriminator's state: names unique to the augmentation -> CPU tensors (adaptive only)."""
        return {}

    def observe(self, state: dict[str, torch.Tensor], real_logits: torch.Tensor) -> None:
        """Update ``state`` in place after one step of its discriminator, which gave ``real_logits`` on
        its augmented real batch (adaptive only)."""

    def metrics(self, state: Mapping[str, torch.Tensor] | None) -> dict[str, float]:
        """What the records show of a discriminator's state (None: not started); none by default."""
        return {}


class Metric(Component[OptionsT]):
    """Scores generated samples against the real data. ``lower_is_better`` names the direction of
    ``primary``, the key the mixture ES optimises when this metric drives it."""

    kind: ClassVar[str] = "metric"
    hook: ClassVar[str] = "evogan_register_metrics"
    primary: ClassVar[str] = ""
    lower_is_better: ClassVar[bool] = True

    def prepare(self, data: DataSource, device: torch.device, *, generator: torch.Generator) -> None:
        """Compute and cache whatever the metric needs from the real data (once per run)."""

    @abc.abstractmethod
    def score(self, samples: torch.Tensor) -> dict[str, float]:
        raise NotImplementedError

    def score_lazily(self, samples: torch.Tensor) -> LazyMetrics:
        """:meth:`score`, its metrics computed as they are read: ``primary`` at once, the rest from the
        same samples (a metric may keep their features) when first asked for, with the values
        :meth:`score` gives (:meth:`evogan.api.Problem.evaluate_lazily`). The default scores everything."""
        return LazyMetrics(self.score(samples))

# the adversarial problem's component kinds, in the order `evogan components` prints them after the generic
# ones (evogan.registry.kinds)
KINDS: tuple[type[Component[Any]], ...] = (
    Mutation,
    SparsityController,
    Dataset,
    Networks,
    Loss,
    Augment,
    Metric,
    Pairing,
)

if TYPE_CHECKING:
    StackedTraining = TrainingBackend  # deprecated: type checkers see the alias, the warning is for run time
else:
    # StackedTraining -> TrainingBackend (evogan.deprecated.DEPRECATIONS) warns, then works.
    __getattr__ = deprecated.module_getattr(__name__, globals())

__all__ = [
    "KINDS",
    "Augment",
    "DataSource",
    "Dataset",
    "DatasetOptions",
    "Faced",
    "GeneratorStep",
    "Loss",
    "Metric",
    "Mutation",
    "Networks",
    "Pairing",
    "SparsityController",
    "TrainingBackend",
]
