from __future__ import annotations

import functools
import os
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
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


@pytest.fixture(autouse=True)
def _own_cache(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    # Never the user's cache, and nothing is downloaded unless a test asks for it.
    monkeypatch.setenv("EVOGAN_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "evogan-cache"))
    monkeypatch.delenv("EVOGAN_DOWNLOAD", raising=False)


class _QuietFiles(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def file_server(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A folder served over HTTP on 127.0.0.1 (no Range support), and its base URL ending in ``/``."""
    folder = tmp_path / "served"
    folder.mkdir()
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietFiles, directory=str(folder)))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield folder, f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


def run_dirs(output: Path) -> list[Path]:
    return sorted(p for p in output.iterdir() if p.is_dir()) if output.exists() else []


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available() and not os.environ.get("EVOGAN_SKIP_GPU"):
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
