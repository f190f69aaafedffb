from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from evogan.testing import tiny_recipe  # noqa: F401  (the kit's fixture, for every test here)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    # Tiny models run fastest on one thread; the machine is shared.
    torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _no_plugin_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EVOGAN_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    monkeypatch.delenv("EVOGAN_BLOCK_PLUGINS", raising=False)
    monkeypatch.delenv("EVOGAN_PLUGINS", raising=False)


def run_dirs(output: Path) -> list[Path]:
    return sorted(p for p in output.iterdir() if p.is_dir()) if output.exists() else []


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available() and not os.environ.get("EVOGAN_SKIP_GPU"):
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
