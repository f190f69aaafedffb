"""Checkpoint generations (verified writes, fallback to the newest valid one, one consistent resume point)
and write failures in the run directory (a full disk at each writer stops the run with one line, loses
nothing, and the run resumes once space is back)."""

from __future__ import annotations

import builtins
import contextlib
import errno
import fnmatch
import json
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from evogan.cli import _attach_commands, cli
from evogan.engine.rundir import RunDirectory, resume_points
from evogan.errors import RunFailure, UserError
from evogan.hookspecs import hookimpl
from evogan.runtime.single import prepare, run_in_process

_attach_commands()


def run(path: Path, *overrides: str) -> Path:
    prepared = prepare(path, overrides=overrides)
    run_in_process(prepared)
    return prepared.run_dir.path


def metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_resume_points_prefer_one_generation_every_cell_shares() -> None:
    assert resume_points({0: [10, 5], 1: [5, 0], 2: [10, 5]}) == {0: 5, 1: 5, 2: 5}
    assert resume_points({0: [15, 10], 1: [5]}) == {0: 15, 1: 5}  # nothing shared: each its newest


def test_only_the_newest_checkpoints_are_kept_each_with_its_digest(tiny_recipe) -> None:
    run_dir = run(tiny_recipe(generations=4), "run.keep_checkpoints=2")
    directory = RunDirectory(run_dir)
    for cell in range(4):
        assert directory.checkpoint_generations(cell) == [4, 3]
        assert directory.valid_generations(cell) == [4, 3]
    assert not [p for p in (run_dir / "checkpoints").iterdir() if p.name.startswith(".")]


def test_checkpoints_of_many_cells_are_kept_from_one_listing_of_the_folder(tmp_path: Path, monkeypatch) -> None:
    """A save drops the cell's older checkpoints without listing the folder again (a glob per cell and
    save made a 64x64 grid's checkpoint quadratic in its cells), keeps exactly the newest ``keep`` after a
    timeline was discarded, and the one-scan listing agrees with the per-cell one."""
    (tmp_path / "checkpoints").mkdir()
    directory = RunDirectory(tmp_path)
    (tmp_path / "checkpoints" / "cell-0001-gabc.pt").write_bytes(b"")  # not a checkpoint name: ignored
    scans: list[object] = []
    real_scandir = os.scandir
    monkeypatch.setattr(os, "scandir", lambda path: scans.append(path) or real_scandir(path))
    monkeypatch.setattr(Path, "glob", lambda *args: pytest.fail("a save listed the folder by glob"))
    for generation in (10, 20, 30):
        for cell in range(40):
            directory.save_checkpoint(cell, {"format": 1, "cell": cell, "generation": generation}, keep=3)
    assert len(scans) == 1
    monkeypatch.undo()
    listed = directory.all_checkpoint_generations()
    assert listed == {cell: directory.checkpoint_generations(cell) for cell in range(40)}
    assert listed == {cell: [30, 20, 10] for cell in range(40)}
    directory.discard_checkpoints_after(0, 20)  # a resume from 20 abandons 30
    directory.save_checkpoint(0, {"format": 1, "cell": 0, "generation": 40}, keep=3)
    assert directory.checkpoint_generations(0) == [40, 20, 10]
    directory.save_checkpoint(0, {"format": 1, "cell": 0, "generation": 50}, keep=3)
    assert directory.valid_generations(0) == [50, 40, 20]
    assert directory.resume_points(range(40)) == dict.fromkeys(range(40), 20)  # the one all cells share


@pytest.mark.parametrize("damage", ["truncated", "garbage", "no digest"])
def test_a_damaged_newest_checkpoint_falls_back_to_the_previous_with_one_warning(
    tiny_recipe, damage: str, capfd: pytest.CaptureFixture[str]
) -> None:
    path = tiny_recipe(seed=4, generations=4)
    straight = run(path)
    run_dir = run(path, "run.generations=3")
    newest = run_dir / "checkpoints" / "cell-0001-g000003.pt"
    if damage == "truncated":
        newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])
    elif damage == "garbage":
        newest.write_bytes(os.urandom(2048))
    else:
        newest.with_suffix(".sha256").unlink()
    capfd.readouterr()
    run_in_process(prepare(None, resume_dir=run_dir, overrides=["run.generations=4"]))
    warnings = [line for line in capfd.readouterr().err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and str(newest) in warnings[0]
    # Every cell went back to generation 2, the newest all of them share, and the run reads as one.
    assert metrics(run_dir) == metrics(straight)


def test_no_valid_checkpoint_for_a_cell_is_one_error_line(tiny_recipe) -> None:
    run_dir = run(tiny_recipe(generations=2))
    for generation in (1, 2):
        (run_dir / "checkpoints" / f"cell-0002-g00000{generation}.pt").write_bytes(b"not a checkpoint")
    result = invoke("run", "--resume", str(run_dir), "--quiet")
    assert result.exit_code == 2 and "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and "no valid checkpoint for cell(s) 2" in errors[0]
    with pytest.raises(UserError, match="no valid checkpoint for cell"):
        run_in_process(prepare(None, resume_dir=run_dir))


def test_evaluate_uses_the_newest_valid_checkpoints(tiny_recipe) -> None:
    run_dir = run(tiny_recipe(generations=2))
    (run_dir / "checkpoints" / "cell-0000-g000002.pt").write_bytes(b"damaged")
    result = invoke("evaluate", str(run_dir), "--json")
    assert result.exit_code == 0
    scores = json.loads(result.output[result.output.index("{") :])
    assert {cell["generation"] for cell in scores["cells"].values()} == {1}


def test_evaluate_scores_an_earlier_generation_and_along_the_run(tiny_recipe) -> None:
    import evogan

    run_dir = run(tiny_recipe(generations=3), "run.checkpoint_every=1", "run.keep_checkpoints=5")
    along = invoke("evaluate", str(run_dir), "--along", "--json")
    assert along.exit_code == 0, along.output
    rows = json.loads(along.stdout[along.stdout.index("{") :])["along"]
    assert [row["generation"] for row in rows] == [1, 2, 3]
    assert [row["steps"] for row in rows] == [4, 8, 12]  # generator steps: the tiny recipe's 4 batches each
    # each row is what scoring that generation alone gives, and the newest is the plain evaluate
    for generation in (1, 3):
        once = invoke("evaluate", str(run_dir), "--generation", str(generation), "--json")
        scores = json.loads(once.output[once.output.index("{") :])
        assert {cell["generation"] for cell in scores["cells"].values()} == {generation}
        row = rows[generation - 1]
        assert row["best_mixture"] == scores["best_mixture"]
        assert row["mean_over_cells"] == scores["mean_over_cells"]
    trained = evogan.load(run_dir)
    assert trained.generations == [1, 2, 3]
    assert {cell.generation for cell in trained.at(2).cells} == {2}
    missing = invoke("evaluate", str(run_dir), "--generation", "7")
    assert missing.exit_code == 2 and "Traceback" not in missing.output
    assert "generation 7 has no checkpoint of every cell (generations every cell kept: 1, 2, 3)" in missing.output
    both = invoke("evaluate", str(run_dir), "--along", "--generation", "1")
    assert both.exit_code == 2 and "--along" in both.output


# ------------------------------------------------------------------------------------------ write failures
def fail_writes(monkeypatch: pytest.MonkeyPatch, pattern: str, after: int = 0) -> None:
    """Write-opens of a path matching ``pattern`` fail as on a full disk, after the first ``after``."""
    real_os_open, real_open = os.open, builtins.open
    allowed = [after]

    def refuse(path: object) -> None:
        if fnmatch.fnmatch(os.fspath(path), pattern):  # type: ignore[arg-type]
            allowed[0] -= 1
            if allowed[0] >= 0:
                return
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), os.fspath(path))  # type: ignore[arg-type]

    def os_open(path, flags, *args, **kwargs):  # type: ignore[no-untyped-def]
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND):
            refuse(path)
        return real_os_open(path, flags, *args, **kwargs)

    def open_(file, mode="r", *args, **kwargs):  # type: ignore[no-untyped-def]
        if isinstance(file, str | os.PathLike) and any(c in mode for c in "wax+"):
            refuse(file)
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr(os, "open", os_open)
    monkeypatch.setattr(builtins, "open", open_)


@pytest.mark.parametrize(
    ("writer", "pattern", "after", "named"),
    [  # each fails from generation 2 on (the first generation's writes go through)
        ("metrics", "*/metrics.jsonl", 4, "metrics.jsonl"),
        ("timings", "*/timings.jsonl", 4, "timings.jsonl"),
        ("cell log", "*/logs/cell-0001.log", 1, "cell-0001.log"),
        ("checkpoint", "*/.cell-0002-g000002.pt.*", 0, "cell-0002-g000002.pt"),
        ("sample picture", "*/samples/gen-0002-cell-0003.png", 0, "gen-0002-cell-0003.png"),
        ("plot", "*/plots/*", 0, "plots/metrics.png"),
        ("summary", "*/.summary.json.*", 0, "summary.json"),
    ],
)
def test_a_full_disk_stops_the_run_with_one_line_and_the_run_resumes(
    tiny_recipe, monkeypatch: pytest.MonkeyPatch, writer: str, pattern: str, after: int, named: str
) -> None:
    path = tiny_recipe(seed=2, generations=3)
    straight = run(path)
    output = path.parent / f"out-{writer.replace(' ', '-')}"
    with monkeypatch.context() as patch:
        fail_writes(patch, pattern, after)
        result = invoke("run", str(path), "--output-dir", str(output), "--set", "run.samples_every=1", "--quiet")
    assert result.exit_code == 1 and "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.strip()]
    assert len(errors) == 1 and "No space left on device" in errors[0], result.output
    assert f"{named}: cannot write" in errors[0]
    (run_dir,) = output.iterdir()
    directory = RunDirectory(run_dir)
    assert all(directory.valid_generations(cell) for cell in range(4))  # earlier checkpoints intact
    assert not [p for p in (run_dir / "checkpoints").iterdir() if p.name.startswith(".")]
    resumed = invoke("run", "--resume", str(run_dir), "--quiet")
    assert resumed.exit_code == 0, resumed.output
    assert metrics(run_dir) == metrics(straight)


def test_a_checkpoint_write_failure_keeps_the_previous_checkpoint(tiny_recipe, monkeypatch) -> None:
    run_dir = run(tiny_recipe(generations=1))
    directory = RunDirectory(run_dir)
    state = directory.load_checkpoint(0, 1)
    fail_writes(monkeypatch, "*/.cell-0000-g000002.pt.*")
    with pytest.raises(RunFailure, match=r"cell-0000-g000002.pt.*No space left on device"):
        directory.save_checkpoint(0, {**state, "generation": 2}, keep=1)
    assert directory.valid_generations(0) == [1]


# ------------------------------------------------------------------------------------------ a real small disk
@pytest.fixture
def small_disk(tmp_path: Path):
    """A 4 MiB tmpfs (root only; skipped where mounting is not allowed)."""
    import subprocess

    mount = tmp_path / "disk"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


class Saboteur:
    """After generation 2 of cell 0, fill the disk (or make it read-only)."""

    def __init__(self, mount: Path, how: str) -> None:
        self.mount, self.how = mount, how

    @hookimpl
    def evogan_generation_end(self, cell: int, generation: int) -> None:
        import subprocess

        if (cell, generation) != (0, 2):
            return
        if self.how == "read-only":
            subprocess.run(["mount", "-o", "remount,ro", str(self.mount)], check=True)
            return
        with open(self.mount / "filler", "wb", buffering=0) as handle:
            for chunk in (65536, 4096, 1):  # to the last byte
                with contextlib.suppress(OSError):
                    while True:
                        handle.write(b"\0" * chunk)


@pytest.mark.parametrize(("how", "cause"), [("full", "No space left on device"), ("read-only", "Read-only")])
def test_a_real_full_or_read_only_disk_stops_the_run_and_it_resumes(
    tiny_recipe, small_disk: Path, how: str, cause: str
) -> None:
    import subprocess

    from evogan.plugins import make_plugin_manager

    path = tiny_recipe(seed=9, generations=4)
    straight = run(path)
    prepared = prepare(
        path,
        overrides=[f'run.output_dir="{small_disk}"'],
        pm=make_plugin_manager(extra=[Saboteur(small_disk, how)]),
    )
    with pytest.raises(RunFailure, match=cause) as failure:
        run_in_process(prepared)
    assert str(prepared.run_dir.path) in str(failure.value) and "\n" not in str(failure.value)
    if how == "read-only":
        subprocess.run(["mount", "-o", "remount,rw", str(small_disk)], check=True)
    else:
        (small_disk / "filler").unlink()
    directory = RunDirectory(prepared.run_dir.path)
    assert all(directory.valid_generations(cell) for cell in range(4))
    run_in_process(prepare(None, resume_dir=prepared.run_dir.path))
    assert metrics(prepared.run_dir.path) == metrics(straight)


# ------------------------------------------------------------------------------------------ earlier layout
def to_earlier_layout(run_dir: Path) -> None:
    """Leave the run's checkpoints as runs before commit 688e58d did: checkpoints/cell-NNNN.pt, one per cell
    (the state of its last checkpoint, which that code wrote with the same torch.save), no digests."""
    directory = RunDirectory(run_dir)
    for cell in range(4):
        newest = directory.checkpoint_path(cell, directory.checkpoint_generations(cell)[0])
        os.replace(newest, run_dir / "checkpoints" / f"cell-{cell:04d}.pt")
    for path in (run_dir / "checkpoints").glob("cell-*-g*"):
        path.unlink()


def test_a_run_of_the_earlier_layout_is_migrated_on_resume_and_continues_exactly(
    tiny_recipe, capfd: pytest.CaptureFixture[str]
) -> None:
    path = tiny_recipe(seed=4, generations=4, varied=True)
    straight = run(path)
    run_dir = run(path, "run.generations=2")
    to_earlier_layout(run_dir)
    before = {p.name: p.read_bytes() for p in (run_dir / "checkpoints").iterdir()}
    # What an interrupted migration leaves: a digest beside the old file, which stays to migrate again.
    (run_dir / "checkpoints" / "cell-0000-g000002.sha256").write_text("half\n")
    capfd.readouterr()
    run_in_process(prepare(None, resume_dir=run_dir, overrides=["run.generations=4"]))
    warnings = [line for line in capfd.readouterr().err.splitlines() if line.startswith("warning:")]
    assert warnings == [
        f"warning: {run_dir / 'checkpoints'}: migrated 4 checkpoint(s) of the earlier layout (cell-NNNN.pt) "
        "to cell-NNNN-gGGGGGG.pt with digests"
    ]
    assert metrics(run_dir) == metrics(straight)
    directory = RunDirectory(run_dir)
    for cell in range(4):  # the migrated generation is kept, with its digest, beside the new ones
        assert directory.valid_generations(cell) == [4, 3, 2]
        migrated = directory.checkpoint_path(cell, 2)
        assert migrated.read_bytes() == before[f"cell-{cell:04d}.pt"]
    assert not list((run_dir / "checkpoints").glob("cell-[0-9][0-9][0-9][0-9].pt"))


def test_evaluate_migrates_a_run_of_the_earlier_layout(tiny_recipe, tmp_path: Path) -> None:
    original = run(tiny_recipe(generations=2))
    earlier = tmp_path / "earlier"
    shutil.copytree(original, earlier)
    to_earlier_layout(earlier)
    expected, result = invoke("evaluate", str(original), "--json"), invoke("evaluate", str(earlier), "--json")
    assert result.exit_code == 0 and "migrated 4 checkpoint(s) of the earlier layout" in result.output
    scores = [json.loads(r.output[r.output.index("{") :])["cells"] for r in (expected, result)]
    assert scores[0] == scores[1]
    assert RunDirectory(earlier).valid_generations(0) == [2]


@pytest.mark.parametrize("damage", ["garbage", "another cell's"])
def test_a_damaged_checkpoint_of_the_earlier_layout_is_one_line_and_nothing_moves(tiny_recipe, damage: str) -> None:
    run_dir = run(tiny_recipe(generations=2))
    to_earlier_layout(run_dir)
    bad = run_dir / "checkpoints" / "cell-0002.pt"
    if damage == "garbage":
        bad.write_bytes(os.urandom(2048))
    else:
        bad.write_bytes((run_dir / "checkpoints" / "cell-0001.pt").read_bytes())
    before = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    for command in (("run", "--resume", str(run_dir), "--quiet"), ("evaluate", str(run_dir))):
        result = invoke(*command)
        assert result.exit_code == 2 and "Traceback" not in result.output
        errors = [line for line in result.output.splitlines() if line.strip()]
        assert len(errors) == 1 and errors[0].startswith(f"error: {bad}: a checkpoint of the earlier layout")
        assert "nothing was migrated" in errors[0]
        assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == before
