"""The run directory: recipe as run, metrics, timings, logs, checkpoints, pictures and the summary.

    runs/<name>-<timestamp>/
        recipe.toml          the recipe after command-line overrides
        metrics.jsonl        one record per cell per generation (deterministic for a seed)
        timings.jsonl        seconds per phase per cell per generation (not deterministic)
        logs/cell-0003.log   one human-readable line per generation
        checkpoints/cell-0003.pt
        samples/             pictures of samples; plots/ curves; summary.json at the end

Every file that must never be seen half-written (checkpoints, summary) is written to a temporary file,
fsynced and renamed over the old one.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import torch

from evogan.errors import RunFailure, UserError

RECIPE_FILE = "recipe.toml"
METRICS_FILE = "metrics.jsonl"
TIMINGS_FILE = "timings.jsonl"
SUMMARY_FILE = "summary.json"
RECORDS_LOCK = ".records.lock"


def atomic_write(path: Path, write: Callable[[Any], None], *, binary: bool = True) -> None:
    """Write through a temporary file in the same folder, fsync, then rename over ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb" if binary else "w") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class RunDirectory:
    def __init__(self, path: Path) -> None:
        self.path = path

    # -------------------------------------------------------------------------------- creation
    @classmethod
    def create(cls, output_dir: Path, name: str) -> RunDirectory:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        try:
            output_dir.mkdir(parents=True, exist_ok=True)
            for attempt in range(100):
                suffix = f"-{attempt}" if attempt else ""
                path = output_dir / f"{name}-{stamp}{suffix}"
                try:
                    path.mkdir()
                    break
                except FileExistsError:
                    continue
            else:  # pragma: no cover - a hundred runs in one second
                raise UserError(f"{output_dir}: could not find a free run directory name")
            for sub in ("checkpoints", "logs", "samples", "plots"):
                (path / sub).mkdir()
        except PermissionError:
            raise UserError(f"{output_dir}: output directory is not writable") from None
        except (FileExistsError, NotADirectoryError):
            raise UserError(f"{output_dir}: output directory is not a directory") from None
        except OSError as exc:
            raise UserError(f"{output_dir}: cannot create the run directory: {exc.strerror}") from None
        return cls(path)

    @classmethod
    def open_existing(cls, path: Path) -> RunDirectory:
        if not path.is_dir():
            raise UserError(f"{path}: no such run directory")
        if not (path / RECIPE_FILE).is_file():
            raise UserError(f"{path}: not a run directory (no {RECIPE_FILE})")
        return cls(path)

    @property
    def run_id(self) -> str:
        return self.path.name

    @property
    def recipe_path(self) -> Path:
        return self.path / RECIPE_FILE

    def write_recipe(self, text: str) -> None:
        atomic_write(self.recipe_path, lambda f: f.write(text), binary=False)

    # -------------------------------------------------------------------------------- records
    @contextlib.contextmanager
    def _records_lock(self, exclusive: bool) -> Iterator[None]:
        """Appends share the lock; a resume's rewrite takes it alone, so no worker's line is written
        into the file a rewrite is about to replace (several workers share metrics.jsonl)."""
        fd = os.open(self.path / RECORDS_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def _append(self, name: str, record: Mapping[str, Any]) -> None:
        line = json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n"
        try:
            with self._records_lock(exclusive=False):
                # One write() per line in append mode: lines from several workers never interleave.
                fd = os.open(self.path / name, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                try:
                    os.write(fd, line.encode())
                finally:
                    os.close(fd)
        except OSError as exc:
            raise RunFailure(f"{self.path / name}: cannot write: {exc.strerror}") from None

    def append_metrics(self, record: Mapping[str, Any]) -> None:
        self._append(METRICS_FILE, record)

    def append_timings(self, record: Mapping[str, Any]) -> None:
        self._append(TIMINGS_FILE, record)

    def log(self, cell: int, line: str) -> None:
        with open(self.path / "logs" / f"cell-{cell:04d}.log", "a", encoding="utf-8") as handle:
            handle.write(line + "\n")

    def read_metrics(self) -> list[dict[str, Any]]:
        path = self.path / METRICS_FILE
        if not path.exists():
            return []
        records = []
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line cut by a crash mid-write
        return records

    def truncate_records(self, keep_upto: Mapping[int, int]) -> None:
        """On resume, drop records newer than each cell's checkpoint, so the file reads as one run.

        Only the cells in ``keep_upto`` are touched: a worker resumes its own cells while others append.
        """
        with self._records_lock(exclusive=True):
            for name in (METRICS_FILE, TIMINGS_FILE):
                path = self.path / name
                if not path.exists():
                    continue
                kept = []
                for line in path.read_text(encoding="utf-8").splitlines():
                    try:
                        record = json.loads(line)
                    except json.JSONDecodeError:
                        continue
                    cell = record["cell"]
                    if cell not in keep_upto or record["generation"] <= keep_upto[cell]:
                        kept.append(line + "\n")
                atomic_write(path, lambda f, kept=kept: f.writelines(kept), binary=False)

    # -------------------------------------------------------------------------------- checkpoints
    def checkpoint_path(self, cell: int) -> Path:
        return self.path / "checkpoints" / f"cell-{cell:04d}.pt"

    def save_checkpoint(self, cell: int, state: Mapping[str, Any]) -> Path:
        path = self.checkpoint_path(cell)
        try:
            atomic_write(path, lambda f: torch.save(dict(state), f))
        except OSError as exc:
            raise RunFailure(f"{path}: cannot write checkpoint: {exc.strerror}") from None
        return path

    def load_checkpoint(self, cell: int) -> dict[str, Any]:
        path = self.checkpoint_path(cell)
        if not path.exists():
            raise UserError(f"{path}: checkpoint missing for cell {cell}")
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:  # torch raises many kinds for a damaged file
            raise UserError(f"{path}: checkpoint is corrupt ({type(exc).__name__})") from None
        if not isinstance(state, dict) or state.get("format") != 1 or state.get("cell") != cell:
            raise UserError(f"{path}: not an evogan checkpoint for cell {cell}")
        return state

    def discard_if_unused(self) -> bool:
        """Remove a run directory that holds nothing but its recipe (the run failed before any work)."""
        if (self.path / METRICS_FILE).exists() or self.has_checkpoints():
            return False
        import shutil

        shutil.rmtree(self.path, ignore_errors=True)
        return True

    def has_checkpoints(self) -> bool:
        return any((self.path / "checkpoints").glob("cell-*.pt"))

    def write_summary(self, summary: Mapping[str, Any], name: str = SUMMARY_FILE) -> None:
        """``summary.json``, or a worker's ``summary-part-<rank>.json`` that the launcher merges."""
        text = json.dumps(summary, indent=2, sort_keys=True, default=float)
        atomic_write(self.path / name, lambda f: f.write(text + "\n"), binary=False)


__all__ = ["METRICS_FILE", "RECIPE_FILE", "SUMMARY_FILE", "TIMINGS_FILE", "RunDirectory", "atomic_write"]
