"""Recovery after a worker dies: seconds per generation before, across and after a restart, and a chaos
series of runs each killed at a random moment.

    .venv/bin/python benchmarks/recovery.py speed [--recipe recipes/toy-ring.toml] [--generations 30]
        [--staleness 0 2] [--kill-after 8]
    .venv/bin/python benchmarks/recovery.py chaos [--recipe recipes/toy-ring.toml] [--trials 20]

Each run is ``evogan run RECIPE --workers 2`` in a subprocess, as a user starts it. The benchmark watches
``metrics.jsonl`` and stamps the wall time at which every cell has recorded generation g (the time a
generation completes; after a restart the regenerated generations are stamped again, the last stamp
counts). ``speed`` SIGKILLs worker 1 once generation ``--kill-after`` is complete and prints, per
staleness setting: the median seconds per generation before the kill, the gap from the kill to the next
completed generation (detection, group restart, resume, catch-up), the first two generations after that,
and the median afterwards. ``chaos`` runs ``--trials`` runs, each killed at a random point (after a random
number of completed generations, 0 meaning start-up, plus a random fraction of a generation), records the
victim's phase from its progress file, checks that every run completes with each (cell, generation)
recorded exactly once, and compares its wall time with an uninterrupted run made nearby.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EVOGAN = [sys.executable, "-m", "evogan"]


@dataclass
class Watch:
    """A launched run and the wall time at which each generation completed on every cell."""

    process: subprocess.Popen[bytes]
    output: Path
    started: float = field(default_factory=time.monotonic)
    completed: dict[int, float] = field(default_factory=dict)
    cells: int = 4

    @property
    def run_dir(self) -> Path | None:
        found = [p for p in self.output.iterdir() if p.is_dir()] if self.output.exists() else []
        return found[0] if found else None

    def poll(self) -> None:
        run_dir = self.run_dir
        if run_dir is None or not (run_dir / "metrics.jsonl").exists():
            return
        seen: dict[int, set[int]] = {}
        for line in (run_dir / "metrics.jsonl").read_text().splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            seen.setdefault(record["generation"], set()).add(record["cell"])
        now = time.monotonic()
        for generation, cells in seen.items():
            if len(cells) == self.cells and generation not in self.completed:
                self.completed[generation] = now
        for generation in [g for g in self.completed if len(seen.get(g, ())) < self.cells]:
            del self.completed[generation]  # truncated by a resume: it will complete again

    def pid(self, rank: int) -> int | None:
        run_dir = self.run_dir
        try:
            return int((run_dir / "logs" / f"worker-{rank:04d}.pid").read_text()) if run_dir else None
        except (OSError, ValueError):
            return None

    def phase(self, rank: int) -> str:
        run_dir = self.run_dir
        try:
            return str(json.loads((run_dir / "logs" / f"worker-{rank:04d}.progress").read_text())["phase"])
        except (OSError, ValueError, KeyError, TypeError):
            return "start-up"

    def wait(self, until: float = 600.0) -> int:
        while self.process.poll() is None:
            self.poll()
            if time.monotonic() - self.started > until:
                self.process.kill()
                return -9
            time.sleep(0.05)
        self.poll()
        return int(self.process.returncode)


def launch(recipe: Path, generations: int, staleness: int, out: Path, extra: list[str]) -> Watch:
    command = [
        *EVOGAN,
        "run",
        str(recipe),
        "--workers",
        "2",
        "--generations",
        str(generations),
        "--output-dir",
        str(out),
        "--quiet",
        "--set",
        f"exchange.max_staleness={staleness}",
        "--set",
        "run.checkpoint_every=1",
        "--set",
        "run.samples_every=0",
        *extra,
    ]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return Watch(process, out)


def complete_once(run_dir: Path, generations: int, cells: int = 4) -> bool:
    pairs = [
        (r["cell"], r["generation"])
        for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())
    ]
    return sorted(pairs) == sorted((c, g) for c in range(cells) for g in range(1, generations + 1))


def speed(args: argparse.Namespace) -> None:
    print(f"recipe {args.recipe}, {args.generations} generations, 2 workers, kill worker 1 after generation "
          f"{args.kill_after}; load {os.getloadavg()[0]:.1f}")
    print("| max_staleness | s/gen before | kill -> next generation s | first 2 after s/gen | s/gen after | "
          "complete once |")
    print("|---|---|---|---|---|---|")
    for staleness in args.staleness:
        with tempfile.TemporaryDirectory() as scratch:
            watch = launch(args.recipe, args.generations, staleness, Path(scratch) / "runs", args.set)
            killed_at = None
            while watch.process.poll() is None and killed_at is None:
                watch.poll()
                pid = watch.pid(1)
                if args.kill_after in watch.completed and pid:
                    os.kill(pid, signal.SIGKILL)
                    killed_at = time.monotonic()
                time.sleep(0.02)
            code = watch.wait()
            stamps = watch.completed
            if killed_at is None or code != 0:
                print(f"| {staleness} | run failed (exit {code}) | | | | |")
                continue
            before = [stamps[g] - stamps[g - 1] for g in range(3, args.kill_after + 1)]
            after_gens = sorted(g for g in stamps if stamps[g] > killed_at)
            gap = stamps[after_gens[0]] - killed_at
            first = [stamps[g] - stamps[g - 1] for g in after_gens[1:3]]
            later = [stamps[g] - stamps[g - 1] for g in after_gens[3:]]
            print(
                f"| {staleness} | {statistics.median(before):.2f} | {gap:.1f} | "
                f"{' / '.join(f'{x:.2f}' for x in first)} | {statistics.median(later):.2f} | "
                f"{complete_once(watch.run_dir, args.generations)} |",  # type: ignore[arg-type]
                flush=True,
            )


def clean_run(args: argparse.Namespace, scratch: Path) -> float:
    watch = launch(args.recipe, args.generations, 0, scratch / f"clean-{time.monotonic_ns()}", args.set)
    watch.wait()
    return time.monotonic() - watch.started


def chaos(args: argparse.Namespace) -> None:
    """Each trial kills a random worker at a random point of a run: after a random number of completed
    generations (0: during start-up) plus a random fraction of a generation. An uninterrupted run every
    ``--clean-every`` trials gives the baseline, so a ratio compares runs made under the same load."""
    rng = random.Random(args.seed)
    print(f"recipe {args.recipe}, {args.generations} generations, 2 workers; load {os.getloadavg()[0]:.1f}")
    print("| trial | killed after generation | victim | victim's phase | completed | each generation once "
          "| wall s | uninterrupted s (nearest) | ratio |")
    print("|---|---|---|---|---|---|---|---|---|")
    ok, ratios, cleans = 0, [], []
    with tempfile.TemporaryDirectory() as scratch_dir:
        scratch = Path(scratch_dir)
        for trial in range(1, args.trials + 1):
            if (trial - 1) % args.clean_every == 0:
                cleans.append(clean_run(args, scratch))
            after, fraction, victim = rng.randrange(args.generations), rng.random(), rng.randrange(2)
            watch = launch(args.recipe, args.generations, 0, scratch / f"trial-{trial}", args.set)
            phase, deadline = "(ended first)", None
            while watch.process.poll() is None:
                watch.poll()
                pid = watch.pid(victim)
                if deadline is None and pid and (after == 0 or after in watch.completed):
                    stamps = sorted(watch.completed.values())
                    gaps = [b - a for a, b in itertools.pairwise(stamps)]
                    step = statistics.median(gaps) if gaps else 1.0
                    deadline = time.monotonic() + fraction * step
                if deadline is not None and time.monotonic() >= deadline and pid:
                    phase = watch.phase(victim)
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                    break
                time.sleep(0.01)
            code = watch.wait()
            wall = time.monotonic() - watch.started
            once = code == 0 and watch.run_dir is not None and complete_once(watch.run_dir, args.generations)
            ok += once
            ratios.append(wall / cleans[-1])
            print(
                f"| {trial} | {after} + {fraction:.2f} | {victim} | {phase} | {code == 0} | {once} | {wall:.1f} | "
                f"{cleans[-1]:.1f} | {wall / cleans[-1]:.2f} |",
                flush=True,
            )
    print(f"\n{ok}/{args.trials} runs completed with every generation recorded once; wall time "
          f"{statistics.mean(ratios):.2f}x ± {statistics.stdev(ratios):.2f} of the nearest uninterrupted run "
          f"(uninterrupted runs: {', '.join(f'{c:.1f}' for c in cleans)} s); load {os.getloadavg()[0]:.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["speed", "chaos"])
    parser.add_argument("--recipe", type=Path, default=ROOT / "recipes" / "toy-ring.toml")
    parser.add_argument("--generations", type=int, default=30)
    parser.add_argument("--staleness", type=int, nargs="+", default=[0, 2])
    parser.add_argument("--kill-after", type=int, default=8)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--clean-every", type=int, default=5, help="chaos: an uninterrupted run every k trials")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="passed as --set")
    args = parser.parse_args()
    args.set = [item for value in args.set for item in ("--set", value)]
    speed(args) if args.mode == "speed" else chaos(args)


if __name__ == "__main__":
    main()
