from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]

TINY = """
[run]
seed = {seed}
generations = {generations}
checkpoint_every = 1
samples_every = 0
device = "cpu"
threads = 1
output_dir = "{output}"

[topology]
use = "torus"
rows = {rows}
cols = {cols}

[population]
size = 1

[selection]
use = "tournament"

[mutation]
use = "gaussian_lr"

[problem]
use = "gan"
batch_size = 32
batches_per_generation = 4
fitness_samples = 64
score_samples = 128

[problem.data]
use = "gaussian_ring"
samples = 512

[problem.network]
use = "mlp_2d"
latent_size = 8
hidden = 16
"""


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    # Tiny models run fastest on one thread; the machine is shared.
    torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _no_plugin_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EVOGAN_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    monkeypatch.delenv("EVOGAN_BLOCK_PLUGINS", raising=False)
    monkeypatch.delenv("EVOGAN_PLUGINS", raising=False)


@pytest.fixture
def tiny_recipe(tmp_path: Path):
    """Write a tiny toy recipe; keyword arguments change seed, generations and grid shape."""

    def write(seed: int = 1, generations: int = 3, rows: int = 2, cols: int = 2, extra: str = "") -> Path:
        path = tmp_path / f"tiny-{seed}-{generations}-{rows}x{cols}.toml"
        text = TINY.format(seed=seed, generations=generations, rows=rows, cols=cols, output=tmp_path / "runs")
        path.write_text(text + extra)
        return path

    return write


def run_dirs(output: Path) -> list[Path]:
    return sorted(p for p in output.iterdir() if p.is_dir()) if output.exists() else []


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available() and not os.environ.get("EVOGAN_SKIP_GPU"):
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
