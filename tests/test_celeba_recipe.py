"""The CelebA recipe end to end on a small folder of 64x64 PNGs, and the one-line errors of issue 3's bad inputs.

The shipped ``recipes/celeba.toml`` runs unchanged except for what a CPU test must shrink: the data (an
image folder the test writes instead of CelebA), batch and sample counts, generations, and the Inception
weights (a random-weights state dict, so the real loading path runs without the 96 MB file).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from evogan_gan.image_metrics import INCEPTION_FILE

from evogan.cli import _attach_commands, cli

ROOT = Path(__file__).resolve().parents[1]
CELEBA = ROOT / "recipes" / "celeba.toml"
DEMO = ROOT / "recipes" / "demo.toml"
MNIST = ROOT / "recipes" / "mnist.toml"

_attach_commands()


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def quoted(path: Path) -> str:
    return json.dumps(str(path))


def write_shapes(folder: Path, count: int = 40, size: int = 64) -> Path:
    """``count`` PNGs of a coloured ellipse or rectangle on a coloured background."""
    from PIL import Image, ImageDraw

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for i in range(count):
        background = tuple(int(v) for v in rng.integers(0, 256, 3))
        image = Image.new("RGB", (size, size), background)
        draw = ImageDraw.Draw(image)
        x0, y0 = (int(v) for v in rng.integers(0, size // 2, 2))
        x1, y1 = (int(v) for v in rng.integers(size // 2 + 4, size, 2))
        colour = tuple(int(v) for v in rng.integers(0, 256, 3))
        (draw.ellipse if i % 2 else draw.rectangle)((x0, y0, x1, y1), fill=colour)
        image.save(folder / f"shape-{i:03d}.png")
    return folder


@pytest.fixture(scope="module")
def shapes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_shapes(tmp_path_factory.mktemp("shapes") / "pngs")


@pytest.fixture(scope="module")
def random_inception(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The FID Inception's state dict with random weights (torch-fidelity's download patched out)."""
    from torch_fidelity import feature_extractor_inceptionv3 as fe

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fe, "load_state_dict_from_url", lambda *args, **kwargs: {})
        patch.setattr(fe.FeatureExtractorInceptionV3, "load_state_dict", lambda self, *args, **kwargs: None)
        network = fe.FeatureExtractorInceptionV3("inception-v3-compat", ["2048"])
    path = tmp_path_factory.mktemp("inception") / INCEPTION_FILE
    torch.save(network.state_dict(), path)
    return path


def celeba_on(folder: Path, weights: Path, output: Path, *extra: str) -> list[str]:
    """``evogan run`` arguments: the CelebA recipe on an image folder, shrunk to seconds on a CPU."""
    sets = [
        'problem.data.use="image_folder"',
        f"problem.data.root={quoted(folder)}",
        "problem.data.workers=0",
        f"problem.metric.weights={quoted(weights)}",
        "problem.metric.feature=64",  # small FID features: cheap eigen-decompositions
        "problem.metric.samples=4",
        "problem.metric.batch_size=4",
        "problem.metric.splits=2",
        "problem.batch_size=8",
        "problem.batches_per_generation=2",
        "problem.fitness_samples=8",
        "problem.score_samples=4",
        "problem.picture_samples=4",
        "run.threads=1",
        "run.samples_every=0",
        *extra,
    ]
    args = ["run", str(CELEBA), "--grid", "1x1", "--generations", "2", "--output-dir", str(output), "--quiet"]
    for item in sets:
        args += ["--set", item]
    return args


@pytest.mark.slow  # 30-140 s on one shared CPU thread: DCGAN-64 and Inception forwards at 299x299
def test_celeba_recipe_end_to_end_on_an_image_folder(shapes: Path, random_inception: Path, tmp_path: Path) -> None:
    result = invoke(*celeba_on(shapes, random_inception, tmp_path / "runs"))
    assert result.exit_code == 0, result.output
    (run_dir,) = (tmp_path / "runs").iterdir()
    recipe = (run_dir / "recipe.toml").read_text()
    for line in ('use = "dcgan64"', 'use = "inception"', "learning_rate = 5e-05", "d_skip = 0", "sigma = 0.05"):
        assert line in recipe  # the paper's CelebA settings came through
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["generations"] == 2 and summary["problem"]["sample_shape"] == [3, 64, 64]
    cell = summary["cells"]["0"]
    for scores in (cell["generator"], cell["mixture"]):
        assert {"fid", "is", "is_std", "kid"} <= set(scores) and all(np.isfinite(v) for v in scores.values())
    assert list((run_dir / "checkpoints").glob("cell-0000-g*.pt"))
    assert list((run_dir / "samples").glob("final-best-cell-*.png"))
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["generation"] for r in records] == [1, 2]


def one_error_line(result) -> str:
    """The run failed with exit code 2 and said why in exactly one line, without a traceback."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


def test_dataset_smaller_than_a_batch(shapes: Path, tmp_path: Path) -> None:
    weights = tmp_path / INCEPTION_FILE
    weights.write_bytes(b"")  # never read: the data check comes first
    result = invoke(*celeba_on(shapes, weights, tmp_path / "runs", "problem.batch_size=128"))
    line = one_error_line(result)
    assert "problem.batch_size: 128 exceeds the dataset's 40 samples" in line


def test_images_that_do_not_fit_the_network(shapes: Path, tmp_path: Path) -> None:
    result = invoke("run", str(DEMO), "--quiet", "--output-dir", str(tmp_path / "runs"),
                    "--set", 'problem.network={use="dcgan64"}')
    line = one_error_line(result)
    assert "network dcgan64 needs images of shape (1, 64, 64) or (3, 64, 64)" in line
    assert "the dataset gives (1, 28, 28)" in line
    weights = tmp_path / INCEPTION_FILE
    weights.write_bytes(b"")
    result = invoke(*celeba_on(shapes, weights, tmp_path / "runs", "problem.data.image_size=32"))
    assert "the dataset gives (3, 32, 32)" in one_error_line(result)


def test_missing_mnist_root_names_the_path(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    result = invoke("run", str(MNIST), "--quiet", "--output-dir", str(tmp_path / "runs"),
                    "--set", f"problem.data.root={quoted(empty)}")
    line = one_error_line(result)
    assert str(empty / "MNIST" / "raw" / "train-images-idx3-ubyte") in line
