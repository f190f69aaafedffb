"""Ctrl-C: the run finishes its generation, writes checkpoints, says how to resume, exits 130."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evogan.engine.rundir import RunDirectory

pytestmark = pytest.mark.slow


def test_ctrl_c_checkpoints_and_resumes(tiny_recipe, tmp_path: Path) -> None:
    recipe = tiny_recipe(generations=200)
    process = subprocess.Popen(
        [sys.executable, "-m", "evogan", "run", str(recipe), "--plain", "--set", "run.checkpoint_every=50"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    deadline = time.monotonic() + 120
    for line in process.stdout:
        if "generation 2/200 cell 3" in line:
            break
        assert time.monotonic() < deadline, "the run never reached generation 2"
    process.send_signal(signal.SIGINT)
    rest, _ = process.communicate(timeout=120)
    assert process.returncode == 130, rest
    assert "checkpoints written. Resume with" in rest
    (run_dir,) = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    summary = json.loads((run_dir / "summary.json").read_text())
    stopped_at = summary["generations"]
    assert summary["interrupted"] is True and stopped_at < 200
    for cell in range(4):
        # every cell finished the same generation
        assert RunDirectory(run_dir).checkpoint_generations(cell)[0] == stopped_at
    resumed = subprocess.run(
        [
            sys.executable,
            "-m",
            "evogan",
            "run",
            "--resume",
            str(run_dir),
            "--generations",
            str(stopped_at + 1),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads((run_dir / "summary.json").read_text())["generations"] == stopped_at + 1
