"""The adversarial problem: a generator and a discriminator population trained by gradient against each
other (Lipizzaner's generation). GAN problems implement :class:`AdversarialProblem`; the engine sees only
the generic :class:`evogan.api.Problem`, whose ``vary`` this class implements as training.

A generation's training is one loop (:func:`_train`) on one of the two implementations of
:class:`~evogan.adversarial.contracts.TrainingBackend`: :class:`RowByRow` steps each individual through the
problem's own steps; a stacked one (``run.vectorize``, from :meth:`AdversarialProblem.stacked_training`) steps the
cells of one process as rows of one batched computation. Both draw each cell's pairing and mutations from its own
streams in the same order, so they agree within float tolerance.
"""

from __future__ import annotations

import abc
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from evogan.adversarial.contracts import Faced, GeneratorStep, Mutation, Pairing, SparsityController, TrainingBackend
from evogan.api import ROLES, ComponentOptions, OptionsT, Problem, ProblemContext, Role, Variation
from evogan.errors import UserError
from evogan.individual import AVERAGE, Individual, layout_extra

if TYPE_CHECKING:
    import numpy as np
    import torch
    from torch import nn


class AdversarialProblem(Problem[OptionsT]):
    """Generators and discriminators (:data:`evogan.api.ROLES`) trained by gradient steps.

    The problem owns the parts of its training loop, built through its context from its options:
    ``pairing`` (who each step trains against), ``mutation`` (of each attacker's hyper-parameters before
    each step) and ``sparsity`` (a controller, or None). Options that name them as nested components
    (``[problem.pairing]``, ``[problem.mutation]``, ``[problem.sparsity]``, as the GAN problem's do) choose
    them; options without such a field get the pairing kind's default, no mutation and no sparsity.
    """

    roles: ClassVar[tuple[Role, Role]] = ROLES
    role_keys: ClassVar[tuple[str, str] | None] = ("g", "d")
    pairing: Pairing[Any]
    mutation: Mutation[Any]
    sparsity: SparsityController[Any] | None

    def __init__(self, options: OptionsT, context: ProblemContext) -> None:
        super().__init__(options, context)
        self.pairing = self._part(Pairing, "pairing") or self._default_pairing()
        self.mutation = self._part(Mutation, "mutation") or _Unchanged(ComponentOptions())
        self.sparsity = self._part(SparsityController, "sparsity")

    def setup(self) -> None:
        """Check that the sparsity controller fits the problem as configured (a subclass calls this first)."""
        conflict = self.sparsity.conflict(self) if self.sparsity is not None else ""
        if conflict:
            where = self.context.recipe_path
            raise UserError(f"{where}: {conflict}" if where else conflict)

    def _part(self, kind: type[Any], field: str) -> Any:
        """The nested component ``options.<field>`` names (None where the options have no such field, or
        leave it out)."""
        ref = getattr(self.options, field, None) if field in type(self.options).model_fields else None
        return None if ref is None else self.context.build(kind, ref)

    def _default_pairing(self) -> Pairing[Any]:
        """The pairing kind's default (``default = True``) with its default options, for options that name
        none."""
        default = self.context.source[Pairing.kind].default() if self.context.source is not None else None
        if default is None:
            raise UserError(f"problem {self.name}: its options name no pairing, and no default pairing is registered")
        pairing = default(default.Options())
        if not isinstance(pairing, Pairing):
            raise TypeError(f"{default.__qualname__} is registered as a pairing but does not subclass Pairing")
        return pairing

    @property
    @abc.abstractmethod
    def learning_rate(self) -> float:
        raise NotImplementedError

    @property
    def generator_decay(self) -> float:
        """Decay of the generators' moving average (:mod:`evogan.average`), updated after each G step; 0: none.
        The average lives in the generator's ``extra[AVERAGE]`` (:data:`evogan.individual.AVERAGE`)."""
        return 0.0

    def evaluation_network(self, individual: Individual) -> nn.Module:
        """The generator's moving average where it keeps one (``problem.g_ema``), else its network."""
        kept = individual.extra.get(AVERAGE)
        if kept is None:
            return individual.network
        from evogan import average  # imports torch: not at start-up

        return average.averaged_copy(individual.network, kept)

    @property
    def generator_candidates(self) -> int:
        """How many candidate generators one generator step trains before keeping one (E-GAN's children);
        1: the plain step. A sparsity controller that acts after each step sees the survivor only."""
        return 1

    def hyper(self, role: Role) -> dict[str, float]:
        return {"lr": self.learning_rate, "lr0": self.learning_rate}

    @abc.abstractmethod
    def make_optimizer(self, role: Role, network: nn.Module, learning_rate: float) -> torch.optim.Optimizer:
        raise NotImplementedError

    @abc.abstractmethod
    def training_batches(self, *, stream: torch.Generator, cell: int = 0) -> Iterator[torch.Tensor]:
        """One generation's real batches for ``cell`` (a problem may give each cell its own share of
        the data: Lipizzaner's data dieting)."""
        raise NotImplementedError

    def train_discriminator_at(self, step: int, *, cell: int = 0, generation: int = 1) -> bool:
        """Whether the discriminators train at batch ``step`` of ``cell``'s ``generation`` (counted from
        1; Lipizzaner's D skip)."""
        return True

    def train_generator_at(self, step: int, *, cell: int = 0, generation: int = 1) -> bool:
        """Whether the generators train at batch ``step`` of ``cell``'s ``generation`` (``n_critic`` D
        steps per G step, as SNGAN; a schedule over the whole run, as WGAN's, needs the generation)."""
        return True

    @abc.abstractmethod
    def fitness_batch(self, *, generator: torch.Generator, cell: int = 0) -> torch.Tensor:
        """The real samples one generation's fitness evaluations of ``cell`` share."""
        raise NotImplementedError

    @abc.abstractmethod
    def generator_step(
        self,
        attacker: Individual,
        defender: nn.Module | Sequence[tuple[nn.Module, float]],
        real: torch.Tensor,
        *,
        stream: torch.Generator,
    ) -> GeneratorStep:
        """One optimizer step of ``attacker`` against one discriminator, or against several: then the
        loss is the weighted sum over ``(network, weight)`` pairs on the same batch and noise, and
        ``fake_logits_pre`` comes from the first pair's network. Where one of the discriminators carries
        ``extra`` state, the call also passes ``defenders=``, their individuals in the same order (a
        problem that keeps no ``extra`` never receives it)."""
        raise NotImplementedError

    @abc.abstractmethod
    def discriminator_step(
        self, attacker: Individual, defender: nn.Module, real: torch.Tensor, *, stream: torch.Generator
    ) -> None:
        raise NotImplementedError

    @abc.abstractmethod
    def discriminator_logits(
        self, discriminator: nn.Module, generator_net: nn.Module, z: torch.Tensor, real: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """No-grad ``(D(G(z)), D(real))`` logits; used by the balance ratio."""
        raise NotImplementedError

    def stacked_training(
        self, generators: Sequence[Individual], discriminators: Sequence[Individual], *, hooks: bool = False
    ) -> TrainingBackend | str:
        """These individuals' training as one batched computation, or a one-line reason why it cannot
        be (then each individual trains on its own, through the steps above). ``hooks``: a sparsity
        controller acts on each individual after every step (see :class:`TrainingBackend`)."""
        return f"problem {self.name} trains one individual at a time"

    # ------------------------------------------------------------------------------ variation = training
    def before_training(self, job: Variation) -> None:
        """Called once per generation for each cell's ``job``, before its first step (on either backend):
        for state a problem keeps per generation. Nothing by default."""

    def vary(self, job: Variation) -> Iterator[int]:
        self.before_training(job)
        _begin(self, job)
        yield from _train(self, [job], RowByRow(self, job.members["generator"], job.members["discriminator"]))

    def together_obstacle(self, populations: Sequence[Mapping[Role, Sequence[Individual]]], *, hooks: bool) -> str:
        gens = [g for members in populations for g in members["generator"]]
        discs = [d for members in populations for d in members["discriminator"]]
        probe = self.stacked_training(gens, discs, hooks=self._views(hooks))
        if isinstance(probe, str):
            return probe
        probe.close()  # it trained nothing: closing gives the individuals their own tensors back, unchanged
        return ""

    def _views(self, hooks: bool) -> bool:
        """Whether stacked training must keep each individual's tensors as views of the stack: for a
        sparsity controller's hooks, and for the moving average, which reads each generator's parameters."""
        return hooks or self.generator_decay > 0

    def vary_together(self, jobs: Sequence[Variation]) -> None:
        gens = [g for job in jobs for g in job.members["generator"]]
        discs = [d for job in jobs for d in job.members["discriminator"]]
        if getattr(self.pairing, "adapts_faced", False):
            raise UserError(
                "problem.pairing.adapt_faced trains neighbours' copies one at a time: set run.vectorize = false"
            )
        stacked = self.stacked_training(gens, discs, hooks=self._views(self.sparsity is not None))
        if isinstance(stacked, str):  # the engine asked together_obstacle first: these individuals changed
            raise RuntimeError(f"cells trained together: {stacked}")
        try:
            for job in jobs:
                self.before_training(job)
                _begin(self, job)
            for _ in _train(self, jobs, stacked):
                raise RuntimeError("cells trained together cannot exchange inside a generation")
        finally:
            stacked.close()


class RowByRow(TrainingBackend):
    """The training backend that steps each individual on its own, through the problem's own
    ``generator_step`` and ``discriminator_step`` (the reference arithmetic)."""

    def __init__(
        self, problem: AdversarialProblem[Any], generators: Sequence[Individual], discriminators: Sequence[Individual]
    ) -> None:
        self.problem, self.generators, self.discriminators = problem, generators, discriminators

    def generator_step(
        self, faced: Sequence[Faced], real: Sequence[torch.Tensor], streams: Sequence[torch.Generator]
    ) -> list[GeneratorStep]:
        infos = []
        for g, chosen, batch, stream in zip(self.generators, faced, real, streams, strict=True):
            # One opponent keeps the plain call (and its exact arithmetic); several are weighted.
            defence = chosen[0][0].network if len(chosen) == 1 else [(d.network, w) for d, w in chosen]
            # their own state (an augmentation probability), passed only where one has any
            extra = {"defenders": [d for d, _ in chosen]} if any(layout_extra(d) for d, _ in chosen) else {}
            infos.append(self.problem.generator_step(g, defence, batch, stream=stream, **extra))
        return infos

    def discriminator_step(
        self, defenders: Sequence[Individual], real: Sequence[torch.Tensor], streams: Sequence[torch.Generator]
    ) -> None:
        for d, defender, batch, stream in zip(self.discriminators, defenders, real, streams, strict=True):
            self.problem.discriminator_step(d, defender.network, batch, stream=stream)

    def close(self) -> None:
        pass


class _Unchanged(Mutation[ComponentOptions]):
    """The mutation of a problem whose options name none: hyper-parameters stay as they are."""

    name: ClassVar[str] = "unchanged"

    def mutate(self, hyper: Mapping[str, float], *, rng: np.random.Generator) -> dict[str, float]:
        return dict(hyper)


def _begin(problem: AdversarialProblem[Any], job: Variation) -> None:
    """Tell the sparsity controller who trains; with selection on, which discriminators are the cell's
    own (offspring share lineage state with them)."""
    if problem.sparsity is not None:
        incumbents = job.incumbents.get("discriminator", ())
        problem.sparsity.begin_generation(job.members["generator"], job.members["discriminator"], incumbents)


def _train(
    problem: AdversarialProblem[Any], jobs: Sequence[Variation], backend: TrainingBackend
) -> Iterator[int]:
    """Lipizzaner's generation for every cell of ``jobs``, step by step: each cell's pairing, then each
    member's mutation, from the cell's own streams; one step of every generator on ``backend``; the sparsity
    hooks row by row; the same for the discriminators. Yields ``step`` where the run exchanges models."""
    pairing, mutate, sparsity = problem.pairing, problem.mutation.mutate, problem.sparsity
    if sparsity is not None and getattr(pairing, "adapts_faced", False):
        raise UserError(
            "problem.pairing.adapt_faced does not train sparse copies (their masks): turn one of them off"
        )
    gens = [g for job in jobs for g in job.members["generator"]]
    discs = [d for job in jobs for d in job.members["discriminator"]]
    batches = [problem.training_batches(stream=job.rnd.torch, cell=job.cell_index) for job in jobs]
    step = 0
    while True:
        reals = [next(it, None) for it in batches]
        if any(real is None for real in reals):
            if not all(real is None for real in reals):
                raise RuntimeError("cells trained together must have the same number of batches")
            break
        if jobs[0].exchange_due(step):
            yield step
        if _together(jobs, problem.train_generator_at, step):
            faced, real_g, streams = _rows(
                jobs, reals, lambda job: pairing.generator_opponents(job.opponents["generator"], rng=job.rnd.numpy),
                "generator", mutate,
            )  # fmt: skip
            if getattr(pairing, "adapts_faced", False):
                _adapt_faced(problem, jobs, faced, real_g, streams)
            infos = backend.generator_step(faced, real_g, streams)
            for g, chosen, info in zip(gens, faced, infos, strict=True):
                info.step = step
                if sparsity is not None:
                    sparsity.after_generator_step(g, chosen[0][0], info, problem)
                if problem.generator_decay:
                    _average(g, problem.generator_decay)
        if _together(jobs, problem.train_discriminator_at, step):
            defenders, real_d, streams = _rows(
                jobs,
                reals,
                lambda job: pairing.discriminator_opponent(job.opponents["discriminator"], rng=job.rnd.numpy),
                "discriminator",
                mutate,
            )
            backend.discriminator_step(defenders, real_d, streams)
            if sparsity is not None:
                for d in discs:
                    sparsity.after_discriminator_step(d)
        step += 1
    if sparsity is not None:
        for job in jobs:
            sparsity.end_generation(job.members["generator"], job.members["discriminator"])


def _adapt_faced(
    problem: AdversarialProblem[Any],
    jobs: Sequence[Variation],
    faced: Sequence[Faced],
    real: Sequence[torch.Tensor],
    streams: Sequence[torch.Generator],
) -> None:
    """Before a generator step faces a neighbour's discriminator, that discriminator (the cell's copy) takes
    one step against this generator's samples: a frozen critic that never trained on them is one the
    generator learns to fool rather than to satisfy (issue 35)."""
    rows = iter(zip(faced, real, streams, strict=True))
    for job in jobs:
        own = {id(d) for d in job.members["discriminator"]}
        for g in job.members["generator"]:
            chosen, batch, stream = next(rows)
            for d, _ in chosen:
                if id(d) not in own:
                    problem.discriminator_step(d, g.network, batch, stream=stream)


def _average(generator: Individual, decay: float) -> None:
    """One step of the generator's moving average; the first starts it at the weights just trained."""
    from evogan import average

    kept = generator.extra.get(AVERAGE)
    if kept is None:
        generator.extra[AVERAGE] = average.start(generator.network)
    else:
        average.update(kept, generator.network, decay)


def _rows(
    jobs: Sequence[Variation],
    reals: Sequence[torch.Tensor | None],
    pick: Callable[[Variation], Any],
    role: Role,
    mutate: Callable[..., dict[str, float]],
) -> tuple[list[Any], list[torch.Tensor], list[torch.Generator]]:
    """One step's rows of one role: whom each individual faces, its real batch and its cell's torch
    stream; each cell draws its pairing, then each member's mutation, from its own streams."""
    chosen_rows: list[Any] = []
    real_rows: list[torch.Tensor] = []
    streams: list[torch.Generator] = []
    for job, real in zip(jobs, reals, strict=True):
        assert real is not None
        chosen = pick(job)
        for individual in job.members[role]:
            individual.set_hyper(mutate(individual.hyper, rng=job.rnd.numpy))
            chosen_rows.append(chosen)
            real_rows.append(real)
            streams.append(job.rnd.torch)
    return chosen_rows, real_rows, streams


def _together(jobs: Sequence[Variation], schedule: Callable[..., bool], step: int) -> bool:
    """The schedule's answer at ``step``, the same for every cell trained together (stacked rows cannot
    skip a step one by one)."""
    answers = {schedule(step, cell=job.cell_index, generation=job.generation) for job in jobs}
    if len(answers) > 1:
        raise RuntimeError(f"cells trained together disagree on whether to train at batch {step}")
    return answers.pop()


def adapt_problem(component: type, kind: str) -> type:
    """A problem written against 0.2's GAN-shaped ``evogan.api.Problem`` (``generator_step`` and no
    ``vary``) keeps working as an :class:`AdversarialProblem`, with a warning. Called by the registry
    when a problem registers (0.2 compatibility, like :func:`evogan.deprecated.adapt_signatures`)."""
    if kind != "problem" or not isinstance(component, type) or not issubclass(component, Problem):
        return component
    if issubclass(component, AdversarialProblem) or "vary" not in getattr(component, "__abstractmethods__", ()):
        return component
    if not hasattr(component, "generator_step"):
        return component
    warnings.warn(
        f"{component.__module__}.{component.__qualname__} implements the GAN methods on evogan.api.Problem "
        "(evogan 0.2); subclass evogan.adversarial.AdversarialProblem instead before 0.4.0",
        DeprecationWarning,
        stacklevel=3,
    )
    return type(component.__name__, (component, AdversarialProblem), {"__module__": component.__module__})


__all__ = ["AdversarialProblem"]
