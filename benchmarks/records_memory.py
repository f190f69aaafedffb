"""Peak memory and time of a run's end and of a resume on a long run's records.

    .venv/bin/python benchmarks/records_memory.py --megabytes 300
    .venv/bin/python benchmarks/records_memory.py --megabytes 300 --tree /tmp/old-checkout --tree .
    .venv/bin/python benchmarks/records_memory.py --during 100 3000 --tree /tmp/old-checkout --tree .

A long run of a cheap problem writes hundreds of MB of ``metrics.jsonl`` (a 5x5 sorting-network run of
34,500 generations: 738 MB); its end reads them back for the summary and the plots, a resume for the
logbooks and to drop records newer than the checkpoints. This makes a real 5x5 sorting-network run of
two generations, repeats its last generation's records as generations 3, 4, ... until the file reaches
``--megabytes``, then, for each source tree in a fresh interpreter (``PYTHONPATH=TREE``), times and measures
the peak resident memory (``ru_maxrss``) of the run's end (``write_summary``: summary.json, the divergence
summary, plots/metrics.png and plots/grid.png) and of the records' rewrite a resume makes
(``truncate_records``) on a copy of the run. The table's ``MB over start`` is the peak less the interpreter's
resident memory before the step (torch, the recipe and the problem loaded). ``--during SHORT LONG``
measures instead what a run holds while it runs: the peak at the last generation's end of a 5x5 run of
SHORT and of LONG generations, and the growth per cell-generation between them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

STEP = r"""
import json, resource, shutil, sys, time
from pathlib import Path
from evogan import recipe as recipes
from evogan.engine.run import build_topology, write_summary
from evogan.engine.rundir import RunDirectory
from evogan.plugins import make_plugin_manager
from evogan.registry import Registries

source, step = Path(sys.argv[1]), sys.argv[2]
run_dir = RunDirectory.open_existing(source)
recipe = recipes.load(run_dir.recipe_path, Registries.from_plugin_manager(make_plugin_manager()))
summary = json.loads((source / "summary.json").read_text())
start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
began = time.perf_counter()
if step == "end":
    write_summary(run_dir, recipe, build_topology(recipe), summary["cells"], False, summary.get("problem", {}), "host")
else:
    run_dir.truncate_records({cell: 10**9 for cell in range(25)})
seconds = time.perf_counter() - began
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
import evogan
print(json.dumps({"seconds": seconds, "start_mb": start / 1024, "peak_mb": peak / 1024, "tree": evogan.__file__}))
"""


DURING = r"""
import json, resource, sys
from pathlib import Path
from evogan import hookimpl
from evogan.plugins import make_plugin_manager
from evogan.runtime.single import prepare, run_in_process

recipe, output, generations = sys.argv[1], sys.argv[2], int(sys.argv[3])


class Watch:
    peak = 0.0

    @hookimpl
    def evogan_generation_end(self, record):
        if record["generation"] == generations and record["cell"] == 24:  # the last cell's last record
            self.peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


watch = Watch()
overrides = [f"run.generations={generations}", f"run.output_dir={json.dumps(output)}", "run.workers=1",
             "run.samples_every=0", "run.checkpoint_every=0", "run.threads=1", "problem.inputs=12",
             "problem.prefix_layers=0", "problem.comparators=60"]
run_in_process(prepare(Path(recipe), overrides=overrides, pm=make_plugin_manager(extra=[watch])))
import evogan
print(json.dumps({"peak_mb": watch.peak, "tree": evogan.__file__}))
"""


def tree_env(tree: Path) -> dict[str, str]:
    """The environment that imports evogan and the bundled plugins (TensorBoard, sortnet) from ``tree``."""
    paths = [str(tree), *(str(p) for p in sorted((tree / "plugins").glob("evogan-*")))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "OMP_NUM_THREADS": "1"}


def during(tree: Path, generations: int, scratch: Path) -> dict[str, float]:
    """The peak resident memory of a 5x5 sorting-network run (12 inputs) at its last generation's end,
    before the run's end reads anything back."""
    env = tree_env(tree)
    output = scratch / f"during-{generations}"
    done = subprocess.run(
        [sys.executable, "-c", DURING, str(ROOT / "recipes" / "sortnet.toml"), str(output), str(generations)],
        env=env,
        capture_output=True,
        text=True,
        cwd=scratch,
    )
    shutil.rmtree(output, ignore_errors=True)
    if done.returncode != 0:
        raise SystemExit(f"{tree}: the run failed: {done.stderr.strip().splitlines()[-1:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["tree"].startswith(str(tree)), f"measured {result['tree']}, not {tree}"
    return result


def make_run(directory: Path) -> Path:
    run_dir = directory / "sortnet"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "evogan",
            "run",
            str(ROOT / "recipes" / "sortnet.toml"),
            "--generations",
            "2",
            "--run-dir",
            str(run_dir),
            "--set",
            "run.workers=1",
        ],
        check=True,
        capture_output=True,
        cwd=ROOT,
    )
    return run_dir


def inflate(run_dir: Path, megabytes: float) -> tuple[int, int]:
    """Repeat the last generation's records as later generations; return (generations, bytes)."""
    path = run_dir / "metrics.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines()
    last = [json.loads(line) for line in lines if json.loads(line)["generation"] == 2]
    size, generation = path.stat().st_size, 2
    with open(path, "a", encoding="utf-8") as handle:
        while size < megabytes * 1e6:
            generation += 1
            for record in last:
                line = json.dumps({**record, "generation": generation}, sort_keys=True, separators=(",", ":")) + "\n"
                handle.write(line)
                size += len(line)
    return generation, size


def measure(tree: Path, run_dir: Path, step: str, scratch: Path) -> dict[str, float]:
    copy = scratch / f"copy-{step}"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(run_dir, copy)
    env = tree_env(tree)
    # run from the scratch folder: ``-c`` puts the working directory first on sys.path, before PYTHONPATH
    done = subprocess.run(
        [sys.executable, "-c", STEP, str(copy), step], env=env, capture_output=True, text=True, cwd=scratch
    )
    shutil.rmtree(copy, ignore_errors=True)
    if done.returncode != 0:
        return {"error": done.returncode, "stderr": done.stderr.strip().splitlines()[-1:]}  # type: ignore[dict-item]
    return json.loads(done.stdout.strip().splitlines()[-1])


def commit(tree: Path) -> str:
    done = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(
        ["git", "-C", str(tree), "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True
    ).stdout.strip()
    return (done.stdout.strip() or str(tree)) + ("-dirty" if dirty else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--megabytes", type=float, default=300.0, help="size of the inflated metrics.jsonl")
    parser.add_argument(
        "--tree", type=Path, action="append", help="a source tree to measure (repeatable; default: this one)"
    )
    parser.add_argument(
        "--during",
        type=int,
        nargs=2,
        metavar=("SHORT", "LONG"),
        help="instead: the peak memory at the last generation's end of a 5x5 run of SHORT and of LONG generations",
    )
    args = parser.parse_args()
    trees = [tree.resolve() for tree in args.tree or [ROOT]]
    if args.during:
        short, long = args.during
        print(
            f"5x5 sorting networks, 12 inputs, one process ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
            f"load {os.getloadavg()[0]:.1f})"
        )
        print(f"| tree | peak MB at generation {short} | at generation {long} | growth, KB per cell-generation |")
        print("|---|---|---|---|")
        with tempfile.TemporaryDirectory(prefix="records-memory-") as scratch:
            for tree in trees:
                a, b = (during(tree, g, Path(scratch))["peak_mb"] for g in (short, long))
                print(f"| {commit(tree)} | {a:.0f} | {b:.0f} | {(b - a) * 1024 / (25 * (long - short)):.2f} |")
        return
    with tempfile.TemporaryDirectory(prefix="records-memory-") as scratch:
        run_dir = make_run(Path(scratch))
        generations, size = inflate(run_dir, args.megabytes)
        print(
            f"metrics.jsonl: {size / 1e6:.0f} MB, 25 cells x {generations} generations "
            f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load {os.getloadavg()[0]:.1f})"
        )
        print("| tree | step | seconds | peak MB | MB over start |")
        print("|---|---|---|---|---|")
        for tree in trees:
            for step in ("end", "resume rewrite"):
                result = measure(tree, run_dir, step.split()[0], Path(scratch))
                if "error" in result:
                    print(f"| {commit(tree)} | {step} | failed: {result['stderr']} | | |")
                    continue
                assert result["tree"].startswith(str(tree)), f"measured {result['tree']}, not {tree}"
                print(
                    f"| {commit(tree)} | {step} | {result['seconds']:.1f} | {result['peak_mb']:.0f} | "
                    f"{result['peak_mb'] - result['start_mb']:.0f} |"
                )


if __name__ == "__main__":
    main()
