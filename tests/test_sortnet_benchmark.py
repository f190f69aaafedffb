"""benchmarks/sortnet.py --side-by-side: each seed's configurations run at the same time, one process
each, so the grid's cost per test against the panmictic population's is measured under one load."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_side_by_side_runs_a_seeds_configurations_at_once_in_their_own_run_directories(tmp_path: Path) -> None:
    pytest.importorskip("evogan_sortnet")
    command = [
        sys.executable, str(ROOT / "benchmarks" / "sortnet.py"), "--quick", "--side-by-side",
        "--log-dir", str(tmp_path / "logs"), "--output-dir", str(tmp_path / "runs"),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    (log,) = (tmp_path / "logs" / "sortnet").glob("*.jsonl")
    runs = [json.loads(line) for line in log.read_text().splitlines()]
    assert sorted(r["config"] for r in runs) == ["grid-3x3", "panmictic-9"] and {r["seed"] for r in runs} == {1}
    assert len({r["run_dir"] for r in runs}) == 2  # one run directory each, though they start in one second
    starts = [datetime.fromisoformat(r["started"].replace("Z", "+00:00")).timestamp() for r in runs]
    # at once: one after the other, the panmictic run would start after the grid's 10 s or so
    assert abs(starts[0] - starts[1]) <= 2
    row = next(line for line in done.stdout.splitlines() if line.startswith("| 8 |") and "grid-3x3 | 9 |" in line)
    assert re.fullmatch(r"\d+\.\d\d", row.split("|")[-3].strip())  # grid / panmictic per test, two decimals
