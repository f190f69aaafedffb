"""Sparse GAN training on the demo MNIST digits: dense, Static, SET, RigL and ADAPT relax/strict.

One GAN (1x1 grid, population 1, selection off: plain continuous training of one pair) on the demo's
settings (``recipes/demo.toml``: BCE, D on every batch, Adam 2e-4) with the MLP pair at width 640 and
spectral norm on D (``--hidden``; the base configuration of RESULTS "Sparse training that keeps its
quality": at 640 a 30 %-dense generator holds more weights than the dense 256-wide one), 100 generations
x 50 batches = 5,000 G steps, several seeds, generator densities 10/30 %. Per run: the test-stream
classifier FID, TVD and classes of the final generator (summary.json), the mean FID of the last 10
generations, the theoretical training-FLOPs fraction (``sparsity.flops_ratio``), the BR forwards' cost,
D's density at the end and its range over the run (metrics.jsonl), and training seconds per G step.
Variants beyond the methods are the ablations of what makes the pair train (``*-nosn``: no spectral
norm; ``*-unscaled``: masks on the dense initialisation, unscaled). The ``[problem.sparsity]`` table is replaced
whole; intervals are scaled to the run length. Every finished run is appended to ``--json`` (one JSON object
per line; the raw logs are committed under ``benchmarks/logs/sparse/``), so a long matrix can be run in
pieces and reported together:

    nice -n 5 python benchmarks/sparse.py --densities 0.3 --seeds 1 2 3 --json benchmarks/logs/sparse/C.jsonl
    python benchmarks/sparse.py --report benchmarks/logs/sparse/C.jsonl

Issue 41's probe (does BR answer D's density here?): static masks with D's density set apart from G's
(``--density-d``) in a setting of ``--set`` overrides, then BR's median over the second half of each run
against d_D:

    python benchmarks/sparse.py --methods static --densities 0.3 --density-d 0.1 --seeds 1 2 \
        --set 'problem.loss={use="hinge"}' problem.network.spectral_norm=false --json probe.jsonl
    python benchmarks/sparse.py --report probe.jsonl --probe
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import append_log, git_commit, mean_sd

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "demo.toml"
NO_SN = "problem.network.spectral_norm=false"
# variant -> (controller, extra [problem.sparsity] fields, extra overrides)
VARIANTS: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    "dense": ("dense", (), ()),
    "static": ("static", (), ()),
    "set": ("set", (), ()),
    "rigl": ("rigl", (), ()),
    # ADAPT as the paper: G RigL, D's density steered by BR in the fixed band [0.45, 0.55]
    "adapt-relax": ("adapt-relax", (), ()),
    "adapt-strict": ("adapt-strict", (), ()),
    # the band calibrated on this pair, each lowering checked against BR (verify)
    "adapt-relax-auto": ("adapt-relax", ("calibrate", 'verify="shrink"'), ()),
    "adapt-strict-auto": ("adapt-strict", ("calibrate", 'verify="shrink"'), ()),
    # the D controller alone (the paper's DDA): G keeps its initial mask
    "adapt-relax-auto-gstatic": ("adapt-relax", ("calibrate", 'verify="shrink"', 'g_mask="static"'), ()),
    # the D controller alone with a fixed band (br_lower, br_upper by --set) and the paper's rule (no verify)
    "adapt-relax-gstatic": ("adapt-relax", ('g_mask="static"',), ()),
    # probes: G's prune-and-grow gentler, the generator average, D denser
    "rigl-df01": ("rigl", ("drop_fraction=0.1",), ()),
    "rigl-sema": ("rigl", ("sema=0.999",), ()),
    "static-sema": ("static", ("sema=0.999",), ()),
    "static-d50": ("static", ("density_d=0.5",), ()),
    # ablations: what lets the masked pair train
    "dense-nosn": ("dense", (), (NO_SN,)),
    "static-nosn": ("static", (), (NO_SN,)),
    "static-unscaled": ("static", ('init="unscaled"',), ()),
    "static-nosn-unscaled": ("static", ('init="unscaled"',), (NO_SN,)),
}


def decision_interval(steps: int) -> int:
    """G steps between D decisions: 15 decisions per run (paper: 100); the calibrated band's warm-up is two."""
    return max(1, steps // 15)


def sparsity_table(variant: str, density: float, steps: int, density_d: float | None = None) -> str:
    """The ``problem.sparsity`` override: the paper's intervals rescaled to ``steps`` G steps."""
    use, extra, _ = VARIANTS[variant]
    if use == "dense":
        return '{use="dense"}'
    g_interval = max(1, steps // 20)  # 20 G mask updates per run (paper: 200 over 100k)
    d_interval = decision_interval(steps)  # strict: dT_D doubled, as the paper
    br_freq = min(5, d_interval)  # window of d_interval / 5 samples for both (paper: 100 for both)
    fields = [f'use="{use}"', f"density_g={density}", f"density_d={density}"]
    if use not in ("set", "rigl"):  # static: BR measured, never acted on
        fields += [f"br_freq={br_freq}", f"da_iters={d_interval}"]
    if use != "static":
        fields += [f"g_interval={g_interval}", f"total_steps={steps}"]
    if use.startswith("adapt"):
        fields += [f"d_interval={2 * d_interval if use == 'adapt-strict' else d_interval}"]
        if "calibrate" in extra:  # the calibrated band: two relax intervals of warm-up at d_D = d_G
            fields += [f"calibrate={{warmup={2 * d_interval}}}"]
    if any(field.startswith("density_d=") for field in extra):  # the variant's own D density wins
        fields.remove(f"density_d={density}")
    elif density_d is not None and use != "dense":  # --density-d: D's (initial) density apart from G's
        fields[fields.index(f"density_d={density}")] = f"density_d={density_d}"
    return "{" + ", ".join(fields + [field for field in extra if field != "calibrate"]) + "}"


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def network_overrides(args: argparse.Namespace) -> list[str]:
    """The demo's MLP pair at ``--hidden`` with spectral norm on D, or a convolutional pair of ``--hidden``
    feature maps (``conv28``: the DCGAN-like pair for 28x28, no spectral norm) replacing the table."""
    if args.network == "mnist_mlp":
        return [f"problem.network.hidden={args.hidden}", "problem.network.spectral_norm=true"]
    return [f'problem.network={{use="{args.network}", ngf={args.hidden}, ndf={args.hidden}}}']


def one_run(variant: str, density: float, seed: int, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    from evogan.runtime.single import prepare, run_in_process

    steps = args.generations * args.batches  # G steps (D every batch too: the demo's d_skip 0)
    overrides = [
        f"run.seed={seed}",
        f"run.generations={args.generations}",
        f'run.output_dir="{out}"',
        "run.checkpoint_every=0",
        "run.samples_every=0",
        "run.threads=1",
        "run.workers=1",
        'run.device="cpu"',
        f"topology.rows={args.grid}",
        f"topology.cols={args.grid}",
        "population.selection=false",
        f"problem.batches_per_generation={args.batches}",
        *network_overrides(args),
        f"problem.sparsity={sparsity_table(variant, density, steps, args.density_d)}",
        *VARIANTS[variant][2],
        *args.set,
    ]
    load = os.getloadavg()[0]
    commit, dirty = git_commit()
    prepared = prepare(RECIPE, overrides=overrides)
    started = time.perf_counter()
    summary = run_in_process(prepared)
    wall = time.perf_counter() - started
    run_dir = prepared.run_dir.path
    records = read_jsonl(run_dir / "metrics.jsonl")
    timings = read_jsonl(run_dir / "timings.jsonl")
    # 1x1: the one generator; a grid: the mixture chosen on validation (both reported on the test stream)
    final = {"generator": summary["chosen"]["test"]} if args.grid > 1 else summary["cells"]["0"]
    sparse = records[-1].get("sparsity", {})
    d_path = [r.get("sparsity", {}).get("density_d", 1.0) for r in records]
    return {
        "variant": variant,
        "seed": seed,
        "steps": steps,
        "density_g": 1.0 if VARIANTS[variant][0] == "dense" else density,
        "fid": final["generator"]["fid"],
        # the last 10 generations' scores (1x1: the one generator), less noisy than the final one alone
        "fid_last10": statistics.fmean(r["mixture_score"] for r in records[-10:]),
        "tvd": final["generator"]["tvd"],
        "classes": final["generator"].get("classes_covered"),
        "grid": args.grid,
        "mean_over_cells": summary.get("mean_over_cells"),
        "flops_ratio": sparse.get("flops_ratio", 1.0),
        "flops_br_share": (sparse["flops_br"] / sparse["flops_train"]) if sparse.get("flops_train") else 0.0,
        "density_d_final": d_path[-1],
        "density_d_min": min(d_path),
        "density_d_max": max(d_path),
        "ms_per_g_step": 1000 * sum(t["training"] for t in timings) / steps,
        "wall_s": wall,
        "br": [r.get("sparsity", {}).get("br", math.nan) for r in records],
        "br_band": [r.get("sparsity", {}).get("br_lower", math.nan) for r in records][-1:]
        + [r.get("sparsity", {}).get("br_upper", math.nan) for r in records][-1:],
        "density_d": d_path,
        # what ADAPT's decisions did, from the last record (issue 41), and the generation it fell back at
        "decisions": {k: v for k, v in sparse.items() if k.startswith("adapt_") or k == "br_in_band"},
        "static_from": next((i + 1 for i, r in enumerate(records) if r.get("sparsity", {}).get("adapt_static")), None),
        "set": list(args.set),
        "density_d_start": density if args.density_d is None else args.density_d,  # as asked (d_D: as built)
        "hidden": args.hidden,
        "network": args.network,
        "overrides": overrides,
        "commit": commit + ("-dirty" if dirty else ""),
        "load_1min": [load, os.getloadavg()[0]],
    }


def fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}g}"


def report(results: list[dict[str, Any]], every: int) -> str:
    """Mean ± sd over seeds per (variant, d_G); then each run's BR / d_D path."""
    by_seed: dict[tuple[float, str], dict[int, dict[str, Any]]] = {}
    order = list(VARIANTS)
    for r in results:  # a run repeated (same variant, density, grid and seed) counts once: the last one
        grid = r.get("grid", 1)
        name = r["variant"] if grid == 1 else f"{r['variant']} {grid}x{grid}"
        name += _apart(r)
        by_seed.setdefault((r["density_g"], name), {})[r["seed"]] = r
    groups = {key: list(runs.values()) for key, runs in by_seed.items()}
    order += [f"{v} {g}x{g}" for g in range(2, 5) for v in VARIANTS]
    order += sorted({name for _, name in groups} - set(order))
    lines = [
        "| method | d_G | seeds | FID | FID, last 10 gens | TVD | classes | FLOPs % of dense | BR cost % | final d_D "
        "| min / max d_D | ms / G step |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (density, variant), runs in sorted(groups.items(), key=lambda kv: (-kv[0][0], order.index(kv[0][1]))):
        lines.append(
            f"| {variant} | {density:.0%} | {len(runs)} | {mean_sd([r['fid'] for r in runs], 1)} "
            f"| {mean_sd([r.get('fid_last10', math.nan) for r in runs], 1)} "
            f"| {mean_sd([r['tvd'] for r in runs], 3)} | {mean_sd([float(r['classes'] or 0) for r in runs], 1)} "
            f"| {mean_sd([100 * r['flops_ratio'] for r in runs], 1)} "
            f"| {mean_sd([100 * r['flops_br_share'] for r in runs], 2)} "
            f"| {mean_sd([r['density_d_final'] for r in runs], 2)} "
            f"| {min(r['density_d_min'] for r in runs):.2f} / {max(r['density_d_max'] for r in runs):.2f} "
            f"| {statistics.median(r['ms_per_g_step'] for r in runs):.1f} |"
        )
    lines += ["", f"BR / d_D every {every} generations (generation {every}, {2 * every}, ...):", ""]
    for (density, variant), runs in sorted(groups.items(), key=lambda kv: (-kv[0][0], order.index(kv[0][1]))):
        method = runs[0]["variant"]
        if runs[0].get("grid", 1) > 1 or VARIANTS[method][0] in ("dense", "set", "rigl"):
            continue  # a grid's records interleave its cells; no BR for dense, SET, RigL
        for r in sorted(runs, key=lambda r: r["seed"]):
            picks = range(every - 1, len(r["br"]), every)
            line = f"- {variant} d_G {density:.0%} seed {r['seed']}: BR " + " ".join(
                fmt(r["br"][i], 2) for i in picks
            )
            if method.startswith("adapt"):
                line += " | d_D " + " ".join(f"{r['density_d'][i]:.2f}" for i in picks)
                if "calibrate" in VARIANTS[method][1] and r["br_band"]:
                    line += f" | band [{fmt(r['br_band'][0], 3)}, {fmt(r['br_band'][1], 3)}]"
                line += _decisions(r)
            lines.append(line)
    return "\n".join(lines)


def _decisions(run: dict[str, Any]) -> str:
    """ADAPT's decision counts (runs recorded before issue 41 have none)."""
    d = run.get("decisions") or {}
    if not d:
        return ""
    counts = ", ".join(f"{int(d.get('adapt_' + k, 0))} {k}" for k in ("raises", "lowerings", "undos", "blocked"))
    line = f" | {int(d.get('adapt_decisions', 0))} decisions: {counts}; BR in band {100 * d.get('br_in_band', 0):.0f} %"
    inside, measured, after = _in_band(run)
    line += f" of decisions, at {inside} of {measured} records after the warm-up ({after} generations)"
    return line + (f"; static from generation {run['static_from']}" if run.get("static_from") else "")


def _in_band(run: dict[str, Any]) -> tuple[int, int, int]:
    """BR inside the final band in how many of the per-generation records after the calibration's warm-up
    (the issue's measure): (inside, with a BR at all, generations after the warm-up). Records after a
    fallback carry no BR."""
    lower, upper = run["br_band"] or (math.nan, math.nan)
    per_generation = run["steps"] // len(run["br"])
    warmup = 2 * decision_interval(run["steps"]) if "calibrate" in VARIANTS[run["variant"]][1] else 0
    after = run["br"][math.ceil(warmup / per_generation) :]
    measured = [b for b in after if not math.isnan(b)]
    return sum(lower < b < upper for b in measured), len(measured), len(after)


def _apart(run: dict[str, Any]) -> str:
    """What sets a run apart beyond its method and grid: a D density apart from G's, a width other than
    640, and --set."""
    initial_d = run.get("density_d_start", run["density_g"])
    extra = f" d_D {initial_d:.0%}" if VARIANTS[run["variant"]][0] == "static" and initial_d != run["density_g"] else ""
    if run.get("network", "mnist_mlp") != "mnist_mlp":
        extra += f" {run['network']} width {run['hidden']}"
    elif run.get("hidden", 640) != 640:
        extra += f" width {run['hidden']}"
    return extra + "".join(f" {o}" for o in run.get("set", []))


def probe(results: list[dict[str, Any]]) -> str:
    """Issue 41's probe: does BR answer D's density? For static masks (no controller), BR's median over the
    second half of each run against D's density, per setting (--set) and d_G; mean ± sd over seeds."""
    rows: dict[tuple[str, float], dict[float, list[dict[str, Any]]]] = {}
    for r in results:
        if VARIANTS[r["variant"]][0] != "static" or r.get("grid", 1) > 1:
            continue
        pair = "" if r.get("network", "mnist_mlp") == "mnist_mlp" else f"{r['network']} width {r['hidden']} "
        setting = pair + (" ".join(r.get("set", [])) or "-")
        density_d = r.get("density_d_start", r["density_g"])
        rows.setdefault((setting, r["density_g"]), {}).setdefault(density_d, []).append(r)
    lines = [
        "| setting (pair, --set) | d_G | d_D | seeds | BR, median of the second half | FID | classes |",
        "|---|---|---|---|---|---|---|",
    ]
    for (setting, d_g), by_d in sorted(rows.items()):
        for d_d, runs in sorted(by_d.items()):
            halves = [[b for b in r["br"][len(r["br"]) // 2 :] if not math.isnan(b)] for r in runs]
            medians = [statistics.median(half) if half else math.nan for half in halves]  # no sample: no BR
            lines.append(
                f"| {setting} | {d_g:.0%} | {d_d:.0%} | {len(runs)} | {mean_sd(medians, 3)} "
                f"| {mean_sd([r['fid'] for r in runs], 1)} | {mean_sd([float(r['classes'] or 0) for r in runs], 1)} |"
            )
    return "\n".join(lines)


def conv_step_time(iterations: int, batch: int, threads: int) -> float:
    """Seconds per training iteration (one hinge G step + one D step, Adam) of the conv32 pair on 1x32x32
    images (Fashion-MNIST's shape; random pixels: data loading is not what costs). Dense compute: masked
    weights cost the same on CPU (see "Sparse kernels on CPU")."""
    import torch
    from evogan_gan.image_networks import Conv32

    torch.set_num_threads(threads)
    networks = Conv32(Conv32.Options())
    gen = torch.Generator().manual_seed(0)
    g, d = (networks.build(role, (1, 32, 32), generator=gen) for role in ("generator", "discriminator"))
    opt_g, opt_d = (torch.optim.Adam(n.parameters(), 2e-4, betas=(0.5, 0.999)) for n in (g, d))
    real = torch.rand(batch, 1, 32, 32, generator=gen) * 2 - 1

    def iteration() -> None:
        z = torch.randn(batch, networks.options.latent_size, 1, 1, generator=gen)
        opt_g.zero_grad()
        (-d(g(z)).mean()).backward()
        opt_g.step()
        opt_d.zero_grad()
        (torch.relu(1 - d(real)).mean() + torch.relu(1 + d(g(z).detach())).mean()).backward()
        opt_d.step()

    iteration()  # warm-up
    started = time.perf_counter()
    for _ in range(iterations):
        iteration()
    return (time.perf_counter() - started) / iterations


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--generations", type=int, default=100)
    parser.add_argument(
        "--hidden", type=int, default=640, help="width of the MLP pair's hidden layers (conv28: feature maps)"
    )
    parser.add_argument("--network", default="mnist_mlp", choices=["mnist_mlp", "conv28"], help="the pair")
    parser.add_argument("--grid", type=int, default=1, help="a RxR torus (the demo's pairing; steps per cell)")
    parser.add_argument("--batches", type=int, default=50, help="G steps per generation")
    parser.add_argument("--densities", type=float, nargs="+", default=[0.3, 0.1])
    parser.add_argument("--methods", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--every", type=int, default=6, help="print BR every this many generations")
    parser.add_argument("--json", type=Path, default=None, help="append every finished run here (JSON lines)")
    parser.add_argument("--report", type=Path, nargs="+", default=None, help="only print the table of these")
    parser.add_argument("--conv-timing", type=int, default=0, help="only time this many conv32 iterations")
    parser.add_argument("--threads", type=int, default=1, help="threads for --conv-timing")
    parser.add_argument("--density-d", type=float, help="D's (initial) density, apart from G's (default: G's)")
    parser.add_argument("--set", nargs="+", default=[], help="further recipe overrides, KEY=VALUE")
    parser.add_argument("--probe", action="store_true", help="with --report: BR against D's density (issue 41)")
    args = parser.parse_args()
    if args.conv_timing:
        seconds = conv_step_time(args.conv_timing, 64, args.threads)
        print(f"conv32 pair, 1x32x32, batch 64, {args.threads} thread(s): {seconds:.3f} s per G+D iteration")
        return
    if args.report:
        lines = [r for path in args.report for r in read_jsonl(path)]
        print(probe(lines) if args.probe else report(lines, args.every))
        return
    out = Path(tempfile.mkdtemp(prefix="evogan-sparse-"))
    print("command:", " ".join(["python", *sys.argv]), flush=True)
    results = []
    for density in args.densities:
        for seed in args.seeds:  # seed-major: a cut matrix still has every method
            for variant in args.methods:
                if VARIANTS[variant][0] == "dense" and density != args.densities[0]:
                    continue
                result = one_run(variant, density, seed, args, out)
                results.append(result)
                print(
                    f"{variant} d_G={result['density_g']} seed={seed}: fid={result['fid']:.1f} "
                    f"tvd={result['tvd']:.3f} flops={result['flops_ratio']:.3f} "
                    f"d_D={result['density_d_final']:.2f} [{result['density_d_min']:.2f}, "
                    f"{result['density_d_max']:.2f}] {result['wall_s']:.0f} s",
                    flush=True,
                )
                if args.json:
                    append_log(args.json, result)
    print()
    print(report(results, args.every))


if __name__ == "__main__":
    main()
