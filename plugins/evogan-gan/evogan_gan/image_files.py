"""Image files as a torch ``Dataset``, decoded and centre-cropped on access by loader workers.

Apart from :mod:`evogan_gan.images` (the dataset components), which imports it when a run loads
images: defining a ``torch.utils.data.Dataset`` subclass imports torch, and reading a recipe must not.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.utils.data import Dataset as TorchDataset


def _transform(image_size: int, channels: int):
    from torchvision import transforms

    mean = (0.5,) * channels
    return transforms.Compose(
        [
            transforms.Resize(image_size),
            transforms.CenterCrop(image_size),
            transforms.ToTensor(),
            transforms.Normalize(mean, mean),  # [0, 1] -> [-1, 1]
        ]
    )


def _to_mode(image, channels: int):
    """Transparent pixels go on white (emoji-like PNGs would otherwise turn black), then L or RGB."""
    from PIL import Image

    if image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info):
        rgba = image.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        image = Image.alpha_composite(background, rgba)
    return image.convert("L" if channels == 1 else "RGB")


class ImageTransform:
    """CelebA hands PIL images to ``transform``: convert mode first, then crop (picklable for workers)."""

    def __init__(self, image_size: int, channels: int) -> None:
        self.channels = channels
        self.inner = _transform(image_size, channels)

    def __call__(self, image) -> torch.Tensor:
        return self.inner(_to_mode(image, self.channels))


class ImageFiles(TorchDataset):
    """Image files in a fixed (sorted) order, decoded and centre-cropped on access; picklable for workers."""

    def __init__(self, files: list[Path], image_size: int, channels: int) -> None:
        self.files = files
        self.transform = ImageTransform(image_size, channels)

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: int) -> torch.Tensor:
        from PIL import Image

        with Image.open(self.files[index]) as image:
            return self.transform(image)


class ImagesOnly(TorchDataset):
    """Drops torchvision's (image, target) pairing; CelebA without targets yields ``None`` targets."""

    def __init__(self, inner: TorchDataset) -> None:
        self.inner = inner

    def __len__(self) -> int:
        return len(self.inner)  # type: ignore[arg-type]

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.inner[index][0]


__all__ = ["ImageFiles", "ImageTransform", "ImagesOnly"]
