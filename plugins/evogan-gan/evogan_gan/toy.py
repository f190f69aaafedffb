"""The fast problem: 2-D Gaussian mixtures, small MLPs, and mode-coverage metrics.

The 8-mode ring (radius 2, std 0.02) and the 25-mode grid (spacing 2, std 0.05) are the standard
mode-collapse benchmarks (Metz et al. 2017; Srivastava et al. 2017, VEEGAN).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, ClassVar, Literal, TypeVar

from pydantic import Field

from evogan.adversarial.contracts import Dataset, DatasetOptions, DataSource, Metric, Networks
from evogan.api import ComponentOptions, Role
from evogan.errors import UserError
from evogan.lazy import lazy
from evogan_gan.data import TensorSource

if TYPE_CHECKING:
    import torch
    from torch import nn
else:  # imported on first use: `evogan validate` and `components` read options without them
    torch = lazy("torch", globals())
    nn = lazy("torch.nn", globals())


class MixtureSource(TensorSource):
    """Samples of a Gaussian mixture, with the mixture's centres and spread for the metrics."""

    def __init__(
        self, samples: torch.Tensor, centres: torch.Tensor, std: float, *, rows: torch.Tensor | None = None
    ) -> None:
        super().__init__(samples, rows=rows)
        self.centres = centres
        self.std = std

    def subset(self, indices: torch.Tensor) -> MixtureSource:
        """A share of the samples that keeps the mixture's centres and spread (the metric needs them)."""
        part = super().subset(indices)
        return MixtureSource(self.samples, self.centres, self.std, rows=part.rows)


class MixtureOptions(DatasetOptions):
    samples: int = Field(10_000, ge=1, description="real samples drawn once for the run")
    std: float = Field(0.02, gt=0, description="standard deviation of each mode")
    seed: int = Field(0, ge=0, description="seed of the real data (independent of the run's seed)")


MixtureOptionsT = TypeVar("MixtureOptionsT", bound=MixtureOptions)


class _Mixture(Dataset[MixtureOptionsT]):
    Options = MixtureOptions

    def centres(self) -> torch.Tensor:
        raise NotImplementedError

    def load(self, device: torch.device) -> DataSource:
        generator = torch.Generator().manual_seed(self.options.seed)
        centres = self.centres()
        which = torch.randint(len(centres), (self.options.samples,), generator=generator)
        noise = torch.randn(self.options.samples, 2, generator=generator) * self.options.std
        samples = centres[which] + noise
        return MixtureSource(samples.to(device), centres.to(device), self.options.std)


class GaussianRing(_Mixture["GaussianRing.Options"]):
    """``modes`` Gaussians evenly spaced on a circle of ``radius``."""

    name: ClassVar[str] = "gaussian_ring"
    description: ClassVar[str] = "2-D mixture of Gaussians on a ring (8 modes)"

    class Options(MixtureOptions):
        modes: int = Field(8, ge=1, description="number of modes")
        radius: float = Field(2.0, gt=0, description="ring radius")

    def centres(self) -> torch.Tensor:
        angles = torch.arange(self.options.modes, dtype=torch.float64) * (2 * math.pi / self.options.modes)
        return (self.options.radius * torch.stack([angles.cos(), angles.sin()], dim=1)).float()


class GaussianGrid(_Mixture["GaussianGrid.Options"]):
    """``side`` x ``side`` Gaussians on a square grid with ``spacing`` between modes, centred on 0."""

    name: ClassVar[str] = "gaussian_grid"
    description: ClassVar[str] = "2-D mixture of Gaussians on a grid (25 modes)"

    class Options(MixtureOptions):
        side: int = Field(5, ge=1, description="modes per side")
        spacing: float = Field(2.0, gt=0, description="distance between neighbouring modes")
        std: float = Field(0.05, gt=0, description="standard deviation of each mode")

    def centres(self) -> torch.Tensor:
        offsets = torch.arange(self.options.side, dtype=torch.float32) - (self.options.side - 1) / 2
        offsets = offsets * self.options.spacing
        xs, ys = torch.meshgrid(offsets, offsets, indexing="ij")
        return torch.stack([xs.reshape(-1), ys.reshape(-1)], dim=1)


def init_linear(module: nn.Module, generator: torch.Generator) -> None:
    """PyTorch's default Linear initialisation, drawn from an explicit generator."""
    for layer in module.modules():
        if isinstance(layer, nn.Linear):
            bound = 1 / math.sqrt(layer.in_features)
            with torch.no_grad():
                layer.weight.uniform_(-bound, bound, generator=generator)
                layer.bias.uniform_(-bound, bound, generator=generator)


class Mlp2d(Networks["Mlp2d.Options"]):
    """Lipizzaner's toy perceptrons: two hidden Tanh layers; D returns a logit."""

    name: ClassVar[str] = "mlp_2d"
    description: ClassVar[str] = "MLP pair for 2-D points (Lipizzaner's circular-problem perceptron)"

    class Options(ComponentOptions):
        latent_size: int = Field(64, ge=1, description="noise dimension")
        hidden: int = Field(128, ge=1, description="units per hidden layer")
        activation: Literal["tanh", "leaky_relu"] = Field("tanh", description="hidden activation")

    def latent_shape(self) -> tuple[int, ...]:
        return (self.options.latent_size,)

    def check(self, sample_shape: tuple[int, ...]) -> None:
        if len(sample_shape) != 1:
            raise UserError(f"problem.network: mlp_2d needs flat samples, the data has shape {sample_shape}")

    def build(self, role: Role, sample_shape: tuple[int, ...], *, generator: torch.Generator) -> nn.Module:
        width, hidden = sample_shape[0], self.options.hidden
        inputs = self.options.latent_size if role == "generator" else width
        outputs = width if role == "generator" else 1
        def activation() -> nn.Module:
            return nn.Tanh() if self.options.activation == "tanh" else nn.LeakyReLU(0.2)

        layers: list[nn.Module] = [
            nn.Linear(inputs, hidden),
            activation(),
            nn.Linear(hidden, hidden),
            activation(),
            nn.Linear(hidden, outputs),
        ]
        if role == "discriminator":
            layers.append(nn.Flatten(0))
        network = nn.Sequential(*layers)
        init_linear(network, generator)
        return network


class ModeCoverage(Metric["ModeCoverage.Options"]):
    """Modes covered and the fraction of high-quality samples (within ``3 std`` of a mode).

    A mode counts as covered when it holds at least ``coverage_fraction`` of the high-quality samples
    a perfect generator would put there (PacGAN's 20-of-100 rule). ``tvd`` compares the generated
    distribution over modes (plus one bucket for low-quality samples) with the uniform one; it is the
    smooth score the mixture ES minimises.
    """

    name: ClassVar[str] = "modes"
    description: ClassVar[str] = "modes covered, high-quality fraction and mode TVD (Gaussian mixtures)"
    primary: ClassVar[str] = "tvd"
    lower_is_better: ClassVar[bool] = True

    class Options(ComponentOptions):
        quality_std: float = Field(3.0, gt=0, description="high quality: within this many std of a mode")
        coverage_fraction: float = Field(0.2, gt=0, le=1, description="share of a mode's due that covers it")

    def prepare(self, data: DataSource, device: torch.device, *, generator: torch.Generator) -> None:
        centres = getattr(data, "centres", None)
        if centres is None:
            raise UserError(
                "problem.metric: 'modes' needs a Gaussian-mixture dataset (gaussian_ring, gaussian_grid)"
            )
        self.centres = centres
        self.radius = self.options.quality_std * float(data.std)  # type: ignore[attr-defined]

    def score(self, samples: torch.Tensor) -> dict[str, float]:
        distance = torch.cdist(samples.float(), self.centres.float())
        nearest, mode = distance.min(dim=1)
        good = nearest <= self.radius
        modes = len(self.centres)
        counts = torch.bincount(mode[good], minlength=modes).float()
        n = max(len(samples), 1)
        due = n / modes
        generated = torch.cat([counts / n, counts.new_tensor([1 - counts.sum().item() / n])])
        ideal = torch.cat([counts.new_full((modes,), 1 / modes), counts.new_zeros(1)])
        return {
            "modes_covered": float((counts >= self.options.coverage_fraction * due).sum()),
            "hq_fraction": float(good.float().mean()),
            "tvd": float(0.5 * (generated - ideal).abs().sum()),
        }


TOY_DATASETS = (GaussianRing, GaussianGrid)
TOY_NETWORKS = (Mlp2d,)
TOY_METRICS = (ModeCoverage,)
