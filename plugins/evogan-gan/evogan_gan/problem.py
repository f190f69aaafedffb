"""The GAN problem: what a cell's generators and discriminators are, how they train and how they score.

Data, networks, loss and metric are components of their own, picked by name in ``[problem.data]``,
``[problem.network]``, ``[problem.loss]`` and ``[problem.metric]``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, model_validator

from evogan.adversarial import AdversarialProblem
from evogan.adversarial.contracts import (
    Augment,
    Dataset,
    DatasetOptions,
    DataSource,
    GeneratorStep,
    Loss,
    Metric,
    Networks,
    TrainingBackend,
)
from evogan.api import ComponentOptions, ProblemContext, Role, Sampler, ScoreStream, StackedFitness, Variation
from evogan.errors import UserError
from evogan.individual import Individual, layout_extra
from evogan.lazy import lazy
from evogan.precision import Precision
from evogan.recipe import ComponentRef, component_field
from evogan_gan.egan import Egan, EganOptions
from evogan_gan.modes import evaluating
from evogan_gan.schedule import CriticSchedule

if TYPE_CHECKING:
    import torch
    from torch import nn

    from evogan.scores import LazyMetrics
else:  # imported on first use: `evogan validate` and `components` read options without them
    torch = lazy("torch", globals())
    nn = lazy("torch.nn", globals())


def batch_dependent(network: nn.Module) -> str:
    """The name of the first layer whose output for one sample depends on the rest of its batch, or ''."""
    for name, layer in network.named_modules():
        if isinstance(layer, nn.modules.batchnorm._BatchNorm):
            return f"{type(layer).__name__} ({name})"
    return ""


class GanOptions(ComponentOptions):
    data: ComponentRef = component_field("dataset", "gaussian_ring", "the real data ([problem.data])")
    network: ComponentRef = component_field(
        "network", "mlp_2d", "generator/discriminator pair ([problem.network])"
    )
    loss: ComponentRef = component_field("loss", "bce", "adversarial loss ([problem.loss])")
    augment: ComponentRef = component_field(
        "augment", "none", "augmentation of every D input in training ([problem.augment]; diffaugment, ada)"
    )
    metric: ComponentRef = component_field("metric", "modes", "sample-quality metric; drives the mixture ES")
    pairing: ComponentRef = component_field(
        "pairing", "reference", "whom each training step faces ([problem.pairing]; was [pairing])"
    )
    mutation: ComponentRef = component_field(
        "mutation",
        "gaussian_lr",
        "each attacker's hyper-parameter mutation before each of its training steps ([problem.mutation]; was "
        "[mutation], which 0.2 required); default: Lipizzaner's",
    )
    sparsity: ComponentRef | None = Field(
        None,
        description="a sparsity controller: masks, pruning and regrowth ([problem.sparsity]; was [sparsity]); "
        "none: dense networks",
        json_schema_extra={"evogan_kind": "sparsity"},
    )
    batch_size: int = Field(100, ge=1, description="samples per training batch")
    batches_per_generation: int = Field(
        0, ge=0, description="training batches per generation (0: one full pass over the data)"
    )
    learning_rate: float = Field(2e-4, gt=0, description="initial learning rate (lr0)")
    optimizer: Literal["adam", "rmsprop"] = Field(
        "adam", description="adam, or rmsprop at the individual's learning rate (WGAN; betas unused)"
    )
    betas: tuple[float, float] = Field((0.5, 0.999), description="Adam betas")
    clip_weights: float = Field(
        0.0, ge=0, description="clamp every D weight to [-c, c] after each D step (WGAN: 0.01); 0: off"
    )
    g_ema: float = Field(
        0.0,
        ge=0,
        lt=1,
        description="decay of each generator's moving average, updated after every G step; evaluation, "
        "pictures, sample, load and export use it (StyleGAN2-ADA: 0.999); 0: off",
    )
    d_skip: int = Field(0, ge=0, description="train D on every (d_skip+1)-th batch only (Lipizzaner's skip)")
    critic_steps: int = Field(
        1, ge=1, description="train G on every critic_steps-th batch only (SNGAN's n_critic)"
    )
    critic_burst: int = Field(
        0,
        ge=0,
        description="WGAN's schedule over the run: this many D steps (one per batch) before each of the "
        "first critic_burst_first G steps and every critic_burst_every-th, critic_steps before the "
        "others (WGAN: 100); 0: off",
    )
    critic_burst_first: int = Field(25, ge=0, description="G steps that follow a burst at the start")
    critic_burst_every: int = Field(
        500, ge=0, description="every this-many-th G step follows a burst too (0: never)"
    )
    fitness_samples: int = Field(
        1000, ge=1, description="real samples and noise vectors per fitness evaluation"
    )
    score_samples: int = Field(
        1000,
        ge=1,
        description="generated samples per validation score (the mixture ES, the best cell, optimised "
        "mixtures: every score that chooses)",
    )
    test_samples: int = Field(
        0,
        ge=0,
        description="generated samples per test score (what summary.json, evogan evaluate and the final "
        "line report); 0: score_samples, so the two figures compare (FID's bias depends on the count)",
    )
    test_reference: Literal["split", "shared"] = Field(
        "split",
        description="the real samples a metric's reference statistics come from: split: the data split "
        "once in two halves (a fixed permutation, the same for every run seed), validation scores against "
        "one, test scores against the other; shared: both against all of it (also where the data cannot "
        "be split)",
    )
    mixture_sampling: Literal["exact_proportion", "independent_probability"] = Field(
        "exact_proportion", description="how an ensemble splits its samples between generators"
    )
    picture_samples: int = Field(64, ge=1, description="images in a sample grid (2-D data: 1000 points)")
    egan: EganOptions | None = Field(
        None,
        description="E-GAN's variation of every generator step ([problem.egan]): one child per loss, the "
        "fittest replaces the parent (Wang et al. 2019); none: the plain step with problem.loss",
    )
    d_batch: Literal["auto", "joint", "separate"] = Field(
        "auto",
        description="a discriminator step's forward: real and fake as one batch (joint), or one pass each "
        "(separate, the reference); auto: joint unless D has batch-dependent layers (BatchNorm)",
    )

    @model_validator(mode="after")
    def _burst_counts_batches(self) -> GanOptions:
        if self.critic_burst and self.d_skip:
            raise ValueError("critic_burst counts a D step per batch: it needs d_skip = 0")
        return self

    def critic_schedule(self) -> CriticSchedule | None:
        if not self.critic_burst:
            return None
        return CriticSchedule(
            self.critic_steps, self.critic_burst, self.critic_burst_first, self.critic_burst_every
        )


class GanProblem(AdversarialProblem[GanOptions]):
    """Generators against discriminators, as in Lipizzaner (Schmiedlechner et al. 2018)."""

    name: ClassVar[str] = "gan"
    description: ClassVar[str] = "GAN training: data, networks, loss and metric chosen by name"
    Options = GanOptions

    def __init__(self, options: GanOptions, context: ProblemContext) -> None:
        super().__init__(options, context)
        build = context.build
        self.dataset: Dataset[Any] = build(Dataset, options.data)
        self.networks: Networks[Any] = build(Networks, options.network)
        self.loss: Loss[Any] = build(Loss, options.loss)
        self.augment: Augment[Any] = build(Augment, options.augment)
        self.metric: Metric[Any] = build(Metric, options.metric)  # validation scores
        self.test_metric: Metric[Any] = build(Metric, options.metric)  # its own real reference
        self.reference_note = ""  # which real samples each stream's reference uses (prepare_scoring)
        self.device = context.device
        self.precision = Precision(context.precision, context.device.type)  # forwards' arithmetic
        self.data: DataSource | None = None
        self._cell_data: dict[int, DataSource] = {}  # each cell's share under data dieting
        self._joint_d: bool | None = None  # decided from the first discriminator (all share one architecture)
        self._critic_schedule = options.critic_schedule()  # asked on every batch: built once
        self.egan = None if options.egan is None else Egan(options.egan, self._mutations(options.egan))

    def _mutations(self, options: EganOptions) -> list[Loss[Any]]:
        """E-GAN's losses, built by name as ``[problem.loss]`` is (their default options)."""
        losses = []
        for name in options.losses:
            try:
                losses.append(self.context.build(Loss, ComponentRef(use=name)))
            except UserError as error:
                raise UserError(f"problem.egan.losses: {error}") from None
        return losses

    # -------------------------------------------------------------------------------- setup
    def setup(self) -> None:
        super().setup()
        self.data = self.dataset.load(self.device)
        if len(self.data) < self.options.batch_size:
            raise UserError(
                f"problem.batch_size: {self.options.batch_size} exceeds the dataset's {len(self.data)} samples"
            )
        self.networks.check(self.data.sample_shape)
        if not self.augment.identity and len(self.data.sample_shape) != 3:
            raise UserError(
                f"problem.augment: {self.options.augment.use} transforms images (C, H, W); the data's samples "
                f"have shape {tuple(self.data.sample_shape)}"
            )
        share = self.share()
        if share < self.options.batch_size:
            raise UserError(
                f"problem.data.sampling_ratio: {self.sampling_ratio} leaves each cell {share} of the "
                f"dataset's {len(self.data)} samples, fewer than problem.batch_size {self.options.batch_size}"
            )
        if share < len(self.data):
            try:
                self.data.subset(torch.arange(share))
            except NotImplementedError:
                raise UserError(
                    f"problem.data.sampling_ratio: dataset {self.options.data.use} cannot serve a share "
                    "of its samples"
                ) from None
        if self.options.d_batch == "joint":
            dependent = batch_dependent(self.create("discriminator", generator=torch.Generator().manual_seed(0)))
            if dependent:
                raise UserError(
                    f"problem.d_batch: joint needs a discriminator without batch-dependent layers; "
                    f"{self.options.network.use} has {dependent}"
                )

    def prepare_scoring(self) -> None:
        validation, test = self.reference_sources()
        for metric, source in ((self.metric, validation), (self.test_metric, test)):
            metric.prepare(source, self.device, generator=torch.Generator().manual_seed(self.context.seed))

    def reference_sources(self) -> tuple[DataSource, DataSource]:
        """The real data the validation and the test metric draw their reference from (``test_reference``):
        two disjoint halves of a fixed permutation (seed 0, whatever the run's seed), or all of it twice."""
        source = self.source
        if self.options.test_reference == "split" and len(source) >= 2:
            order = torch.randperm(len(source), generator=torch.Generator().manual_seed(0))
            half = len(source) // 2
            try:
                halves = source.subset(order[:half].sort().values), source.subset(order[half:].sort().values)
            except NotImplementedError:
                self.reference_note = f"shared: dataset {self.options.data.use} cannot be split"
                return source, source
            self.reference_note = (
                f"split: validation against {len(halves[0])} real samples, test against the other {len(halves[1])}"
            )
            return halves
        self.reference_note = f"shared: validation and test against all {len(source)} real samples"
        return source, source

    @property
    def source(self) -> DataSource:
        if self.data is None:
            raise RuntimeError("GanProblem.setup() was not called")
        return self.data

    @property
    def generator_decay(self) -> float:
        return self.options.g_ema

    @property
    def learning_rate(self) -> float:
        return self.options.learning_rate

    @property
    def sampling_ratio(self) -> float:
        options = self.dataset.options
        return options.sampling_ratio if isinstance(options, DatasetOptions) else 1.0

    def share(self) -> int:
        """How many samples each cell trains on (data dieting; all of them at ratio 1)."""
        return max(1, round(self.sampling_ratio * len(self.source)))

    def cell_source(self, cell: int) -> DataSource:
        """``cell``'s data: at ``sampling_ratio`` below 1 a random share drawn from the run seed and the
        cell index alone, so resuming or splitting the cells differently keeps every cell's share."""
        share = self.share()
        if share >= len(self.source):
            return self.source
        if cell not in self._cell_data:
            from evogan.rng import CellRandom  # here: rng imports torch, the quick commands must not

            generator = CellRandom.for_cell(self.context.seed, cell, "data").torch
            rows = torch.randperm(len(self.source), generator=generator)[:share].sort().values
            self._cell_data[cell] = self.source.subset(rows)
        return self._cell_data[cell]

    def describe(self) -> dict[str, Any]:
        facts: dict[str, Any] = {
            "data": self.options.data.use,
            "samples": len(self.source),
            **({"samples_per_cell": self.share()} if self.share() < len(self.source) else {}),
            "sample_shape": list(self.source.sample_shape),
            "network": self.options.network.use,
            "loss": self.options.loss.use,
            **({} if self.augment.identity else {"augment": self.options.augment.use}),
            "metric": self.options.metric.use,
        }
        facts["score_samples"] = self.options.score_samples
        facts["test_samples"] = self.options.test_samples or self.options.score_samples
        if self.reference_note:
            facts["test_reference"] = self.reference_note
        classifier_hash = getattr(self.metric, "classifier_hash", None)
        if classifier_hash:
            facts["classifier_hash"] = classifier_hash
        return facts

    def create(self, role: Role, *, generator: torch.Generator) -> nn.Module:
        return self.networks.build(role, self.source.sample_shape, generator=generator).to(self.device)

    def extra_layout(self, role: Role) -> dict[str, tuple[torch.dtype, tuple[int, ...]]]:
        if role == "generator":
            return {} if self.egan is None else self.egan.wins_layout()
        if not self.augment.adaptive:
            return {}
        return {name: (t.dtype, tuple(t.shape)) for name, t in self.augment.start().items()}

    def individual_metrics(self, individual: Individual) -> dict[str, float]:
        if individual.role == "generator":  # which of E-GAN's children won (g_egan_minimax, ...)
            return {} if self.egan is None else self.egan.metrics(individual.extra)
        if not self.augment.adaptive:
            return {}
        return self.augment.metrics(layout_extra(individual) or None)

    def augment_state(self, discriminator: Individual, *, start: bool = False) -> dict[str, torch.Tensor] | None:
        """The adaptive augmentation's state ``discriminator`` carries in its ``extra`` (``start``: made
        at its first step); None where the augmentation is not adaptive or it has not trained yet."""
        if not self.augment.adaptive:
            return None
        if start and not layout_extra(discriminator):
            discriminator.extra.update(self.augment.start())
        # the live tensors (the sparsity controller's state shares the slot under its own key)
        return layout_extra(discriminator) or None

    def make_optimizer(self, role: Role, network: nn.Module, learning_rate: float) -> torch.optim.Optimizer:
        # The fused kernel updates all parameters in one call: on one CPU thread it cuts the MNIST MLP's
        # Adam step about fivefold (a quarter of a generation's training time with the default loop).
        if self.options.optimizer == "rmsprop":  # Lipizzaner's WGAN trainer: torch's defaults, the lr
            return torch.optim.RMSprop(network.parameters(), lr=learning_rate)
        fused = self.device.type in ("cpu", "cuda")
        return torch.optim.Adam(network.parameters(), lr=learning_rate, betas=self.options.betas, fused=fused)

    def noise(self, n: int, generator: torch.Generator) -> torch.Tensor:
        return torch.randn(n, *self.networks.latent_shape(), generator=generator).to(self.device)

    # -------------------------------------------------------------------------------- data
    def training_batches(self, *, stream: torch.Generator, cell: int = 0) -> Iterator[torch.Tensor]:
        return self.cell_source(cell).batches(
            self.options.batch_size, self.options.batches_per_generation, generator=stream
        )

    def batches_per_generation(self, cell: int) -> int:
        return self.options.batches_per_generation or len(self.cell_source(cell)) // self.options.batch_size

    def train_discriminator_at(self, step: int, *, cell: int = 0, generation: int = 1) -> bool:
        return step % (self.options.d_skip + 1) == 0

    def train_generator_at(self, step: int, *, cell: int = 0, generation: int = 1) -> bool:
        schedule = self._critic_schedule
        if schedule is None:
            return step % self.options.critic_steps == self.options.critic_steps - 1
        return schedule.generator_trains_at((generation - 1) * self.batches_per_generation(cell) + step)

    def fitness_batch(self, *, generator: torch.Generator, cell: int = 0) -> torch.Tensor:
        # Lipizzaner draws fitness samples from the cell's own (dieted) loader too.
        return self.cell_source(cell).sample(self.options.fitness_samples, generator=generator)

    # -------------------------------------------------------------------------------- fitness
    def fitness(
        self,
        generators: Sequence[nn.Module],
        discriminators: Sequence[nn.Module],
        real: torch.Tensor,
        *,
        generator: torch.Generator,
        score: Sequence[Role] = ("generator", "discriminator"),
        memo: dict[nn.Module, Any] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        from evogan_gan.stacked_fitness import all_vs_all

        return all_vs_all(
            self, generators, discriminators, real, generator=generator, score=score, memo=memo, stacked=False
        )

    # -------------------------------------------------------------------------------- training
    @property
    def generator_candidates(self) -> int:
        return 1 if self.egan is None else len(self.egan.losses)

    def before_training(self, job: Variation) -> None:
        if self.egan is not None:
            self.egan.begin_generation(job.members["generator"])

    def generator_step(
        self,
        attacker: Individual,
        defender: nn.Module | Sequence[tuple[nn.Module, float]],
        real: torch.Tensor,
        *,
        stream: torch.Generator,
        defenders: Sequence[Individual] = (),
    ) -> GeneratorStep:
        z = self.noise(real.shape[0], stream)
        weighted = [(defender, 1.0)] if isinstance(defender, nn.Module) else list(defender)
        # an adaptive augmentation augments the fakes for each defender with that defender's state
        states = [self.augment_state(d) for d in defenders] if defenders else [None] * len(weighted)
        single = isinstance(defender, nn.Module)

        def update(loss: Loss[Any]) -> torch.Tensor:
            return self._generator_update(attacker, weighted, states, z, loss, single=single, stream=stream)

        if self.egan is None:
            fake_logits = update(self.loss)
        else:
            noise = partial(self.noise, generator=stream)
            fake_logits = self.egan.step(attacker, update, weighted, real, noise, self.precision, generator=stream)
        return GeneratorStep(z=z, real=real, fake_logits_pre=fake_logits, step=0)

    def _generator_update(
        self,
        attacker: Individual,
        weighted: Sequence[tuple[nn.Module, float]],
        states: Sequence[Mapping[str, torch.Tensor] | None],
        z: torch.Tensor,
        loss_function: Loss[Any],
        *,
        single: bool,
        stream: torch.Generator,
    ) -> torch.Tensor:
        """One optimizer step of ``attacker`` on noise ``z`` with ``loss_function``'s generator loss; the
        detached logits of the first defender on the step's fakes. ``single``: one defender, its loss unweighted."""
        for network, _ in weighted:
            network.requires_grad_(False)  # the defenders' gradients are not needed: skip computing them
        try:
            attacker.trainer.zero_grad(set_to_none=True)
            with self.precision.autocast():  # the forwards; losses on float32 logits (.float(): fp32 no-op)
                fake = attacker.network(z)
                fakes = [fake] * len(weighted)
                # D sees augmented fakes; G's gradient flows through the transform
                if self.augment.adaptive:
                    fakes = [self.augment(fake, stream=stream, state=state) for state in states]
                elif not self.augment.identity:
                    fakes = [self.augment(fake, stream=stream)] * len(weighted)
                # one generator forward, one discriminator forward per defender
                all_logits = [network(x).float() for (network, _), x in zip(weighted, fakes, strict=True)]
            fake_logits = all_logits[0]
            if single:
                loss = loss_function.generator_loss(fake_logits, stream=stream)
            else:
                loss = torch.zeros((), device=fake.device)
                for (_, weight), logits in zip(weighted, all_logits, strict=True):
                    loss = loss + weight * loss_function.generator_loss(logits, stream=stream)
            self.precision.step(attacker.trainer, loss)
        finally:
            for network, _ in weighted:
                network.requires_grad_(True)
        return fake_logits.detach()

    def discriminator_step(
        self, attacker: Individual, defender: nn.Module, real: torch.Tensor, *, stream: torch.Generator
    ) -> None:
        z = self.noise(real.shape[0], stream)
        state = self.augment_state(attacker, start=True)
        with self.precision.autocast():
            with torch.no_grad():
                fake = defender(z).to(real.dtype)
            if not self.augment.identity:
                real = self.augment(real, stream=stream, state=state)
                fake = self.augment(fake, stream=stream, state=state)
            attacker.trainer.zero_grad(set_to_none=True)
            if self.joint_discriminator_batch(attacker.network):
                # One forward of twice the batch: fewer, larger matrix products (same arithmetic per sample).
                real_logits, fake_logits = attacker.network(torch.cat((real, fake))).float().split(real.shape[0])
            else:
                real_logits, fake_logits = attacker.network(real).float(), attacker.network(fake).float()
        loss = self.loss.discriminator_loss(real_logits, fake_logits)
        self.precision.step(attacker.trainer, loss)
        if state is not None:
            self.augment.observe(state, real_logits)
        if self.options.clip_weights:  # WGAN keeps the critic Lipschitz by clipping its weights
            with torch.no_grad():
                for parameter in attacker.network.parameters():
                    parameter.clamp_(-self.options.clip_weights, self.options.clip_weights)

    def joint_discriminator_batch(self, discriminator: nn.Module) -> bool:
        """Whether a D step runs real and fake as one batch (``d_batch``): only where D's output for a
        sample does not depend on the rest of its batch."""
        if self._joint_d is None:
            self._joint_d = self.options.d_batch == "joint" or (
                self.options.d_batch == "auto" and not batch_dependent(discriminator)
            )
        return self._joint_d

    def stacked_training(
        self, generators: Sequence[Individual], discriminators: Sequence[Individual], *, hooks: bool = False
    ) -> TrainingBackend | str:
        from evogan_gan.stacked import StackedGanTraining, unautocast, unstackable

        if self.egan is not None:
            return "problem.egan: E-GAN's children train one generator at a time (looped)"
        if self.precision.scales_loss:
            return f"run.precision: the stacked steps do not scale losses ({self.precision.name} trains looped)"
        for role, individuals in (("generator", generators), ("discriminator", discriminators)):
            reason = unstackable(role, individuals, self.loss, hooks=hooks) or unautocast(
                role, individuals[0].network, self.precision
            )
            if reason:
                return reason
        return StackedGanTraining(self, generators, discriminators, hooks=hooks, clip=self.options.clip_weights)

    def stacked_fitness(
        self, generators: Sequence[nn.Module], discriminators: Sequence[nn.Module]
    ) -> StackedFitness | str:
        from evogan_gan.stacked import unautocast
        from evogan_gan.stacked_fitness import STACK_ROWS, StackedGanFitness, fitness_unstackable

        rows = STACK_ROWS.get(self.device.type, True)  # else network by network, autocast as looped
        for role, networks in (("generator", generators), ("discriminator", discriminators)):
            reason = fitness_unstackable(role, networks)
            if not reason and rows:
                reason = unautocast(role, networks[0], self.precision)
            if reason:
                return reason
        return StackedGanFitness(self, generators, discriminators)

    def discriminator_logits(
        self, discriminator: nn.Module, generator_net: nn.Module, z: torch.Tensor, real: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.no_grad(), self.precision.autocast():
            return discriminator(generator_net(z)).float(), discriminator(real).float()

    # -------------------------------------------------------------------------------- ensembles
    def _mixture_draw(
        self, weights: Sequence[float], n: int, generator: torch.Generator
    ) -> tuple[list[torch.Tensor], list[int], torch.Tensor]:
        """The ensemble's randomness: noise chunks (of at most 1,000), the generator each chunk is for,
        and which ``n`` rows of the concatenated outputs are kept, in what order."""
        if self.options.mixture_sampling == "exact_proportion":
            counts = [math.ceil(n * w) for w in weights]
        else:
            draws = torch.multinomial(
                torch.tensor(weights, dtype=torch.float), n, replacement=True, generator=generator
            )
            counts = torch.bincount(draws, minlength=len(weights)).tolist()
        chunks, owners = [], []
        for index, count in enumerate(counts):
            for start in range(0, count, 1000):
                chunks.append(self.noise(min(1000, count - start), generator))
                owners.append(index)
        order = torch.randperm(sum(chunk.shape[0] for chunk in chunks), generator=generator)[:n]
        return chunks, owners, order

    def mixture_samples(
        self, generators: Sequence[nn.Module], weights: Sequence[float], n: int, *, generator: torch.Generator
    ) -> torch.Tensor:
        """``n`` samples from the weighted ensemble (Lipizzaner's exact proportion or multinomial)."""
        chunks, owners, order = self._mixture_draw(weights, n, generator)
        with evaluating(*generators), self.precision.autocast():
            samples = torch.cat([generators[owner](z).float() for z, owner in zip(chunks, owners, strict=True)])
        return samples[order.to(samples.device)]

    def sampler(self, generators: Sequence[nn.Module], weights: Sequence[float]) -> Sampler:
        from evogan_gan.sampler import MixtureSampler

        return Sampler(
            MixtureSampler(generators, weights),
            [
                {"name": "z", "shape": list(self.networks.latent_shape()), "draw": "standard normal"},
                {"name": "u", "shape": [], "draw": "uniform on [0, 1): picks each sample's generator"},
            ],
        )

    def sampler_inputs(
        self, weights: Sequence[float], n: int, *, generator: torch.Generator
    ) -> tuple[torch.Tensor, ...]:
        from evogan_gan.sampler import uniform_for

        chunks, owners, order = self._mixture_draw(weights, n, generator)
        choice = torch.cat([torch.full((z.shape[0],), owner) for z, owner in zip(chunks, owners, strict=True)])
        return torch.cat(chunks).cpu()[order], uniform_for(choice[order], weights)

    def ensemble_scorer(
        self, generators: Sequence[nn.Module], seeds: Sequence[int], *, samples: int = 0
    ) -> Callable[[Sequence[float]], dict[str, float]]:
        """Each generator's ``n`` samples are drawn once, on noise from its own seed; a weight vector
        takes the first ``counts[i]`` of generator ``i``'s (exact proportions by largest remainders, or a
        multinomial draw on a fixed seed), so candidates differ in their weights alone."""
        n = samples or self.options.score_samples
        pools = [
            self.mixture_samples([network], [1.0], n, generator=torch.Generator().manual_seed(seed))
            for network, seed in zip(generators, seeds, strict=True)
        ]

        def score(weights: Sequence[float]) -> dict[str, float]:
            w = torch.tensor(weights, dtype=torch.float64)
            if self.options.mixture_sampling == "exact_proportion":
                exact = w / w.sum() * n
                counts = exact.floor().long()
                remainder = n - int(counts.sum())
                counts[torch.argsort(exact - counts, descending=True, stable=True)[:remainder]] += 1
            else:
                draws = torch.multinomial(
                    w.float(), n, replacement=True, generator=torch.Generator().manual_seed(seeds[0])
                )
                counts = torch.bincount(draws, minlength=len(pools))
            parts = [pool[:count] for pool, count in zip(pools, counts.tolist(), strict=True)]
            return self.metric.score(torch.cat(parts))

        return score

    def evaluate(
        self, generators: Sequence[nn.Module], weights: Sequence[float], *, generator: torch.Generator
    ) -> dict[str, float]:
        return self.evaluate_lazily(generators, weights, stream="validation", generator=generator).complete()

    def evaluate_on(
        self,
        generators: Sequence[nn.Module],
        weights: Sequence[float],
        *,
        stream: ScoreStream,
        generator: torch.Generator,
    ) -> dict[str, float]:
        """Validation: :meth:`evaluate` (``score_samples``, the validation reference); test:
        ``test_samples`` against the test reference (see ``test_reference``)."""
        return self.evaluate_lazily(generators, weights, stream=stream, generator=generator).complete()

    def evaluate_lazily(
        self,
        generators: Sequence[nn.Module],
        weights: Sequence[float],
        *,
        stream: ScoreStream,
        generator: torch.Generator,
    ) -> LazyMetrics:
        """:meth:`evaluate_on`'s samples scored by :meth:`Metric.score_lazily`: the metric's primary (the
        objective) at once, the others from the kept features when first read."""
        if stream == "validation":
            metric, n = self.metric, self.options.score_samples
        else:
            metric, n = self.test_metric, self.options.test_samples or self.options.score_samples
        return metric.score_lazily(self.mixture_samples(generators, weights, n, generator=generator))

    def objective(self, metrics: Mapping[str, float]) -> float:
        value = float(metrics[self.metric.primary])
        return value if self.metric.lower_is_better else -value

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
        from evogan_gan.pictures import save_image_grid, save_scatter

        path.parent.mkdir(parents=True, exist_ok=True)
        if len(self.source.sample_shape) == 1:
            fake = self.mixture_samples(generators, weights, count or 1000, generator=generator)
            real = self.source.sample(count or 1000, generator=generator)
            save_scatter(real.cpu(), fake.cpu(), path, title=title)
        else:
            n = count or self.options.picture_samples
            fake = self.mixture_samples(generators, weights, n, generator=generator)
            save_image_grid(fake.cpu(), path)
