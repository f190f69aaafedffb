"""Faults on a real multi-node run: two network namespaces on one bridge (tests/netns.py), one
``evogan run --nnodes 2`` agent in each on a shared run directory, CURVE on, and one fault per run.

    sudo .venv/bin/python benchmarks/multinode.py faults [--recipe recipes/toy-ring.toml] [--generations 40]
        [--cases baseline link-down latency loss rate node-kill head-cut head-lost]
    sudo .venv/bin/python benchmarks/multinode.py demo [--generations 4]

``faults`` injects each fault once a quarter of the generations is complete: node 1's link down for 25 s;
100 ms ± 20 ms delay on every link; 1 % loss on every link; a 10 Mbit/s cap on every link; node 1's agent
SIGKILLed and started again 5 s later; the head's link down for 25 s (shorter than --node-timeout, 45 s:
waited out); the head's link down for 60 s (longer: both nodes stop, and the same command on both resumes
once the link is back). Per case it prints the wall time (first agent start to last exit, restarts
included) and its ratio to the fault-free run, exchange seconds per cell-generation (the ``exchange``
timing: waiting for neighbours plus publishing), bytes on the wire per generation (every node's interface,
CURVE and control traffic included), the largest staleness recorded, worker and agent restarts, and
whether :func:`netns.audit` (tests/netns.py) found every (cell, generation) once, within the staleness
bound, with nothing missing from the run directory.

``demo`` runs recipes/demo.toml's networks (the MNIST MLPs) for a few generations on two nodes, with and
without a 10 Mbit/s cap, in lockstep and with ``exchange.max_staleness = 1``: what a generation's exchange
costs on a slow link, and whether it blocks training.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the cluster tooling lives with the tests
from netns import Agent, Cluster, Impairment, audit, completed_generations, unavailable

ROOT = Path(__file__).resolve().parents[1]
CELLS = 4
CASES = ("baseline", "link-down", "latency", "loss", "rate", "node-kill", "head-cut", "head-lost")
IMPAIRMENTS = {
    "latency": Impairment(delay_ms=100, jitter_ms=20),
    "loss": Impairment(loss=0.01),
    "rate": Impairment(rate_mbit=10),
}


@dataclass
class Outcome:
    case: str
    wall: float
    codes: list[int]
    exchange: list[float] = field(default_factory=list)
    wire: int = 0
    stale: int = 0
    worker_starts: int = 0
    agent_starts: int = 2
    problems: list[str] = field(default_factory=list)
    note: str = ""


def _exchange_seconds(run_dir: Path) -> list[float]:
    lines = (run_dir / "timings.jsonl").read_text().splitlines() if (run_dir / "timings.jsonl").exists() else []
    return [float(json.loads(line)["exchange"]) for line in lines if line.strip()]


def _max_stale(run_dir: Path) -> int:
    lags = [0]
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        lags += [lag["generations"] for lag in json.loads(line).get("staleness", {}).values()]
    return max(lags)


def _worker_starts(run_dir: Path) -> int:
    return sum(
        line.count(" started ")
        for path in (run_dir / "logs").glob("worker-*.out")
        for line in path.read_text().splitlines()
    )


def run_case(case: str, recipe: Path, generations: int, scratch: Path) -> Outcome:
    """One run of ``case`` on a fresh two-node cluster."""
    run_dir, at = scratch / case / "run", max(2, generations // 4)
    settings = ["--generations", str(generations), "--set", "run.threads=1"]
    with Cluster(2, workdir=scratch / case) as cluster:
        wire0 = cluster.wire_bytes()
        started = time.monotonic()
        agents = [cluster.start_agent(i, recipe, run_dir, extra=settings) for i in range(2)]
        _wait(lambda: completed_generations(run_dir, CELLS) >= at or _ended(agents), 600)
        note, starts = "", 2
        if case == "link-down":
            cluster.link(1, up=False)
            time.sleep(25)
            cluster.link(1, up=True)
        elif case in IMPAIRMENTS:
            cluster.impair(IMPAIRMENTS[case])
            trips = sorted(cluster.round_trip(1, 0) for _ in range(5))
            note = f"{cluster.backend}; TCP connect node 1 -> 0 median {trips[2] * 1000:.0f} ms"
        elif case == "node-kill":
            agents[1].kill()
            time.sleep(5)
            agents[1] = cluster.start_agent(1, recipe, run_dir, extra=settings)
            starts += 1
        elif case in ("head-cut", "head-lost"):
            cluster.link(0, up=False)
            time.sleep(25 if case == "head-cut" else 60)
            cluster.link(0, up=True)
            if case == "head-lost":
                codes = [agent.wait(300) for agent in agents]
                note = f"both stopped (exit {codes}); restarted both"
                agents = [cluster.start_agent(i, recipe, run_dir, extra=settings) for i in range(2)]
                starts += 2
        codes = [agent.wait(900) for agent in agents]
        wall = time.monotonic() - started
        wire = cluster.wire_bytes() - wire0
        cluster.heal()
    return Outcome(
        case,
        wall,
        codes,
        _exchange_seconds(run_dir),
        wire,
        _max_stale(run_dir),
        _worker_starts(run_dir),
        starts,
        audit(run_dir, cells=CELLS, generations=generations, max_staleness=0),
        note,
    )


def _ended(agents: list[Agent]) -> bool:
    return any(agent.process.poll() is not None for agent in agents)


def _wait(condition: object, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:  # type: ignore[operator]
        time.sleep(0.2)


def faults(args: argparse.Namespace) -> None:
    print(f"recipe {args.recipe}, {args.generations} generations, 2 nodes x 1 worker, CURVE on; faults from "
          f"generation {max(2, args.generations // 4)}; load {os.getloadavg()[0]:.1f} at start")  # fmt: skip
    print("| case | wall s | vs fault-free | exchange s/gen (mean / max) | wire MB/gen | max staleness | "
          "worker starts | agent starts | exit codes | audit | load | note |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    base = None
    with tempfile.TemporaryDirectory(prefix="evogan-multinode-") as scratch:
        for case in args.cases:
            out = run_case(case, args.recipe, args.generations, Path(scratch))
            if case == "baseline":
                base = out.wall
            ratio = f"{out.wall / base:.2f}x" if base else "-"
            exchange = f"{statistics.mean(out.exchange):.2f} / {max(out.exchange):.1f}" if out.exchange else "-"
            verdict = "ok" if not out.problems else "; ".join(out.problems)[:200]
            print(
                f"| {case} | {out.wall:.0f} | {ratio} | {exchange} | {out.wire / args.generations / 1e6:.2f} | "
                f"{out.stale} | {out.worker_starts} | {out.agent_starts} | {out.codes} | {verdict} | "
                f"{os.getloadavg()[0]:.1f} | {out.note} |",
                flush=True,
            )


def demo(args: argparse.Namespace) -> None:
    recipe = ROOT / "recipes" / "demo.toml"
    print(f"{recipe.name} networks, {args.generations} generations, 2 nodes x 1 worker (2 cells each), CURVE on, "
          f"threads 1; load {os.getloadavg()[0]:.1f} at start")  # fmt: skip
    print("| link | max_staleness | wall s | exchange s/gen (mean / max) | training s/gen | wire MB/gen | audit |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="evogan-demo-") as scratch:
        for rate, staleness in ((0, 0), (10, 0), (10, 1)):
            name = f"rate{rate}-s{staleness}"
            run_dir = Path(scratch) / name / "run"
            settings = ["--generations", str(args.generations), "--set", "run.threads=1", "--set",
                        f"exchange.max_staleness={staleness}", "--set", "run.samples_every=0"]  # fmt: skip
            with Cluster(2, workdir=Path(scratch) / name) as cluster:
                if rate:
                    cluster.impair(Impairment(rate_mbit=rate))
                wire0, started = cluster.wire_bytes(), time.monotonic()
                agents = [cluster.start_agent(i, recipe, run_dir, extra=settings) for i in range(2)]
                codes = [agent.wait(1800) for agent in agents]
                wall, wire = time.monotonic() - started, cluster.wire_bytes() - wire0
            lines = (run_dir / "timings.jsonl").read_text().splitlines()
            timings = [json.loads(line) for line in lines]
            exchange = [t["exchange"] for t in timings]
            training = statistics.mean(t["training"] for t in timings)
            problems = audit(run_dir, cells=CELLS, generations=args.generations, max_staleness=staleness)
            verdict = "ok" if not problems and codes == [0, 0] else f"exit {codes}; " + "; ".join(problems)[:200]
            print(
                f"| {f'{rate} Mbit/s' if rate else 'unshaped'} | {staleness} | {wall:.0f} | "
                f"{statistics.mean(exchange):.2f} / {max(exchange):.1f} | {training:.2f} | "
                f"{wire / args.generations / 1e6:.2f} | {verdict} |",
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    one = sub.add_parser("faults")
    one.add_argument("--recipe", type=Path, default=ROOT / "recipes" / "toy-ring.toml")
    one.add_argument("--generations", type=int, default=40)
    one.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES))
    two = sub.add_parser("demo")
    two.add_argument("--generations", type=int, default=4)
    args = parser.parse_args()
    reason = unavailable()
    if reason:
        sys.exit(f"error: {reason}")
    faults(args) if args.mode == "faults" else demo(args)


if __name__ == "__main__":
    main()
