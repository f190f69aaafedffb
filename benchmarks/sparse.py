"""Sparse GAN training on the demo MNIST digits: dense, Static, SET, RigL and ADAPT relax/strict.

One GAN (1x1 grid, population 1, selection off, so every run is plain continuous training of one pair) on
``recipes/mnist-adapt.toml``'s problem (MNIST MLP, hinge loss, d_skip 1) at generator densities 10/30/50 %,
the same seed and generations for all. Per run: the classifier FID/TVD of the final generator
(summary.json), the theoretical training-FLOPs fraction (``sparsity.flops_ratio``), training wall time per
generator step (timings.jsonl, D steps included) and, for ADAPT, the BR trajectory and D density per
generation (metrics.jsonl). Intervals are scaled to the run length as in the recipe. Usage:

    nice -n 5 .venv/bin/python benchmarks/sparse.py [--generations 20] [--densities 0.1 0.3 0.5]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from evogan.runtime.single import prepare, run_in_process

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "mnist-adapt.toml"
METHODS = ("dense", "static", "set", "rigl", "adapt-relax", "adapt-strict")


def sparsity_table(method: str, density: float, steps: int, batches: int) -> str:
    """The ``sparsity`` override: the recipe's intervals rescaled to ``steps`` G steps."""
    if method == "dense":
        return '{use="dense"}'
    g_interval = max(1, steps // 20)  # 20 G mask updates per run (paper: 200 over 100k)
    d_interval = max(1, steps // 10)  # 10 D decisions (paper: 100); strict: 5 (paper: dT_D doubled)
    br_freq = min(5, d_interval)
    fields = [f'use="{method}"', f"density_g={density}", f"density_d={density}"]
    if method == "static":
        fields += [f"br_freq={br_freq}", f"da_iters={d_interval}"]  # BR measured, never acted on
    else:
        fields += [f"g_interval={g_interval}", f"total_steps={steps}"]
    if method.startswith("adapt"):
        interval = 2 * d_interval if method == "adapt-strict" else d_interval
        fields += [f"br_freq={br_freq}", f"da_iters={interval}", f"d_interval={interval}"]
    return "{" + ", ".join(fields) + "}"


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def one_run(method: str, density: float, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    steps = args.generations * args.batches  # G steps (critic_steps 1)
    overrides = [
        f"run.seed={args.seed}",
        f"run.generations={args.generations}",
        f'run.output_dir="{out}"',
        "run.checkpoint_every=0",
        "run.samples_every=0",
        "run.threads=1",
        'run.device="cpu"',
        "topology.rows=1",
        "topology.cols=1",
        "population.selection=false",
        f"problem.batches_per_generation={args.batches}",
        f"sparsity={sparsity_table(method, density, steps, args.batches)}",
    ]
    prepared = prepare(RECIPE, overrides=overrides)
    started = time.perf_counter()
    summary = run_in_process(prepared)
    wall = time.perf_counter() - started
    run_dir = prepared.run_dir.path
    records = read_jsonl(run_dir / "metrics.jsonl")
    timings = read_jsonl(run_dir / "timings.jsonl")
    final = summary["cells"]["0"]
    sparse = records[-1].get("sparsity", {})
    return {
        "method": method,
        "density_g": 1.0 if method == "dense" else density,
        "fid": final["generator"]["fid"],
        "tvd": final["generator"]["tvd"],
        "classes": final["generator"].get("classes_covered"),
        "flops_ratio": sparse.get("flops_ratio", 1.0),
        "flops_br_share": (sparse["flops_br"] / sparse["flops_train"]) if sparse.get("flops_train") else 0.0,
        "density_d_final": sparse.get("density_d", 1.0),
        "ms_per_g_step": 1000 * sum(t["training"] for t in timings) / steps,
        "wall_s": wall,
        "br": [r.get("sparsity", {}).get("br", math.nan) for r in records],
        "density_d": [r.get("sparsity", {}).get("density_d", math.nan) for r in records],
        "run_dir": str(run_dir),
    }


def fmt(value: float, digits: int = 3) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}g}"


def report(results: list[dict[str, Any]], every: int) -> str:
    lines = [
        "| method | d_G | FID | TVD | classes | FLOPs % of dense | BR FLOPs % | final d_D | ms / G step | wall s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['method']} | {r['density_g']:.0%} | {r['fid']:.1f} | {r['tvd']:.3f} | {fmt(r['classes'])} "
            f"| {100 * r['flops_ratio']:.1f} | {100 * r['flops_br_share']:.2f} | {r['density_d_final']:.2f} "
            f"| {r['ms_per_g_step']:.1f} | {r['wall_s']:.0f} |"
        )
    lines.append("")
    lines.append(f"BR / D density every {every} generations (generation {every}, {2 * every}, ...):")
    lines.append("")
    for r in results:
        if r["method"] in ("dense",):
            continue
        picks = range(every - 1, len(r["br"]), every)
        br = " ".join(fmt(r["br"][i], 2) for i in picks)
        line = f"- {r['method']} d_G {r['density_g']:.0%}: BR {br}"
        if r["method"].startswith("adapt"):
            line += " | d_D " + " ".join(f"{r['density_d'][i]:.2f}" for i in picks)
        lines.append(line)
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--generations", type=int, default=20)
    parser.add_argument("--batches", type=int, default=50, help="G steps per generation")
    parser.add_argument("--densities", type=float, nargs="+", default=[0.1, 0.3, 0.5])
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--every", type=int, default=5, help="print BR every this many generations")
    parser.add_argument("--json", type=Path, default=None, help="also write all results here")
    args = parser.parse_args()
    out = Path(tempfile.mkdtemp(prefix="evogan-sparse-"))
    print("command:", " ".join(["python", *sys.argv]), flush=True)
    results = []
    for method in args.methods:
        for density in [1.0] if method == "dense" else args.densities:
            result = one_run(method, density, args, out)
            results.append(result)
            print(
                f"{method} d_G={density}: fid={result['fid']:.1f} tvd={result['tvd']:.3f} "
                f"flops={result['flops_ratio']:.3f} d_D={result['density_d_final']:.2f} "
                f"{result['ms_per_g_step']:.1f} ms/step {result['wall_s']:.0f} s",
                flush=True,
            )
            if args.json:
                args.json.write_text(json.dumps(results, indent=1))
    print()
    print(report(results, args.every))


if __name__ == "__main__":
    main()
