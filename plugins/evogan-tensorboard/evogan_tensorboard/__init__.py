"""TensorBoard for evogan runs, built only on the lifecycle hooks (:mod:`evogan.hookspecs`).

Installed, it logs every run under ``RUN_DIR/tensorboard`` (``tensorboard --logdir RUN_DIR/tensorboard``):

- ``cell-0003/``: one event directory per cell, written by the process that runs the cell, so a run with
  ``--workers N`` logs each cell once. Each generation: every number of the cell's metrics record (losses,
  learning rates, ``mixture_score``, the mixture's metrics, neighbourhood fitness, timings, and
  ``sparsity/density_g``, ``density_d``, ``br``... when sparse) and the mixture weights
  (``mixture_weights/cell-0001``); the cell's sample picture every ``run.samples_every`` generations.
- ``best/``: written at the end of the run by the process that drives it: the best mixture score over the
  cells at each generation (``best/mixture_score``, ``best/cell``, the best cell's mixture metrics: the
  mixture ES's validation noise, as in ``metrics.jsonl``), and the final scores as ``summary.json`` reports
  them: on the test stream every cell's (``final/mixture_score/cell-0003``), the mixture chosen on the
  validation stream (``final/best/...``, ``final/best_cell``) and the means over the cells
  (``final/mean_over_cells/mixture/...``, ``.../generator/...``); beside them, labelled, the validation
  figures (``final/best_validation/...``, ``final/validation_mixture_score/cell-0003``); the chosen
  mixture's weights and its picture. A run whose recipe disables the mixture has no weights, and its
  scores are its cells' best individuals': ``best_score``, ``final/score/cell-0003``,
  ``final/validation_score/cell-0003``.

A resumed or restarted cell starts its event file with a ``SessionLog.START`` at its first generation, so
TensorBoard drops the events of the abandoned timeline after that step. tensorboard is imported when the
first event is written, not when evogan loads its plugins. A write that fails (full disk) stops the run
with one line naming the event file, as the engine's own writes do.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import math
import os
import shutil
import socket
import struct
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evogan import hookimpl

if TYPE_CHECKING:
    from evogan.engine.run import RunInfo

DIRECTORY = "tensorboard"
BEST = "best"
# Parts of a metrics record that are bookkeeping, not curves (staleness and drops per neighbour).
# A cell's events reach its file at most this long after they were logged (and at the run's end); what a
# killed worker had not flushed is lost, as with tensorboard's own writer (which waits 120 s).
FLUSH_SECONDS = 5.0
SKIPPED = frozenset({"cell", "generation", "exchange", "staleness", "dropped", "replaced"})


def cell_directory(cell: int) -> str:
    return f"cell-{cell:04d}"


def scalars(record: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, float]]:
    """``(tag, value)`` for every number in ``record``, nested tables joined with ``/``; the mixture's
    weights (``mixture``: cell -> weight) become ``mixture_weights/cell-0001``."""
    for key, value in record.items():
        if not prefix and key in SKIPPED:
            continue
        if not prefix and key == "mixture" and isinstance(value, Mapping):
            for cell, weight in value.items():
                yield f"mixture_weights/{cell_directory(int(cell))}", float(weight)
        elif isinstance(value, Mapping):
            yield from scalars(value, f"{prefix}{key}/")
        elif isinstance(value, int | float) and not isinstance(value, bool):
            yield f"{prefix}{key}", float(value)


def png_size(data: bytes) -> tuple[int, int]:
    """``(height, width)`` from a PNG's IHDR chunk (TensorBoard's image summary needs both)."""
    if data[:8] != b"\x89PNG\r\n\x1a\n" or len(data) < 24:
        raise ValueError("not a PNG file")
    width, height = struct.unpack(">II", data[16:24])
    return height, width


def framed(data: bytes) -> bytes:
    """One TFRecord, the framing of TensorBoard's event files: the length, its masked CRC-32C, the data,
    its masked CRC-32C. tensorboard's own writer computes the CRC in pure Python without TensorFlow (about
    0.2 ms an event: 6 % of a one-host sorting-network cell's generation); google-crc32c's C code takes
    under a microsecond."""
    header = struct.pack("<Q", len(data))
    return header + struct.pack("<I", masked_crc(header)) + data + struct.pack("<I", masked_crc(data))


def masked_crc(data: bytes) -> int:
    """TFRecord's masked CRC-32C (Castagnoli) of ``data``: rotated right by 15 bits, plus a constant."""
    import google_crc32c

    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


class EventWriter:
    """One TensorBoard event file, written synchronously by :meth:`flush` (tensorboard's own writer uses a
    background thread, whose failures no one would see): a write that fails stops the run with one line
    naming the file, as the engine's own writes do. Events wait in memory until a flush, which opens,
    appends and closes the file, so no file stays open between generations (a worker may be stopped at
    any time; a file system can be remounted). The hook flushes a cell's events once :data:`FLUSH_SECONDS`
    have passed since its last flush, with each of the cell's checkpoints (every process checkpoints its
    cells at their end) and at the run's end: a grid of cheap cells would otherwise open a
    file per cell and generation (a tenth of a sorting-network cell's generation)."""

    # One file per writer, even two in one process and second; zero-padded, as TensorBoard reads a run's
    # files in name order (an unpadded .10 came before .9, and a resumed timeline's events were dropped).
    _serial = itertools.count()

    def __init__(self, directory: Path, *, first_step: int | None = None) -> None:
        from tensorboard.compat.proto import event_pb2, summary_pb2

        self._event, self._summary = event_pb2, summary_pb2
        name = f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}.{os.getpid()}.{next(self._serial):06d}"
        self.path = directory / name
        self._pending: list[bytes] = []
        self.flushed = time.monotonic()  # when the pending events last went to the file
        self._add(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2"))
        if first_step is not None:  # TensorBoard discards what an earlier timeline logged from here on
            start = event_pb2.SessionLog(status=event_pb2.SessionLog.START)
            self._add(event_pb2.Event(wall_time=time.time(), step=first_step, session_log=start))

    def _add(self, event: Any) -> None:
        self._pending.append(event.SerializeToString())

    def _write(self, step: int, values: list[Any]) -> None:
        if values:
            summary = self._summary.Summary(value=values)
            self._add(self._event.Event(wall_time=time.time(), step=step, summary=summary))

    def scalars(self, step: int, values: Iterable[tuple[str, float]]) -> None:
        value = self._summary.Summary.Value
        self._write(step, [value(tag=tag, simple_value=number) for tag, number in values])

    def picture(self, step: int, tag: str, path: Path) -> None:
        """The PNG at ``path`` as it is (no decoding); nothing when the engine wrote none."""
        if not path.is_file():
            return
        data = path.read_bytes()
        height, width = png_size(data)
        image = self._summary.Summary.Image(height=height, width=width, colorspace=4, encoded_image_string=data)
        self._write(step, [self._summary.Summary.Value(tag=tag, image=image)])

    def flush(self) -> None:
        from evogan.engine.rundir import writing

        if not self._pending:
            return
        with writing(self.path):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("ab") as handle:
                handle.write(b"".join(map(framed, self._pending)))
        self._pending.clear()
        self.flushed = time.monotonic()

    def close(self) -> None:
        self.flush()


class TensorBoard:
    """The open writers of this process, one per (run directory, cell); cells may run in threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._writers: dict[tuple[Path, int], EventWriter] = {}

    def cell_writer(self, run: RunInfo, cell: int, generation: int) -> EventWriter:
        key = (run.run_dir.path, cell)
        with self._lock:
            if key not in self._writers:
                directory = run.run_dir.path / DIRECTORY / cell_directory(cell)
                self._writers[key] = EventWriter(directory, first_step=generation)
            return self._writers[key]

    def close(self, run_dir: Path | None = None) -> None:
        with self._lock:
            for key in [k for k in self._writers if run_dir is None or k[0] == run_dir]:
                self._writers.pop(key).close()

    def close_quietly(self) -> None:
        """At exit: every event was flushed already; a failure now has no run left to stop."""
        with contextlib.suppress(Exception):
            self.close()

    @hookimpl
    def evogan_generation_end(self, run: RunInfo, cell: int, generation: int, record: Mapping[str, Any]) -> None:
        writer = self.cell_writer(run, cell, generation)
        writer.scalars(generation, scalars(record))
        every = run.recipe.run.samples_every
        if every and generation % every == 0:
            writer.picture(generation, "samples", run.run_dir.picture_path(f"gen-{generation:04d}", cell))
        if time.monotonic() - writer.flushed >= FLUSH_SECONDS:
            writer.flush()

    @hookimpl
    def evogan_checkpoint(self, run: RunInfo, cell: int, generation: int, path: Path) -> None:
        # Every process checkpoints its cells at their end, but only one fires evogan_run_end, and a
        # worker process exits without atexit: a cell's events reach the file with its checkpoint.
        with self._lock:
            writer = self._writers.get((run.run_dir.path, cell))
        if writer is not None:
            writer.flush()

    @hookimpl
    def evogan_run_end(self, run: RunInfo, summary: Mapping[str, Any], interrupted: bool) -> None:
        self.close(run.run_dir.path)  # this process's cells are done
        if summary:
            write_best(run, summary)


def _scored(record: Mapping[str, Any]) -> str:
    """What a record scores: ``mixture`` (``mixture_score``, ``mixture_metrics``), or ``best`` (``best_score``,
    ``best_metrics``: the cell's best individual alone) where the recipe's mixture is disabled."""
    return "mixture" if "mixture_score" in record else "best"


def best_by_generation(records: Iterable[Mapping[str, Any]]) -> dict[int, Mapping[str, Any]]:
    """generation -> the record with the lowest ``mixture_score`` (or ``best_score``; ties: the lowest
    cell; NaN ranks last)."""

    def rank(record: Mapping[str, Any]) -> tuple[float, int]:
        score = float(record[f"{_scored(record)}_score"])
        return (math.inf if math.isnan(score) else score, int(record["cell"]))

    best: dict[int, Mapping[str, Any]] = {}
    for record in records:  # a stream: a long run's records need not fit in memory
        current = best.get(record["generation"])
        if current is None or rank(record) < rank(current):
            best[record["generation"]] = record
    return dict(sorted(best.items()))


def write_best(run: RunInfo, summary: Mapping[str, Any]) -> None:
    """``best/``, rewritten whole at each run end (a resumed run's covers the whole run)."""
    directory = run.run_dir.path / DIRECTORY / BEST
    shutil.rmtree(directory, ignore_errors=True)
    writer = EventWriter(directory)
    for generation, record in best_by_generation(run.run_dir.iter_metrics()).items():
        name = _scored(record)
        values = [(f"best/{name}_score", float(record[f"{name}_score"])), ("best/cell", float(record["cell"]))]
        values += [(f"best/{tag}", v) for tag, v in scalars(record.get(f"{name}_metrics", {}))]
        writer.scalars(generation, values)
    final = int(summary["generations"])
    best_cell = int(summary["best_cell"])
    cells = summary["cells"]
    values = [("final/best_cell", float(best_cell))]
    # Reported figures are the test stream's; the validation figures the choice was made on sit beside them.
    # What was chosen: the mixture, or the best individual where the mixture is disabled (``chosen``; summaries
    # before evogan 0.3 have only ``best_mixture``).
    chosen = summary.get("chosen") or {
        "test": summary["best_mixture"],
        "validation": summary.get("best_mixture_validation", {}),
    }
    values += [(f"final/best/{tag}", v) for tag, v in scalars(chosen["test"])]
    values += [(f"final/best_validation/{tag}", v) for tag, v in scalars(chosen["validation"])]
    for part, metrics in summary.get("mean_over_cells", {}).items():  # mixture, generator
        values += [(f"final/mean_over_cells/{part}/{tag}", v) for tag, v in scalars(metrics)]
    name = "mixture_score" if "mixture_score" in next(iter(cells.values())) else "score"
    values += [(f"final/{name}/{cell_directory(int(c))}", float(s[name])) for c, s in cells.items()]
    values += [
        (f"final/validation_{name}/{cell_directory(int(c))}", float(s["validation"][name]))
        for c, s in cells.items()
        if "validation" in s
    ]
    weights = cells[str(best_cell)].get("weights", {})
    values += [(f"final/best_weights/{cell_directory(int(c))}", float(w)) for c, w in weights.items()]
    writer.scalars(final, values)
    writer.picture(final, "final/best_samples", run.run_dir.picture_path("final-best", best_cell))
    writer.close()


# The entry point registers this module: its hooks are those of one TensorBoard per process.
_tensorboard = TensorBoard()
evogan_generation_end = _tensorboard.evogan_generation_end
evogan_checkpoint = _tensorboard.evogan_checkpoint
evogan_run_end = _tensorboard.evogan_run_end
atexit.register(_tensorboard.close_quietly)

__all__ = ["BEST", "DIRECTORY", "EventWriter", "TensorBoard", "best_by_generation", "cell_directory", "scalars"]
