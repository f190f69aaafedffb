"""Pictures of samples: a scatter plot for 2-D data, an image grid for images."""

from __future__ import annotations

from pathlib import Path

import torch


def save_scatter(real: torch.Tensor, fake: torch.Tensor, path: Path, *, title: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(4.5, 4.5))
    axis.scatter(real[:, 0], real[:, 1], s=4, alpha=0.5, label="real", color="#1f77b4")
    axis.scatter(fake[:, 0], fake[:, 1], s=4, alpha=0.5, label="generated", color="#d62728")
    axis.set_aspect("equal")
    axis.legend(loc="upper right", fontsize=8, markerscale=3)
    if title:
        axis.set_title(title, fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def save_image_grid(images: torch.Tensor, path: Path, *, columns: int | None = None) -> None:
    """Images in [-1, 1], (N, C, H, W), as one PNG grid."""
    from torchvision.utils import save_image

    columns = columns or max(1, int(len(images) ** 0.5))
    save_image(images.float().clamp(-1, 1) * 0.5 + 0.5, path, nrow=columns, padding=2)
