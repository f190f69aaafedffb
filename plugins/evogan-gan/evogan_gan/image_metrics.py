"""Image quality metrics: classifier FID/TVD for MNIST-like data, Inception FID/IS with the FID Inception
weights (a file the user gives, or the cached copy, downloaded from the published URL when allowed); both
also give KID, precision, recall, density and coverage on the same features
(:mod:`evogan_gan.feature_metrics`).

Both compare generated samples against statistics of a fixed real reference sample, computed once in
``prepare`` and kept in memory (and optionally on disk, keyed by the exact real pixels and the network's
hash, so a stale cache can never be read). The Frechet distance is computed in float64 torch:
``|mu_r - mu_g|^2 + Tr(S_r) + Tr(S_g) - 2 sum sqrt(eig(S_r^1/2 S_g S_r^1/2))``.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from evogan.adversarial.contracts import DataSource, Metric
from evogan.api import ComponentOptions
from evogan.download import Remote, by_hand, cache_dir, downloads_allowed, fetch
from evogan.errors import UserError
from evogan.hookspecs import Register, hookimpl
from evogan.lazy import lazy
from evogan.scores import LazyMetrics

if TYPE_CHECKING:
    import torch

    from evogan_gan import classifier, feature_metrics
    from evogan_gan.classifier import MnistClassifier
else:  # imported on first use: `evogan validate` and `components` read options without them
    torch = lazy("torch", globals())
    classifier = lazy("evogan_gan.classifier", globals())
    feature_metrics = lazy("evogan_gan.feature_metrics", globals())

INCEPTION_FILE = "pt_inception-2015-12-05-6726825d.pth"
# pytorch-fid's release of the TF-Inception port every FID tool uses (torch-fidelity's is the same file);
# torch.hub's name carries the first 8 hex digits of this SHA-256.
INCEPTION = Remote(
    f"https://github.com/mseitzer/pytorch-fid/releases/download/fid_weights/{INCEPTION_FILE}",
    "6726825d0af5f729cebd5821db510b11b1cfad8faad88a03f1befd49fb9129b2",
)
INCEPTION_WHAT = "the FID Inception weights"


# --------------------------------------------------------------------------------------------- maths
def _stats_device(tensor: torch.Tensor) -> torch.device:
    """float64 where it is supported and fast: CUDA, else the CPU."""
    return tensor.device if tensor.device.type == "cuda" else torch.device("cpu")


def mean_cov(features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and unbiased covariance of (N, d) features, in float64."""
    x = features.to(_stats_device(features), torch.float64)
    mu = x.mean(0)
    centred = x - mu
    return mu, centred.T @ centred / (x.shape[0] - 1)


def sqrt_psd(matrix: torch.Tensor) -> torch.Tensor:
    """Symmetric square root of a covariance (tiny negative eigenvalues from rounding are clamped)."""
    values, vectors = torch.linalg.eigh((matrix + matrix.T) / 2)
    return (vectors * values.clamp_min(0).sqrt()) @ vectors.T


def frechet_distance(
    mu1: torch.Tensor,
    cov1: torch.Tensor,
    mu2: torch.Tensor,
    cov2: torch.Tensor,
    sqrt_cov1: torch.Tensor | None = None,
) -> float:
    """Frechet distance of two Gaussians; ``sqrt_cov1`` may be passed in when it is cached."""
    mu2, cov2 = mu2.to(mu1), cov2.to(cov1)
    root = sqrt_psd(cov1) if sqrt_cov1 is None else sqrt_cov1.to(cov1)
    middle = root @ cov2 @ root
    eigenvalues = torch.linalg.eigvalsh((middle + middle.T) / 2).clamp_min(0)
    value = (mu1 - mu2).square().sum() + cov1.trace() + cov2.trace() - 2 * eigenvalues.sqrt().sum()
    return max(float(value), 0.0)


def class_histogram(logits: torch.Tensor, num_classes: int) -> torch.Tensor:
    """Frequencies of the argmax classes, float64 on the CPU."""
    counts = torch.bincount(logits.argmax(1).cpu(), minlength=num_classes)
    return counts.to(torch.float64) / max(logits.shape[0], 1)


def total_variation(p: torch.Tensor, q: torch.Tensor) -> float:
    return 0.5 * float((p - q).abs().sum())


# --------------------------------------------------------------------------------------------- caching
@dataclass
class RealStats:
    mu: torch.Tensor
    cov: torch.Tensor
    sqrt_cov: torch.Tensor
    features: torch.Tensor  # the reference sample's features, for KID and the k-NN metrics
    radii: torch.Tensor | None = None  # each real's distance to its k-th nearest real (nearest_k)
    histogram: torch.Tensor | None = None
    # KID's real-side kernel sums, filled by the first score (not saved: recomputed in one score)
    kid_memo: dict[tuple[int, ...], feature_metrics.KernelSums] = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict[str, torch.Tensor]:
        out = {"mu": self.mu, "cov": self.cov, "sqrt_cov": self.sqrt_cov, "features": self.features}
        optional = {"radii": self.radii, "histogram": self.histogram}
        return {**out, **{k: v for k, v in optional.items() if v is not None}}


class FeatureMetricOptions(ComponentOptions):
    """What the feature-space metrics beside FID cost: KID's subsets and the k of the k-NN metrics."""

    kid_subsets: int = Field(
        10, ge=0, description="KID: random subsets averaged (0: no KID); one when both sets fit in a subset"
    )
    kid_subset_size: int = Field(1000, ge=2, description="KID: samples per subset (torch-fidelity: 1000)")
    nearest_k: int = Field(
        5,
        ge=0,
        description="k of precision, recall, density and coverage (Naeem et al.: 5; 0, or k samples or fewer: none)",
    )


def feature_scores(real: RealStats, fake: torch.Tensor, options: FeatureMetricOptions) -> dict[str, float]:
    """KID and precision/recall/density/coverage of generated ``fake`` features against the reference."""
    out: dict[str, float] = {}
    if options.kid_subsets:
        out["kid"], out["kid_std"] = feature_metrics.kid(
            real.features,
            fake,
            subsets=options.kid_subsets,
            subset_size=options.kid_subset_size,
            memo=real.kid_memo,
        )
    if real.radii is not None and fake.shape[0] > options.nearest_k:
        out.update(feature_metrics.prdc(real.features, fake, k=options.nearest_k, real_radii=real.radii))
    return out


def fid_of(real: RealStats, fake: torch.Tensor) -> float:
    """The FID of generated ``fake`` features against the reference statistics."""
    mu, cov = mean_cov(fake)
    return frechet_distance(real.mu, real.cov, mu, cov, real.sqrt_cov)


def diverged_scores(options: FeatureMetricOptions) -> dict[str, float]:
    """What a generator that produced non-finite samples scores on the feature metrics."""
    kid = {"kid": float("inf"), "kid_std": 0.0} if options.kid_subsets else {}
    knn = {"precision": 0.0, "recall": 0.0, "density": 0.0, "coverage": 0.0} if options.nearest_k else {}
    return {**kid, **knn}


def real_stats(
    features: torch.Tensor, options: FeatureMetricOptions, histogram: torch.Tensor | None = None
) -> RealStats:
    mu, cov = mean_cov(features)
    k = options.nearest_k
    radii = feature_metrics.nearest_radii(features, k) if k and features.shape[0] > k else None  # else: none
    return RealStats(mu, cov, sqrt_psd(cov), features.double().cpu(), radii, histogram)


def reference_sample(data: DataSource, count: int, seed: int, generator: torch.Generator) -> torch.Tensor:
    """The real samples the statistics are made of: a fixed draw (``seed`` >= 0) keeps scores comparable
    across runs; without replacement, so a small dataset gives fewer samples rather than duplicates."""
    draw = torch.Generator().manual_seed(seed) if seed >= 0 else generator
    return data.sample(min(count, len(data)), generator=draw)


def stats_key(real: torch.Tensor, network_hash: str, kind: str) -> str:
    """Fingerprint of the exact real pixels (data, sample size, seed) and the feature network."""
    digest = hashlib.sha256(f"{kind}|{network_hash}|{tuple(real.shape)}|".encode())
    digest.update(real.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    return digest.hexdigest()[:24]


class StatsCache:
    """Real statistics in memory per metric instance, and as ``<cache_dir>/<kind>-<key>.pt`` when asked."""

    def __init__(self, kind: str, cache_dir: Path | None) -> None:
        self.kind = kind
        self.cache_dir = None if cache_dir is None else Path(cache_dir).expanduser()
        self.memory: dict[str, RealStats] = {}

    def get(self, key: str, compute: Callable[[], RealStats]) -> RealStats:
        if key in self.memory:
            return self.memory[key]
        path = None if self.cache_dir is None else self.cache_dir / f"{self.kind}-{key}.pt"
        stats = None
        if path is not None and path.is_file():
            try:
                stats = RealStats(**torch.load(path, map_location="cpu", weights_only=True))
            except (RuntimeError, OSError, TypeError, EOFError):
                stats = None  # unreadable (e.g. a truncated write): recompute and overwrite
        if stats is None:
            stats = compute()
            if path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
                partial = path.with_suffix(f".{os.getpid()}.tmp")
                torch.save({k: v.cpu() for k, v in stats.to_dict().items()}, partial)
                os.replace(partial, path)  # atomic: concurrent cells never read half a file
        self.memory[key] = stats
        return stats


def _batched(
    fn: Callable[[torch.Tensor], tuple[torch.Tensor, ...]], x: torch.Tensor, size: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Features and logits of ``x`` in batches on ``device`` (keeps memory flat for large samples)."""
    parts = [fn(x[i : i + size].to(device)) for i in range(0, x.shape[0], size)]
    features, logits = (torch.cat(column) for column in zip(*parts, strict=True))
    return features, logits


# --------------------------------------------------------------------------------------------- classifier
class ClassifierMetricOptions(FeatureMetricOptions):
    samples: int = Field(
        1000, ge=2, description="real samples for the reference statistics (Lipizzaner: 1000)"
    )
    weights: Path | None = Field(
        None, description="classifier state dict; none = the packaged mnist_classifier.pt"
    )
    cache_dir: Path | None = Field(
        None, description="also keep real statistics here on disk; none = memory only"
    )
    reference_seed: int = Field(
        0,
        ge=-1,
        description="seed of the real reference draw (fixed: comparable across runs); -1 = the run's",
    )
    batch_size: int = Field(1000, ge=1, description="images per classifier forward pass")

    @field_validator("weights")
    @classmethod
    def _weights_exist(cls, value: Path | None) -> Path | None:
        if value is not None and not value.expanduser().is_file():
            raise ValueError(f"classifier weights {value} not found")
        return value


class ClassifierMetric(Metric[ClassifierMetricOptions]):
    """FID on the 50-d features of the project's MNIST classifier, TVD of its class histogram."""

    name: ClassVar[str] = "classifier"
    description: ClassVar[str] = "MNIST classifier FID (50-d features), class-histogram TVD, classes covered"
    primary: ClassVar[str] = "fid"
    lower_is_better: ClassVar[bool] = True
    Options: ClassVar[type[ClassifierMetricOptions]] = ClassifierMetricOptions
    coverage_threshold: ClassVar[float] = 0.01

    def __init__(self, options: ClassifierMetricOptions) -> None:
        super().__init__(options)
        self.weights = classifier.DEFAULT_WEIGHTS if options.weights is None else options.weights.expanduser()
        self.model: MnistClassifier = classifier.load_classifier(self.weights)
        #: first 12 hex digits of the weights' sha256: record it beside every score.
        self.classifier_hash = classifier.weights_hash(self.weights)[:12]
        self.cache = StatsCache("classifier", options.cache_dir)
        self.device = torch.device("cpu")
        self.real: RealStats | None = None

    def _check(self, shape: tuple[int, ...], what: str) -> None:
        if tuple(shape) != classifier.INPUT_SHAPE:
            raise UserError(
                f"metric {self.name} scores 1x28x28 images (MNIST-like); {what} has shape {tuple(shape)}"
            )

    def _features(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.no_grad():
            return _batched(self.model.features_and_logits, images, self.options.batch_size, self.device)

    def _real_stats(self, real: torch.Tensor) -> RealStats:
        features, logits = self._features(real)
        return real_stats(features, self.options, class_histogram(logits, self.model.num_classes))

    def prepare(self, data: DataSource, device: torch.device, *, generator: torch.Generator) -> None:
        self._check(data.sample_shape, "the dataset")
        self.device = torch.device(device)
        self.model.to(self.device)
        real = reference_sample(data, self.options.samples, self.options.reference_seed, generator)
        key = stats_key(real, self.classifier_hash, f"{self.name}-k{self.options.nearest_k}")
        self.real = self.cache.get(key, lambda: self._real_stats(real))

    def score(self, samples: torch.Tensor) -> dict[str, float]:
        return self.score_lazily(samples).complete()

    def score_lazily(self, samples: torch.Tensor) -> LazyMetrics:
        """The FID at once; TVD, classes covered and the feature metrics from the kept features and logits
        when first asked for."""
        if self.real is None:
            raise RuntimeError("ClassifierMetric.score() before prepare()")
        self._check(tuple(samples.shape[1:]), "the generated sample")
        if samples.shape[0] < 2:
            raise UserError(f"metric {self.name} needs at least 2 generated samples, got {samples.shape[0]}")
        if not bool(torch.isfinite(samples).all()):  # a diverged generator
            return LazyMetrics(
                {"fid": float("inf"), "tvd": 1.0, "classes_covered": 0.0, **diverged_scores(self.options)}
            )
        features, logits = self._features(samples.detach())
        real = self.real
        fid = fid_of(real, features)

        def rest() -> dict[str, float]:
            histogram = class_histogram(logits, self.model.num_classes)
            assert real.histogram is not None
            return {
                "fid": fid,
                "tvd": total_variation(real.histogram, histogram),
                "classes_covered": float((histogram >= self.coverage_threshold).sum()),
                **feature_scores(real, features, self.options),
            }

        return LazyMetrics({"fid": fid}, rest)


# --------------------------------------------------------------------------------------------- inception
def cached_inception() -> Path:
    """Where the FID Inception weights are kept and looked for when no path is given."""
    return cache_dir() / "weights" / INCEPTION_FILE


def inception_weights_problem(path: Path | None, download: bool = False) -> str | None:
    """Why the FID Inception weights cannot be had, or None: ``path``, else the cached copy, else a
    download when allowed (``download`` or ``evogan run --download``)."""
    if path is None:
        cached = cached_inception()
        if cached.is_file() or downloads_allowed(download):
            return None
        return (
            f"{INCEPTION_FILE} is not in the cache: run with --download (or set download = true), or "
            f"{by_hand(INCEPTION_WHAT, INCEPTION, cached)}"
        )
    if not Path(path).expanduser().is_file():
        return f"{path} not found (expected the FID Inception weights {INCEPTION_FILE})"
    return None


def inception_weights(path: Path | None, download: bool = False) -> tuple[Path, str]:
    """The weights file to load and its SHA-256: ``path`` as given, or the cached copy (fetched when
    missing and allowed), which must be the published file."""
    problem = inception_weights_problem(path, download)
    if problem:
        raise UserError(f"metrics.inception.weights: {problem}")
    if path is not None:
        return path.expanduser(), classifier.weights_hash(path.expanduser())
    cached = cached_inception()
    if not cached.is_file():
        fetch(INCEPTION, cached, what=INCEPTION_WHAT)
    digest = classifier.weights_hash(cached)
    if digest != INCEPTION.digest:  # e.g. copied in by hand from somewhere else
        raise UserError(
            f"{cached}: its sha256 is {digest}, not the published {INCEPTION.digest}; delete it and run with "
            f"--download, or {by_hand(INCEPTION_WHAT, INCEPTION, cached)}"
        )
    return cached, digest


class InceptionMetricOptions(FeatureMetricOptions):
    weights: Path | None = Field(
        None,
        description=f"path to {INCEPTION_FILE}; none = the cached copy (<cache>/weights/{INCEPTION_FILE}, "
        "SHA-256 checked)",
    )
    download: bool = Field(
        False,
        description="fetch the weights from the published URL into the cache when missing (needs network "
        "access; evogan run --download does it for every component)",
    )
    samples: int = Field(1000, ge=2, description="real samples for the reference statistics")
    cache_dir: Path | None = Field(
        None, description="also keep real statistics here on disk; none = memory only"
    )
    reference_seed: int = Field(
        0,
        ge=-1,
        description="seed of the real reference draw (fixed: comparable across runs); -1 = the run's",
    )
    feature: Literal[64, 192, 768, 2048] = Field(
        2048,
        description="Inception layer for the FID: 2048 (pool3) is standard; smaller ones suit tiny samples",
    )
    batch_size: int = Field(50, ge=1, description="images per Inception forward pass")
    splits: int = Field(10, ge=1, description="splits for the Inception Score's mean and std")

    @model_validator(mode="after")
    def _weights_usable(self) -> InceptionMetricOptions:
        problem = inception_weights_problem(self.weights, self.download)
        if problem:
            raise ValueError(problem)
        return self


def to_uint8_rgb(images: torch.Tensor) -> torch.Tensor:
    """[-1, 1] floats to the 0..255 RGB bytes the FID Inception expects (gray is replicated)."""
    pixels = ((images.clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)
    return pixels.expand(-1, 3, -1, -1) if pixels.shape[1] == 1 else pixels


def inception_score(logits: torch.Tensor, splits: int) -> tuple[float, float]:
    """exp(E_x KL(p(y|x) || p(y))) per split: mean and std over splits, in float64."""
    probs = logits.to("cpu", torch.float64).softmax(1)
    scores = []
    for part in probs.chunk(min(splits, probs.shape[0])):
        marginal = part.mean(0, keepdim=True)
        kl = (part * (part.clamp_min(1e-30).log() - marginal.clamp_min(1e-30).log())).sum(1)
        scores.append(kl.mean().exp())
    values = torch.stack(scores)
    return float(values.mean()), float(values.std(correction=0))


class InceptionMetric(Metric[InceptionMetricOptions]):
    """Standard FID (2048-d pool3) and Inception Score from one pass of the FID Inception network."""

    name: ClassVar[str] = "inception"
    description: ClassVar[str] = "Inception FID and Inception Score; needs a local FID Inception weights file"
    primary: ClassVar[str] = "fid"
    lower_is_better: ClassVar[bool] = True
    Options: ClassVar[type[InceptionMetricOptions]] = InceptionMetricOptions

    @classmethod
    def check_weights(cls, path: Path | None, download: bool = False) -> None:
        """For callers outside recipe validation: a :class:`UserError` naming the option."""
        problem = inception_weights_problem(path, download)
        if problem:
            raise UserError(f"metrics.{cls.name}.weights: {problem}")

    def __init__(self, options: InceptionMetricOptions) -> None:
        super().__init__(options)
        self.weights, digest = inception_weights(options.weights, options.download)
        #: first 12 hex digits of the weights' sha256, as for the classifier metric.
        self.classifier_hash = digest[:12]
        self.cache = StatsCache("inception", options.cache_dir)
        self.device = torch.device("cpu")
        self.network: torch.nn.Module | None = None
        self.real: RealStats | None = None

    def _load(self) -> torch.nn.Module:
        # torch-fidelity loads the file with weights_only=False; open it safely first so a file that is not
        # a plain state dict is refused before any pickle code could run.
        try:
            torch.load(self.weights, map_location="cpu", weights_only=True, mmap=True)
        except Exception as error:
            raise UserError(
                f"metrics.{self.name}.weights: {self.weights} is not a state dict: {error}"
            ) from None
        from torch_fidelity.feature_extractor_inceptionv3 import FeatureExtractorInceptionV3

        try:
            network = FeatureExtractorInceptionV3(
                "inception-v3-compat",
                [str(self.options.feature), "logits_unbiased"],
                feature_extractor_weights_path=str(self.weights),
            )
        except RuntimeError as error:
            first = str(error).splitlines()[0]
            raise UserError(
                f"metrics.{self.name}.weights: {self.weights} does not fit Inception-v3: {first}"
            ) from None
        return network.eval().requires_grad_(False)

    def _features(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        assert self.network is not None
        network = self.network
        with torch.no_grad():
            return _batched(lambda x: network(to_uint8_rgb(x)), images, self.options.batch_size, self.device)

    def _real_stats(self, real: torch.Tensor) -> RealStats:
        features, _ = self._features(real)
        return real_stats(features, self.options)

    def prepare(self, data: DataSource, device: torch.device, *, generator: torch.Generator) -> None:
        shape = tuple(data.sample_shape)
        if len(shape) != 3 or shape[0] not in (1, 3):
            raise UserError(
                f"metric {self.name} scores 1- or 3-channel images; the dataset has shape {shape}"
            )
        self.device = torch.device(device)
        if self.network is None:
            self.network = self._load()
        self.network.to(self.device)
        real = reference_sample(data, self.options.samples, self.options.reference_seed, generator)
        key = stats_key(real, self.classifier_hash, f"{self.name}{self.options.feature}-k{self.options.nearest_k}")
        self.real = self.cache.get(key, lambda: self._real_stats(real))

    def score(self, samples: torch.Tensor) -> dict[str, float]:
        return self.score_lazily(samples).complete()

    def score_lazily(self, samples: torch.Tensor) -> LazyMetrics:
        """The FID at once; the Inception Score and the feature metrics from the kept features and logits
        when first asked for."""
        if self.real is None:
            raise RuntimeError("InceptionMetric.score() before prepare()")
        if samples.shape[0] < 2:
            raise UserError(f"metric {self.name} needs at least 2 generated samples, got {samples.shape[0]}")
        if not bool(torch.isfinite(samples).all()):  # a diverged generator
            return LazyMetrics({"fid": float("inf"), "is": 0.0, "is_std": 0.0, **diverged_scores(self.options)})
        features, logits = self._features(samples.detach())
        real = self.real
        fid = fid_of(real, features)

        def rest() -> dict[str, float]:
            score, spread = inception_score(logits, self.options.splits)
            return {"fid": fid, "is": score, "is_std": spread, **feature_scores(real, features, self.options)}

        return LazyMetrics({"fid": fid}, rest)


@hookimpl
def evogan_register_metrics(register: Register) -> None:
    register(ClassifierMetric)
    register(InceptionMetric)
