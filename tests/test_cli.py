"""The command line: exit codes, one-line errors, no traceback, nothing half-written."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

from evogan.cli import _attach_commands, cli

_attach_commands()


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_validate_ok_and_errors(tiny_recipe) -> None:
    path = tiny_recipe()
    ok = invoke("validate", str(path))
    assert ok.exit_code == 0 and "ok" in ok.output
    bad = invoke("validate", str(path), "--set", "selection.size=0")
    assert bad.exit_code == 2
    assert f"{path}: selection.size: must be >= 1" in bad.output
    assert "Traceback" not in bad.output


def test_run_writes_nothing_when_the_recipe_is_bad(tiny_recipe, tmp_path: Path) -> None:
    result = invoke("run", str(tiny_recipe()), "--set", "run.colour=1", "--quiet")
    assert result.exit_code == 2 and "run.colour: unknown key" in result.output
    assert not (tmp_path / "runs").exists()


def test_run_download_fetches_the_inception_weights_into_the_cache(
    tiny_recipe, tmp_path: Path, file_server: tuple[Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import hashlib

    from evogan_gan import image_metrics as im

    served, url = file_server
    payload = b"published bytes"
    (served / im.INCEPTION_FILE).write_bytes(payload)
    monkeypatch.setattr(im, "INCEPTION", im.Remote(url + im.INCEPTION_FILE, hashlib.sha256(payload).hexdigest()))
    monkeypatch.setenv("EVOGAN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("EVOGAN_DOWNLOAD", "0")  # restored after the test: --download sets it in this process
    path = tiny_recipe(overrides=['problem.metric={use="inception", samples=8}'])
    offline = invoke("run", str(path), "--quiet")
    assert offline.exit_code == 2 and "is not in the cache: run with --download" in offline.output
    result = invoke("run", str(path), "--quiet", "--download")
    # Fetched and checked, then refused for the toy's 2-D points: the weights are not the problem any more.
    assert result.exit_code == 2 and "metric inception scores 1- or 3-channel images" in result.output
    assert (tmp_path / "cache" / "weights" / im.INCEPTION_FILE).read_bytes() == payload


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "recipe not found"), ("[run\n", "invalid TOML"), ("x = 1\n", "x: unknown table")],
)
def test_bad_recipe_files(tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "r.toml"
    if content is not None:
        path.write_text(content)
    result = invoke("run", str(path), "--quiet")
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output


def test_unwritable_output_directory(tiny_recipe, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("a file where a directory should be")
    result = invoke("run", str(tiny_recipe()), "--output-dir", str(blocker / "runs"), "--quiet")
    assert result.exit_code == 2 and "output directory is not a directory" in result.output


def test_resume_errors(tmp_path: Path) -> None:
    assert "no such run directory" in invoke("run", "--resume", str(tmp_path / "nope")).output
    result = invoke("run", "--resume", str(tmp_path))
    assert result.exit_code == 2 and "not a run directory" in result.output
    assert invoke("run").exit_code == 2


def test_grid_and_seed_overrides_and_plain_output(tiny_recipe, tmp_path: Path) -> None:
    result = invoke("run", str(tiny_recipe(generations=1)), "--grid", "1x2", "--seed", "4", "--plain")
    assert result.exit_code == 0, result.output
    assert "torus 1x2" in result.output and "generation 1/1 cell 1:" in result.output
    assert invoke("run", str(tiny_recipe()), "--grid", "three").exit_code == 2


def test_plugins_and_components_listing() -> None:
    listing = json.loads(invoke("components", "selection", "--json").output)
    names = {item["name"]: item for item in listing["selection"]}
    assert names["tournament"]["options"]["size"]["default"] == 2
    assert names["linear_rank"]["plugin"] == "example"
    assert invoke("components", "nonsense").exit_code == 2
    plugins = json.loads(invoke("plugins", "--json").output)
    assert any(p["name"] == "evogan.builtin.topology" for p in plugins)


def test_live_view_renders_the_grid(tiny_recipe) -> None:
    from evogan.builtin.reporter import TerminalReporter
    from evogan.plugins import make_plugin_manager
    from evogan.runtime.single import prepare, run_in_process

    buffer = io.StringIO()
    console = Console(file=buffer, width=120, force_terminal=True, color_system=None)
    reporter = TerminalReporter(console, "live")
    pm = make_plugin_manager(extra=[reporter])
    run_in_process(prepare(tiny_recipe(generations=2), pm=pm, overrides=['problem.sparsity.use="static"']))
    text = buffer.getvalue()
    assert "cell-generations" in text and "mixture score" in text and "density G" in text
    assert "best mixture ensemble: cell" in text
    assert len(reporter.rows) == 4 and all(row["generation"] == 2 for row in reporter.rows.values())


def test_evaluate_and_sample_a_finished_run(tiny_recipe, tmp_path: Path) -> None:
    from evogan.runtime.single import prepare, run_in_process

    prepared = prepare(tiny_recipe(generations=2))
    summary = run_in_process(prepared)
    run_dir = prepared.run_dir.path
    result = invoke("evaluate", str(run_dir), "--json")
    assert result.exit_code == 0, result.output
    scores = json.loads(result.output)
    assert scores["best_cell"] == summary["best_cell"]
    assert scores["cells"]["0"]["mixture"] == summary["cells"]["0"]["mixture"]
    table = invoke("evaluate", str(run_dir))
    assert "best mixture ensemble" in table.output
    out = tmp_path / "pics" / "s.png"
    drawn = invoke("sample", str(run_dir), "-n", "50", "-o", str(out), "--cell", "1")
    assert drawn.exit_code == 0 and out.stat().st_size > 1000
    assert invoke("sample", str(run_dir), "--cell", "9").exit_code == 2


def test_evaluate_needs_checkpoints(tiny_recipe, tmp_path: Path) -> None:
    from evogan.runtime.single import prepare

    prepared = prepare(tiny_recipe(generations=1))  # created, never run: no checkpoints
    result = invoke("evaluate", str(prepared.run_dir.path))
    assert result.exit_code == 2 and "no checkpoints" in result.output


def test_a_run_that_fails_on_its_data_leaves_no_run_directory(tiny_recipe, tmp_path: Path) -> None:
    result = invoke("run", str(tiny_recipe()), "--quiet", "--set", "problem.batch_size=100000")
    assert result.exit_code == 2 and "problem.batch_size: 100000 exceeds the dataset's 512 samples" in result.output
    assert list((tmp_path / "runs").iterdir()) == []


# Runs the CLI in a fresh interpreter and prints the torch modules it imported; a finder on the meta path
# records which evogan or plugin line imported torch first, so a failure says where to look.
TORCH_PROBE = r"""
import json, runpy, sys, traceback

first = []

class Watch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" and not first:
            first.extend(f"{f.filename}:{f.lineno}" for f in traceback.extract_stack()[:-1]
                         if "importlib" not in f.filename and "<frozen" not in f.filename)
        return None

sys.meta_path.insert(0, Watch())
sys.argv = ["evogan", *sys.argv[1:]]
try:
    runpy.run_module("evogan", run_name="__main__")
except SystemExit as exit:
    code = exit.code
print(json.dumps({"code": code, "torch": "torch" in sys.modules, "first": first[-4:]}), file=sys.stderr)
"""


@pytest.mark.parametrize(
    "args",
    [["--help"], ["validate", "recipes/toy-ring.toml"], ["validate", "TINY"], ["plugins"], ["components"]],
)
def test_quick_commands_do_not_import_torch(args: list[str], tiny_recipe) -> None:
    """Reading recipes and listing plugins import no torch (about a second of start-up): the installed
    plugins (this repository's among them) are loaded as a user's run loads them."""
    root = Path(__file__).resolve().parents[1]
    args = [str(tiny_recipe()) if arg == "TINY" else arg for arg in args]
    done = subprocess.run(
        [sys.executable, "-c", TORCH_PROBE, *args],
        cwd=root,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    report = json.loads(done.stderr.strip().splitlines()[-1])
    assert report["code"] in (0, None), done.stderr
    assert not report["torch"], f"torch imported by: {report['first']}"


@pytest.mark.parametrize("agent_running", [False, True])
def test_an_error_exits_with_its_code_even_while_the_elastic_agent_thread_runs(agent_running: bool) -> None:
    # A lost node ends the launcher while torch's agent still runs in its thread; tearing the interpreter
    # down under it could abort in C++ (exit -6) instead of the error's code.
    program = textwrap.dedent(
        f"""
        import atexit, threading, time
        from evogan.cli_common import fail
        from evogan.errors import RunFailure
        from evogan.runtime import AGENT_THREAD
        if {agent_running}:
            threading.Thread(target=time.sleep, args=(600,), name=AGENT_THREAD, daemon=True).start()
        atexit.register(print, "teardown")
        print("before", flush=False)
        fail(RunFailure("node 10.0.0.2 has not been heard from for 10 s"))
        """
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    # with the agent running, no teardown (flushed first); without it, a normal exit
    assert done.stdout.split() == (["before"] if agent_running else ["before", "teardown"])
    assert "error: node 10.0.0.2 has not been heard from for 10 s" in done.stderr


def test_a_recipes_workers_above_the_cells_are_cut_with_a_note(tiny_recipe) -> None:
    path = tiny_recipe(generations=1, overrides=["run.workers=2"])
    result = invoke("run", str(path), "--grid", "1x1", "--plain")
    assert result.exit_code == 0, result.output
    notes = [line for line in result.output.splitlines() if line.startswith("note: run.workers")]
    assert notes == ["note: run.workers = 2 is more than the 1 cell(s) allow; running 1 (at most one worker per cell)"]
    (run_dir,) = (path.parent / "runs").iterdir()
    assert "workers = 1" in (run_dir / "recipe.toml").read_text()
    explicit = invoke("run", str(path), "--grid", "1x1", "--workers", "2", "--quiet")
    assert explicit.exit_code == 2
    assert "2 workers for 1 cells: at most one worker per cell (lower --workers" in explicit.output
