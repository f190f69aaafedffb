"""The evogan-tensorboard plugin: runs logged through the lifecycle hooks, read back with TensorBoard's
own event reader, in one process and with two workers (each cell's events exactly once)."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from evogan.plugins import PLUGINS_ENV, make_plugin_manager
from evogan.runtime.single import prepare, run_in_process
from evogan.testing import write_tiny_recipe

evogan_tensorboard = pytest.importorskip(
    "evogan_tensorboard", reason="install it: pip install -e plugins/evogan-tensorboard"
)
event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")

ADAPT = '{use="adapt-relax", density_g=0.5, density_d=0.5, br_freq=4, da_iters=16, d_interval=4, g_interval=100}'
GENERATIONS = 4


@pytest.fixture(autouse=True)
def plugin(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loaded by module name in every process of the run (workers inherit the environment), whether or not
    its distribution is installed; an installed entry point is not registered twice."""
    monkeypatch.setenv(PLUGINS_ENV, "evogan_tensorboard")


def read(directory: Path) -> Any:  # an EventAccumulator
    accumulator = event_accumulator.EventAccumulator(str(directory), size_guidance={"scalars": 0, "images": 0})
    accumulator.Reload()
    return accumulator


def steps(accumulator: Any, tag: str) -> list[int]:
    return [event.step for event in accumulator.Scalars(tag)]


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_scalars_flatten_a_record_and_skip_bookkeeping() -> None:
    record = {
        "cell": 3, "generation": 2, "g_loss": 0.5, "replaced": {"generator": True}, "staleness": {"1": {"batches": 0}},
        "mixture": {"1": 0.25, "3": 0.75}, "mixture_metrics": {"fid": 40.0}, "sparsity": {"br": 0.5}, "exchanges": 1,
    }
    assert dict(evogan_tensorboard.scalars(record)) == {
        "g_loss": 0.5, "mixture_weights/cell-0001": 0.25, "mixture_weights/cell-0003": 0.75,
        "mixture_metrics/fid": 40.0, "sparsity/br": 0.5, "exchanges": 1.0,
    }


def test_png_size_reads_the_header_and_refuses_other_files() -> None:
    header = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + (640).to_bytes(4, "big") + (480).to_bytes(4, "big")
    assert evogan_tensorboard.png_size(header) == (480, 640)
    with pytest.raises(ValueError):
        evogan_tensorboard.png_size(b"GIF89a" + bytes(20))


def test_best_by_generation_takes_the_lowest_score_then_the_lowest_cell() -> None:
    rows = [
        {"cell": 1, "generation": 1, "mixture_score": 0.5},
        {"cell": 0, "generation": 1, "mixture_score": 0.5},
        {"cell": 0, "generation": 2, "mixture_score": 0.4},
        {"cell": 1, "generation": 2, "mixture_score": 0.3},
    ]
    best = evogan_tensorboard.best_by_generation(rows)
    assert {g: r["cell"] for g, r in best.items()} == {1: 0, 2: 1}
    # a run whose recipe disables the mixture scores each cell's best individual (``best_score``)
    rows = [{"cell": r["cell"], "generation": r["generation"], "best_score": r["mixture_score"]} for r in rows]
    best = evogan_tensorboard.best_by_generation(rows)
    assert {g: r["cell"] for g, r in best.items()} == {1: 0, 2: 1}
    # read as a stream in file order (a resumed run's generations interleave); a NaN score ranks last
    rows = [{"cell": 2, "generation": 2, "best_score": 0.1}, {"cell": 1, "generation": 2, "best_score": math.nan},
            {"cell": 0, "generation": 1, "best_score": math.nan}, {"cell": 0, "generation": 2, "best_score": 0.5}]
    best = evogan_tensorboard.best_by_generation(iter(rows))
    assert {g: r["cell"] for g, r in best.items()} == {1: 0, 2: 2} and list(best) == [1, 2]


def test_a_failed_write_stops_the_run_with_one_line_naming_the_event_file(tmp_path: Path) -> None:
    from evogan.errors import RunFailure

    (tmp_path / "tensorboard").write_text("a file where the folder should be")
    writer = evogan_tensorboard.EventWriter(tmp_path / "tensorboard" / "cell-0000", first_step=1)
    writer.scalars(1, [("g_loss", 0.5)])
    with pytest.raises(RunFailure, match=r"tensorboard/cell-0000/events\.out\.tfevents\.\S+: cannot write: ") as error:
        writer.flush()
    assert "\n" not in str(error.value)


def test_one_process_logs_every_cell_generation_samples_and_sparsity(tmp_path: Path) -> None:
    recipe = write_tiny_recipe(
        tmp_path, generations=GENERATIONS, overrides=["run.samples_every=2", f"problem.sparsity={ADAPT}"]
    )
    prepared = prepare(recipe, pm=make_plugin_manager())
    assert prepared.pm.get_plugin("evogan_tensorboard") or prepared.pm.get_plugin("tensorboard")
    run_in_process(prepared)
    run_dir = prepared.run_dir.path
    board = run_dir / "tensorboard"
    assert sorted(p.name for p in board.iterdir()) == ["best", "cell-0000", "cell-0001", "cell-0002", "cell-0003"]
    metrics = records(run_dir)
    for cell in range(4):
        accumulator = read(board / f"cell-{cell:04d}")
        tags = set(accumulator.Tags()["scalars"])
        assert {"g_loss", "d_loss", "lr_g", "mixture_score", "mixture_metrics/tvd"} <= tags
        assert {"sparsity/density_g", "sparsity/density_d", "sparsity/br"} <= tags
        assert steps(accumulator, "g_loss") == list(range(1, GENERATIONS + 1))
        own = [r for r in metrics if r["cell"] == cell]
        assert [e.value for e in accumulator.Scalars("mixture_score")] == pytest.approx(
            [r["mixture_score"] for r in own]
        )
        last = own[-1]
        for neighbour, weight in last["mixture"].items():
            (event,) = [e for e in accumulator.Scalars(f"mixture_weights/cell-{int(neighbour):04d}") if e.step == 4]
            assert event.value == pytest.approx(weight)
        assert accumulator.Scalars("sparsity/density_d")[-1].value == pytest.approx(last["sparsity"]["density_d"])
        images = accumulator.Images("samples")
        assert [i.step for i in images] == [2, 4]
        picture = prepared.run_dir.picture_path("gen-0004", cell).read_bytes()
        assert images[-1].encoded_image_string == picture and images[-1].width > 0

    best = read(board / "best")
    summary = json.loads((run_dir / "summary.json").read_text())
    scores = best.Scalars("best/mixture_score")
    assert [e.step for e in scores] == list(range(1, GENERATIONS + 1))
    for event in scores:
        assert event.value == pytest.approx(min(r["mixture_score"] for r in metrics if r["generation"] == event.step))
    assert best.Scalars("final/best_cell")[0].value == summary["best_cell"]
    assert best.Scalars("final/best/tvd")[0].value == pytest.approx(summary["best_mixture"]["tvd"])  # test stream
    validation = best.Scalars("final/best_validation/tvd")[0].value
    assert validation == pytest.approx(summary["best_mixture_validation"]["tvd"])
    means = summary["mean_over_cells"]
    assert best.Scalars("final/mean_over_cells/mixture/tvd")[0].value == pytest.approx(means["mixture"]["tvd"])
    assert best.Scalars("final/mean_over_cells/generator/tvd")[0].value == pytest.approx(means["generator"]["tvd"])
    for cell, scores in summary["cells"].items():
        tag = f"cell-{int(cell):04d}"
        assert best.Scalars(f"final/mixture_score/{tag}")[0].value == pytest.approx(scores["mixture_score"])
        held = best.Scalars(f"final/validation_mixture_score/{tag}")[0].value
        assert held == pytest.approx(scores["validation"]["mixture_score"])
    assert best.Images("final/best_samples")[0].step == GENERATIONS


def test_a_resumed_run_restarts_the_timeline_where_it_resumes(tmp_path: Path) -> None:
    """Resumed from generation 1 after generation 2 was logged: the cell writes a SessionLog.START at 2, so
    TensorBoard drops the abandoned generation 2 and keeps one event per step, the new one."""
    recipe = write_tiny_recipe(tmp_path, generations=2)
    first = prepare(recipe, pm=make_plugin_manager())
    run_in_process(first)
    run_dir = first.run_dir.path
    for path in (run_dir / "checkpoints").glob("*-g000002.*"):
        path.unlink()
    run_in_process(prepare(None, resume_dir=run_dir, overrides=["run.generations=3"], pm=make_plugin_manager()))
    accumulator = read(run_dir / "tensorboard" / "cell-0002")
    assert steps(accumulator, "g_loss") == [1, 2, 3]
    own = [r for r in records(run_dir) if r["cell"] == 2]
    assert [e.value for e in accumulator.Scalars("g_loss")] == pytest.approx([r["g_loss"] for r in own])
    assert steps(read(run_dir / "tensorboard" / "best"), "best/mixture_score") == [1, 2, 3]


@pytest.mark.slow
def test_two_workers_log_each_cells_events_exactly_once(tmp_path: Path) -> None:
    from evogan.runtime.launcher import launch

    recipe = write_tiny_recipe(tmp_path, generations=3, overrides=["run.samples_every=1"])
    prepared = prepare(recipe, overrides=["run.workers=2"], pm=make_plugin_manager())
    launch(prepared)
    board = prepared.run_dir.path / "tensorboard"
    for cell in range(4):
        accumulator = read(board / f"cell-{cell:04d}")
        assert steps(accumulator, "g_loss") == [1, 2, 3]
        assert [i.step for i in accumulator.Images("samples")] == [1, 2, 3]
        assert len(list((board / f"cell-{cell:04d}").glob("events.out.tfevents.*"))) == 1  # one process wrote it
    counts = Counter(e.step for e in read(board / "best").Scalars("best/mixture_score"))
    assert counts == {1: 1, 2: 1, 3: 1}


@pytest.mark.parametrize("seconds", [0.0, 1e9])
def test_events_are_flushed_when_due_and_at_the_end_all_of_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seconds: float
) -> None:
    """A cheap cell's generation should not open its event file every time: with a long interval the
    events reach the file with the cell's checkpoints (here only the last, at the run's end); with none,
    every generation; the curves are the same."""
    flushes: Counter[str] = Counter()
    flush = evogan_tensorboard.EventWriter.flush

    def counted(writer: Any) -> None:
        flushes[writer.path.parent.name] += bool(writer._pending)
        flush(writer)

    monkeypatch.setattr(evogan_tensorboard, "FLUSH_SECONDS", seconds)
    monkeypatch.setattr(evogan_tensorboard.EventWriter, "flush", counted)
    recipe = write_tiny_recipe(tmp_path, generations=GENERATIONS, overrides=["run.checkpoint_every=0"])
    prepared = prepare(recipe, pm=make_plugin_manager())
    run_in_process(prepared)
    cells = [f"cell-{cell:04d}" for cell in range(4)]
    assert [flushes[cell] for cell in cells] == [GENERATIONS if seconds == 0 else 1] * 4
    for cell in cells:
        assert steps(read(prepared.run_dir.path / "tensorboard" / cell), "g_loss") == list(range(1, GENERATIONS + 1))


def test_a_processs_event_files_sort_in_the_order_they_were_opened(tmp_path: Path) -> None:
    """TensorBoard reads a directory's event files in name order; a resumed cell's new file must come
    after its old one, also when the process's count of writers passes from 9 to 10 within one second."""
    writers = [evogan_tensorboard.EventWriter(tmp_path) for _ in range(12)]
    names = [writer.path.name for writer in writers]
    assert sorted(names) == names


def test_records_are_framed_as_tensorboards_own_writer_frames_them() -> None:
    """The checksums come from google-crc32c's C code; the bytes are those of tensorboard's pure-Python
    RecordWriter, whose reader checks both CRCs of every record."""
    import io

    from evogan_tensorboard import framed
    from tensorboard.summary.writer.record_writer import RecordWriter

    for data in (b"", b"x", bytes(range(256)) * 3):
        expected = io.BytesIO()
        RecordWriter(expected).write(data)
        assert framed(data) == expected.getvalue()
