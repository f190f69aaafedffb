"""The run directory: recipe as run, metrics, timings, logs, checkpoints, pictures and the summary.

    runs/<name>-<timestamp>/  recipe.toml, metrics.jsonl (deterministic for a seed), timings.jsonl (not), logs/,
        checkpoints/cell-0003-g000010.pt and .sha256 (the newest ``run.keep_checkpoints``), samples/, plots/

Files that must never be seen half-written (checkpoints, summary.json) are written to a temporary file, fsynced and
renamed over the old one. Older runs' single checkpoint per cell is renamed into this layout when opened.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import torch

from evogan.download import file_digest
from evogan.errors import RunFailure, UserError

RECIPE_FILE = "recipe.toml"
METRICS_FILE = "metrics.jsonl"
TIMINGS_FILE = "timings.jsonl"
SUMMARY_FILE = "summary.json"
RECORDS_LOCK = ".records.lock"
_CHECKPOINT_NAME = re.compile(r"cell-(\d+)-g(\d+)\.pt")  # checkpoint_path's names


def _write_lines(lines: Iterable[str], handle: Any) -> None:
    handle.writelines(lines)


def _json_lines(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each whole line of a JSON-lines file with its record, read as a stream (a long run's metrics
    reach hundreds of MB); a line cut by a crash mid-write is skipped."""
    if not path.exists():
        return
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            try:
                yield line, json.loads(line)
            except json.JSONDecodeError:
                continue


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


@contextlib.contextmanager
def writing(path: Path) -> Iterator[None]:
    """A write into the run directory that fails (disk full, read-only, gone) stops the run with one line
    naming the file and the cause; the atomic writers leave the previous version of the file intact."""
    try:
        yield
    except OSError as exc:
        target = exc.filename if exc.filename and path.is_dir() else path  # a folder: name the file
        raise RunFailure(f"{target}: cannot write: {exc.strerror or exc}") from None


class RunDirectory:
    def __init__(self, path: Path) -> None:
        self.path = path
        # cell -> generations of its checkpoint files, from one scan at this object's first save and then
        # kept by its own saves and removals (a cell's checkpoints are written by the process that runs it)
        self._saved: dict[int, set[int]] | None = None

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
    def named(cls, path: Path) -> RunDirectory:
        """A run directory at a path given by the user (the same on every node of a multi-node run),
        created with its sub-folders when missing."""
        try:
            for sub in ("checkpoints", "logs", "samples", "plots"):
                (path / sub).mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            raise UserError(f"{path}: run directory is not a directory") from None
        except OSError as exc:
            raise UserError(f"{path}: cannot create the run directory: {exc.strerror}") from None
        return cls(path)

    @classmethod
    def open_existing(cls, path: Path) -> RunDirectory:
        """A run directory made earlier (``--resume``, ``evogan evaluate`` and the other commands that load
        a run), its checkpoints of the earlier layout migrated."""
        if not path.is_dir():
            raise UserError(f"{path}: no such run directory")
        if not (path / RECIPE_FILE).is_file():
            raise UserError(f"{path}: not a run directory (no {RECIPE_FILE})")
        directory = cls(path)
        directory.migrate_legacy_checkpoints()
        return directory

    @property
    def run_id(self) -> str:
        return self.path.name

    @property
    def recipe_path(self) -> Path:
        return self.path / RECIPE_FILE

    def write_recipe(self, text: str) -> None:
        with writing(self.recipe_path):
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
        with writing(self.path / name), self._records_lock(exclusive=False):
            # One write() per line in append mode: lines from several workers never interleave.
            fd = os.open(self.path / name, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line.encode())
            finally:
                os.close(fd)

    def append_metrics(self, record: Mapping[str, Any]) -> None:
        self._append(METRICS_FILE, record)

    def append_timings(self, record: Mapping[str, Any]) -> None:
        self._append(TIMINGS_FILE, record)

    def log(self, cell: int, line: str) -> None:
        path = self.path / "logs" / f"cell-{cell:04d}.log"
        with writing(path), open(path, "a", encoding="utf-8") as handle:
            handle.write(line + "\n")

    def iter_metrics(self) -> Iterator[dict[str, Any]]:
        """The records of ``metrics.jsonl`` one at a time, in file order, never all in memory."""
        return (record for _, record in _json_lines(self.path / METRICS_FILE))

    def read_metrics(self) -> list[dict[str, Any]]:
        """Every record of ``metrics.jsonl`` as a list (a long run's take gigabytes: prefer
        :meth:`iter_metrics`)."""
        return list(self.iter_metrics())

    def truncate_records(self, keep_upto: Mapping[int, int]) -> None:
        """On resume, drop records newer than each cell's checkpoint, so the file reads as one run.

        Only the cells in ``keep_upto`` are touched: a worker resumes its own cells while others append.
        """
        with writing(self.path / RECORDS_LOCK), self._records_lock(exclusive=True):
            for name in (METRICS_FILE, TIMINGS_FILE):
                path = self.path / name
                if not path.exists():
                    continue
                kept = (
                    line if line.endswith("\n") else line + "\n"
                    for line, record in _json_lines(path)
                    if record["cell"] not in keep_upto or record["generation"] <= keep_upto[record["cell"]]
                )
                with writing(path):
                    atomic_write(path, partial(_write_lines, kept), binary=False)

    def picture_path(self, label: str, cell: int) -> Path:
        """Where the engine writes a cell's sample picture (``gen-0010`` or ``final-best``)."""
        return self.path / "samples" / f"{label}-cell-{cell:04d}.png"

    # -------------------------------------------------------------------------------- checkpoints
    def checkpoint_path(self, cell: int, generation: int) -> Path:
        return self.path / "checkpoints" / f"cell-{cell:04d}-g{generation:06d}.pt"

    def checkpoint_generations(self, cell: int) -> list[int]:
        """Generations with a checkpoint file for ``cell``, newest first (validity not checked)."""
        return self.all_checkpoint_generations().get(cell, [])

    def all_checkpoint_generations(self) -> dict[int, list[int]]:
        """:meth:`checkpoint_generations` of every cell from one scan of the folder: what touches many
        cells lists once (a listing per cell made a checkpoint of a 64x64 grid's 4,096 cells quadratic)."""
        found: dict[int, list[int]] = {}
        try:
            entries = os.scandir(self.path / "checkpoints")
        except OSError:  # none, or unreadable: no checkpoints
            return found
        with entries:
            for entry in entries:
                match = _CHECKPOINT_NAME.fullmatch(entry.name)
                if match and match[1] == f"{int(match[1]):04d}":
                    found.setdefault(int(match[1]), []).append(int(match[2]))
        return {cell: sorted(generations, reverse=True) for cell, generations in found.items()}

    def _saved_generations(self, cell: int) -> set[int]:
        if self._saved is None:
            self._saved = {c: set(g) for c, g in self.all_checkpoint_generations().items()}
        return self._saved.setdefault(cell, set())

    def save_checkpoint(self, cell: int, state: Mapping[str, Any], *, keep: int = 3) -> Path:
        """Write, fsync, read back and compare, then record the digest; only then drop checkpoints older
        than the newest ``keep``, so a failed or damaged write never costs the previous good one."""
        generation = int(state["generation"])
        path = self.checkpoint_path(cell, generation)
        buffer = io.BytesIO()
        torch.save(dict(state), buffer)
        data = buffer.getbuffer()
        digest = hashlib.sha256(data).hexdigest()
        with writing(path):
            atomic_write(path, lambda f: f.write(data))
            if file_sha256(path) != digest:
                path.unlink(missing_ok=True)
                raise RunFailure(f"{path}: checkpoint read back differs from what was written")
            atomic_write(_digest_path(path), lambda f: f.write(digest + "\n"), binary=False)
            saved = self._saved_generations(cell)
            saved.add(generation)
            for old in sorted(saved, reverse=True)[keep:]:
                stale = self.checkpoint_path(cell, old)
                _digest_path(stale).unlink(missing_ok=True)
                stale.unlink(missing_ok=True)
                saved.discard(old)
        return path

    def read_checkpoint(self, cell: int, generation: int) -> dict[str, Any]:
        """One checkpoint, checked against its recorded digest; ``CheckpointInvalid`` says why not."""
        path = self.checkpoint_path(cell, generation)
        try:
            recorded = _digest_path(path).read_text(encoding="utf-8").strip()
            actual = file_sha256(path)
        except FileNotFoundError:
            raise CheckpointInvalid(f"{path}: checkpoint or its digest is missing") from None
        except OSError as exc:
            raise CheckpointInvalid(f"{path}: cannot read checkpoint: {exc.strerror}") from None
        if recorded != actual:
            raise CheckpointInvalid(f"{path}: checkpoint is corrupt (digest differs)")
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:  # torch raises many kinds for a damaged file
            raise CheckpointInvalid(f"{path}: checkpoint is corrupt ({type(exc).__name__})") from None
        if not isinstance(state, dict) or state.get("format") != 1 or state.get("cell") != cell:
            raise CheckpointInvalid(f"{path}: not an evogan checkpoint for cell {cell}")
        if state.get("generation") != generation:
            raise CheckpointInvalid(f"{path}: holds generation {state.get('generation')}, not {generation}")
        return state

    def valid_generations(self, cell: int, generations: Iterable[int] | None = None) -> list[int]:
        """Generations whose checkpoint matches its digest, newest first; one warning per file skipped.
        ``generations``: the cell's checkpoint files, newest first, when already listed."""
        valid = []
        for generation in self.checkpoint_generations(cell) if generations is None else generations:
            path = self.checkpoint_path(cell, generation)
            try:
                if _digest_path(path).read_text(encoding="utf-8").strip() == file_sha256(path):
                    valid.append(generation)
                    continue
                reason = "corrupt (digest differs)"
            except OSError:
                reason = "incomplete (no digest: the write did not finish)"
            self.warn(f"{path}: skipped, checkpoint {reason}")
        return valid

    def shared_generations(self, cells: Iterable[int]) -> list[int]:
        """Generations at which every one of ``cells`` has a valid checkpoint, oldest first: the points a
        run can be scored at as a whole (``evogan evaluate --along``)."""
        shared: set[int] | None = None
        listed = self.all_checkpoint_generations()
        for cell in cells:
            valid = set(self.valid_generations(cell, listed.get(cell, [])))
            shared = valid if shared is None else shared & valid
        return sorted(shared or ())

    def resume_points(self, cells: Iterable[int]) -> dict[int, int]:
        """Per cell, the generation to resume from (see :func:`resume_points`); UserError when a cell
        has no valid checkpoint at all."""
        listed = self.all_checkpoint_generations()
        available = {cell: self.valid_generations(cell, listed.get(cell, [])) for cell in cells}
        missing = [cell for cell, generations in available.items() if not generations]
        if missing:
            names = ", ".join(str(self.path / "checkpoints" / f"cell-{c:04d}-g*.pt") for c in missing)
            raise UserError(f"{names}: no valid checkpoint for cell(s) {', '.join(map(str, missing))}")
        return resume_points(available)

    def load_checkpoint(self, cell: int, generation: int) -> dict[str, Any]:
        try:
            return self.read_checkpoint(cell, generation)
        except CheckpointInvalid as exc:
            raise UserError(str(exc)) from None

    def discard_checkpoints_after(self, cell: int, generation: int) -> None:
        """Remove ``cell``'s checkpoints newer than ``generation`` (a timeline the run does not continue)."""
        for newer in self.checkpoint_generations(cell):
            if newer > generation:
                path = self.checkpoint_path(cell, newer)
                with writing(path):
                    _digest_path(path).unlink(missing_ok=True)
                    path.unlink(missing_ok=True)
                if self._saved is not None:
                    self._saved.get(cell, set()).discard(newer)

    def migrate_legacy_checkpoints(self) -> int:
        """Give each checkpoint of the earlier layout (``cell-0003.pt``: one per cell, no digest) its
        generation's name and a digest; return how many moved. All are read first (an evogan checkpoint
        of its cell, else a one-line UserError naming it, and nothing moves); each digest is written
        before the atomic rename, so an interruption leaves the old file to migrate again: nothing is lost."""
        found: list[tuple[Path, Path]] = []
        for path in sorted((self.path / "checkpoints").glob("cell-*.pt")):
            digits = path.stem.removeprefix("cell-")
            if not digits.isdigit():
                continue  # this layout's cell-0003-g000010.pt
            cell = int(digits)
            try:
                state = torch.load(path, map_location="cpu", weights_only=True)
            except FileNotFoundError:
                continue  # another process of this run migrated it meanwhile
            except Exception as exc:  # torch raises many kinds for a damaged file
                raise UserError(_legacy_refusal(path, f"unreadable ({type(exc).__name__})")) from None
            if (
                not isinstance(state, dict)
                or state.get("format") != 1
                or state.get("cell") != cell
                or not isinstance(state.get("generation"), int)
            ):
                raise UserError(_legacy_refusal(path, f"not an evogan checkpoint for cell {cell}"))
            found.append((path, self.checkpoint_path(cell, state["generation"])))
        moved = 0
        for path, target in found:
            if target.exists():
                self.warn(f"{path}: left in place, {target.name} already holds that generation")
                continue
            try:
                digest = file_sha256(path)
            except FileNotFoundError:  # another process of this run moved it first
                continue
            with writing(target):  # a failed write is one line; the old file stays
                atomic_write(_digest_path(target), partial(_write_lines, [digest + "\n"]), binary=False)
                try:
                    os.replace(path, target)
                except FileNotFoundError:
                    continue
            moved += 1
        if moved:
            self.warn(
                f"{self.path / 'checkpoints'}: migrated {moved} checkpoint(s) of the earlier layout "
                "(cell-NNNN.pt) to cell-NNNN-gGGGGGG.pt with digests"
            )
            self._saved = None  # listed again at the next save
        return moved

    def warn(self, line: str) -> None:
        print(f"warning: {line}", file=sys.stderr, flush=True)

    def discard_if_unused(self) -> bool:
        """Remove a run directory that holds nothing but its recipe (the run failed before any work)."""
        if (self.path / METRICS_FILE).exists() or self.has_checkpoints():
            return False
        import shutil

        shutil.rmtree(self.path, ignore_errors=True)
        return True

    def has_checkpoints(self) -> bool:
        return any((self.path / "checkpoints").glob("cell-*-g*.pt"))

    def write_summary(self, summary: Mapping[str, Any], name: str = SUMMARY_FILE) -> None:
        """``summary.json``, or a worker's ``summary-part-<rank>.json`` that the launcher merges."""
        text = json.dumps(summary, indent=2, sort_keys=True, default=float)
        with writing(self.path / name):
            atomic_write(self.path / name, lambda f: f.write(text + "\n"), binary=False)


class CheckpointInvalid(Exception):
    """A checkpoint file that cannot be trusted (missing digest, digest mismatch, unreadable)."""


def resume_points(available: Mapping[int, Sequence[int]]) -> dict[int, int]:
    """The newest generation every cell has a valid checkpoint of, so all cells continue from one
    consistent point; when the cells share none, each cell's newest (they then catch up)."""
    common = set.intersection(*(set(gens) for gens in available.values())) if available else set()
    if common:
        point = max(common)
        return {cell: point for cell in available}
    return {cell: max(gens) for cell, gens in available.items()}


def _legacy_refusal(path: Path, why: str) -> str:
    return (
        f"{path}: a checkpoint of the earlier layout (cell-NNNN.pt, before per-generation checkpoints) is "
        f"{why}: nothing was migrated; restore the file from a backup or move it out of checkpoints/"
    )


def _digest_path(checkpoint: Path) -> Path:
    return checkpoint.with_suffix(".sha256")


def file_sha256(path: Path) -> str:
    """SHA-256 (hex) of a file, read in 1 MiB blocks (checkpoints here, model weights in plugins)."""
    return file_digest(path, "sha256")


__all__ = [
    "METRICS_FILE",
    "RECIPE_FILE",
    "SUMMARY_FILE",
    "TIMINGS_FILE",
    "CheckpointInvalid",
    "RunDirectory",
    "atomic_write",
    "resume_points",
    "writing",
]
