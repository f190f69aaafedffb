"""The MNIST scoring classifier: Lipizzaner's small CNN, trained by ``scripts/train_classifier.py``.

Its 50-d penultimate features give the classifier FID and its argmax the class histogram for TVD. It is
trained on inputs in [-1, 1], the generator's range, so scoring needs no renormalisation. Scores depend on
the exact weights, so every score should be recorded next to :func:`weights_hash`.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from evogan.engine.rundir import file_sha256
from evogan.errors import UserError

WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"
DEFAULT_WEIGHTS = WEIGHTS_DIR / "mnist_classifier.pt"
INPUT_SHAPE = (1, 28, 28)


def _pool(x: torch.Tensor) -> torch.Tensor:
    """2x2 max-pooling, done in channels-last layout: a maximum picks one of its inputs, so the values are
    those of the plain layout to the bit, and on one CPU thread it is 1.6x faster, the copies included
    (the pools were half of a mixture score's classifier pass; issue 39). The result is contiguous again,
    so the convolutions and the flatten see what they always did."""
    return F.max_pool2d(x.contiguous(memory_format=torch.channels_last), 2).contiguous()


class MnistClassifier(nn.Module):
    """conv 1-10 k5, pool, conv 10-20 k5, pool, fc 320-50, fc 50-10 (21,840 parameters)."""

    feature_size = 50
    num_classes = 10

    def __init__(self, dropout: float = 0.0) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)
        self.dropout = dropout

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """The 50-d fc1 activations (after ReLU), the input of the final layer."""
        x = F.relu(_pool(self.conv1(x)))
        x = F.relu(_pool(self.conv2(x)))
        return F.relu(self.fc1(x.flatten(1)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = F.dropout(self.features(x), self.dropout, self.training)
        return self.fc2(features)

    def features_and_logits(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = self.features(x)
        return features, self.fc2(features)


def weights_hash(path: Path) -> str:
    """Full sha256 (hex) of a weights file; the first 12 characters identify a classifier in results."""
    return file_sha256(path)


def load_classifier(path: Path | None = None, device: torch.device | str = "cpu") -> MnistClassifier:
    """The classifier in eval mode; a missing or foreign file is a :class:`UserError` naming it."""
    path = DEFAULT_WEIGHTS if path is None else Path(path).expanduser()
    if not path.is_file():
        raise UserError(f"classifier weights {path} not found; scripts/train_classifier.py writes them")
    model = MnistClassifier()
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
        model.load_state_dict(state)
    except (RuntimeError, OSError, KeyError, TypeError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise UserError(f"classifier weights {path} are not an MnistClassifier state dict: {first}") from None
    return model.to(device).eval().requires_grad_(False)
