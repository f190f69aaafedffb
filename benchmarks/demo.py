"""The README's demo figures, recorded: run ``evogan run recipes/demo.toml`` as ``make demo`` does and log it.

One JSON line per run under ``benchmarks/logs/demo/<commit>.jsonl`` (see ``logs/README.md``): the reported
(test-stream) figures of the chosen mixture with its validation figures, the means over cells, every
cell's test figures, wall time and the machine's load. ``--summarise`` prints the README's figures from the
logs alone:

    .venv/bin/python benchmarks/demo.py              # one run of the shipped recipe (2 workers)
    .venv/bin/python benchmarks/demo.py --summarise  # every log under benchmarks/logs/demo/
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import LOGS, ROOT, append_log, git_commit, log_path, machine, read_logs

RECIPE = ROOT / "recipes" / "demo.toml"


def run_demo(extra: list[str]) -> dict[str, Any]:
    commit, dirty = git_commit()
    before = machine()
    with tempfile.TemporaryDirectory(prefix="evogan-demo-") as out:
        run_dir = Path(out) / "run"
        command = [sys.executable, "-m", "evogan", "run", str(RECIPE), "--plain", "--run-dir", str(run_dir), *extra]
        started = time.perf_counter()
        subprocess.run(command, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - started
        summary = json.loads((run_dir / "summary.json").read_text())
    best = str(summary["best_cell"])
    return {
        "script": "demo",
        "recipe": str(RECIPE.relative_to(ROOT)),
        "extra": extra,
        "commit": commit,
        "dirty": dirty,
        "best_cell": int(best),
        "test": {
            "best_mixture": summary["chosen"]["test"],
            "mean_over_cells": summary["mean_over_cells"],
            "cells": {c: {"mixture": s["mixture"], "generator": s["generator"]} for c, s in summary["cells"].items()},
        },
        "validation": {"best_mixture": summary["chosen"]["validation"]},
        "wall_s": round(wall, 1),
        "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": {**before, "load_end": machine()["load"]},
    }


def summarise(records: list[dict[str, Any]]) -> str:
    demos = [r for r in records if r.get("script") == "demo"]
    explored = [r for r in records if r.get("script") == "demo-exploration"]
    return "\n\n".join(part for part in (_demo_table(demos), _exploration_table(explored)) if part)


def _exploration_table(records: list[dict[str, Any]]) -> str:
    """The runs that chose the demo's networks: the recipe of their commit with ``set`` overrides."""
    if not records:
        return ""
    lines = ["| commit | grid | generations | overrides | test FID | classes | recall | validation FID |",
             "|---|---|---|---|---|---|---|---|"]
    for r in records:
        best = r["test"]["best_mixture"]
        lines.append(
            f"| {r['commit']} | {r['grid']} | {r['generations']} | {' '.join(r['set'])} | {best['fid']:.1f} "
            f"| {best['classes_covered']:.0f} | {best['recall']:.3f} | {r['validation']['best_mixture']['fid']:.1f} |"
        )
    return "\n".join(lines)


def _demo_table(records: list[dict[str, Any]]) -> str:
    if not records:
        return ""
    lines = ["| commit | best cell | test FID | test TVD | classes | validation FID | mean over cells: mixture FID "
             "| generator FID | wall s | load |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        best, mean = r["test"]["best_mixture"], r["test"]["mean_over_cells"]
        lines.append(
            f"| {r['commit']}{'-dirty' if r['dirty'] else ''} | {r['best_cell']} | {best['fid']:.1f} "
            f"| {best['tvd']:.3f} "
            f"| {best.get('classes_covered', 0):.0f} | {r['validation']['best_mixture']['fid']:.1f} "
            f"| {mean['mixture']['fid']:.1f} | {mean['generator']['fid']:.1f} | {r['wall_s']:.0f} "
            f"| {r['machine']['load'][0]:.1f}-{r['machine']['load_end'][0]:.1f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--summarise", nargs="*", type=Path, default=None, help="logs (default: all)")
    parser.add_argument("--set", nargs="*", default=[], help="extra `evogan run` arguments, e.g. --set run.workers=1")
    args = parser.parse_args()
    if args.summarise is not None:
        print(summarise(read_logs(args.summarise or [LOGS / "demo"])))
        return
    record = run_demo([arg for override in args.set for arg in ("--set", override)])
    append_log(log_path("demo"), record)
    print(summarise([record]))


if __name__ == "__main__":
    main()
