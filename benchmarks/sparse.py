"""Sparse GAN training on the demo MNIST digits: dense, Static, SET, RigL and ADAPT relax/strict.

One GAN (1x1 grid, population 1, selection off, so every run is plain continuous training of one pair) on
``recipes/mnist-adapt.toml``'s problem (MNIST MLP, hinge loss, d_skip 1) at generator densities 10/30 %,
several seeds, the same generations for all. Per run: the classifier FID/TVD of the final generator
(summary.json), the theoretical training-FLOPs fraction (``sparsity.flops_ratio``), the BR forwards' cost,
and the discriminator density at the end and its minimum/maximum over the run (metrics.jsonl, one record
per generation). Variants: ``adapt-relax`` uses the paper's fixed band [0.45, 0.55], ``*-auto`` the
calibrated band (``band = "auto"``), ``*-settle`` a longer warm-up whose first half is not used
(``band_settle``), ``*-gstatic`` G's mask held (``g_mask = "static"``), ``static-d50`` Static with D at
50 %. The ``[sparsity]`` table is replaced whole, so the recipe's own sparsity keys do not leak in.
Intervals are scaled to the run length. Every finished run is appended
to ``--json`` (one JSON object per line), so a long matrix can be run in pieces and reported together:

    nice -n 5 python benchmarks/sparse.py --generations 60 --densities 0.3 --seeds 1 2 3 --json runs.jsonl
    python benchmarks/sparse.py --report runs.jsonl
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import mean_sd

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "mnist-adapt.toml"
SETTLE = "settle"  # marker: band_warmup and band_settle scaled to the run (sparsity_table)
# variant -> (controller, extra option fields)
VARIANTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "dense": ("dense", ()),
    "static": ("static", ()),
    "set": ("set", ()),
    "rigl": ("rigl", ()),
    "adapt-relax": ("adapt-relax", ()),
    "adapt-relax-auto": ("adapt-relax", ('band="auto"',)),
    "adapt-strict-auto": ("adapt-strict", ('band="auto"',)),
    # The D controller alone: G keeps its initial mask (g_mask = "static"), D's density adapts.
    "adapt-relax-auto-gstatic": ("adapt-relax", ('band="auto"', 'g_mask="static"')),
    "adapt-strict-auto-gstatic": ("adapt-strict", ('band="auto"', 'g_mask="static"')),
    # The calibration past the early transient: a warm-up of 4 relax intervals, the first 2 not used.
    "adapt-relax-settle": ("adapt-relax", ('band="auto"', SETTLE)),
    "adapt-strict-settle": ("adapt-strict", ('band="auto"', SETTLE)),
    "adapt-relax-settle-gstatic": ("adapt-relax", ('band="auto"', SETTLE, 'g_mask="static"')),
    # Moves checked against BR (verify): a lowering that does not raise BR is undone and sets a floor.
    "adapt-relax-auto-verify": ("adapt-relax", ('band="auto"', 'verify="shrink"')),
    "adapt-relax-auto-gstatic-verify": ("adapt-relax", ('band="auto"', 'g_mask="static"', 'verify="shrink"')),
    "adapt-relax-verify": ("adapt-relax", ('verify="shrink"',)),  # the paper's fixed band, checked
    "adapt-relax-gstatic-verify": ("adapt-relax", ('g_mask="static"', 'verify="shrink"')),
    "adapt-relax-auto-gstatic-verify2": ("adapt-relax", ('band="auto"', 'g_mask="static"', 'verify="both"')),
    # Static with D denser than G, where the calibrated controllers ended at d_G 10 % (d_D 0.4-0.6).
    "static-d50": ("static", ("density_d=0.5",)),
    # Static with D at the density the verified controller settled at (d_G 30 %: 0.35-0.40).
    "static-d40": ("static", ("density_d=0.4",)),
}


def sparsity_table(variant: str, density: float, steps: int) -> str:
    """The ``sparsity`` override: the recipe's intervals rescaled to ``steps`` G steps."""
    use, extra = VARIANTS[variant]
    if use == "dense":
        return '{use="dense"}'
    g_interval = max(1, steps // 20)  # 20 G mask updates per run (paper: 200 over 100k)
    d_interval = max(1, steps // 15)  # 15 D decisions (paper: 100); strict: dT_D doubled, as the paper
    br_freq = min(5, d_interval)  # window of d_interval / 5 samples for both (paper: 100 for both)
    fields = [f'use="{use}"', f"density_g={density}", f"density_d={density}"]
    fields += [f"br_freq={br_freq}", f"da_iters={d_interval}"]  # static: BR measured, never acted on
    if use != "static":
        fields += [f"g_interval={g_interval}", f"total_steps={steps}"]
    if use.startswith("adapt"):
        interval = 2 * d_interval if use == "adapt-strict" else d_interval
        fields += [f"d_interval={interval}"]
    if SETTLE in extra:
        fields += [f"band_warmup={4 * d_interval}", f"band_settle={2 * d_interval}"]
    elif 'band="auto"' in extra:
        fields += [f"band_warmup={2 * d_interval}"]  # two relax intervals at d_D = d_G
    fields += [field for field in extra if field != SETTLE]
    if any(field.startswith("density_d=") for field in extra):  # the variant's own D density wins
        fields.remove(f"density_d={density}")
    if use in ("set", "rigl"):
        fields = [f for f in fields if not f.startswith(("br_freq", "da_iters"))]
    return "{" + ", ".join(fields) + "}"


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def one_run(variant: str, density: float, seed: int, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    from evogan.runtime.single import prepare, run_in_process

    steps = args.generations * args.batches  # G steps (critic_steps 1)
    overrides = [
        f"run.seed={seed}",
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
        f"sparsity={sparsity_table(variant, density, steps)}",
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
    d_path = [r.get("sparsity", {}).get("density_d", 1.0) for r in records]
    return {
        "variant": variant,
        "seed": seed,
        "steps": steps,
        "density_g": 1.0 if variant == "dense" else density,
        "fid": final["generator"]["fid"],
        # the last 10 generations' scores (1x1: the one generator), less noisy than the final one alone
        "fid_last10": statistics.fmean(r["mixture_score"] for r in records[-10:]),
        "tvd": final["generator"]["tvd"],
        "classes": final["generator"].get("classes_covered"),
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
        "run_dir": str(run_dir),
    }


def fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}g}"


def report(results: list[dict[str, Any]], every: int) -> str:
    """Mean ± sd over seeds per (variant, d_G); then each run's BR / d_D path."""
    groups: dict[tuple[float, str], list[dict[str, Any]]] = {}
    order = list(VARIANTS)
    for r in results:
        groups.setdefault((r["density_g"], r["variant"]), []).append(r)
    lines = [
        "| method | d_G | seeds | FID | FID, last 10 gens | TVD | classes | FLOPs % of dense | BR cost % | final d_D "
        "| min / max d_D |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (density, variant), runs in sorted(groups.items(), key=lambda kv: (-kv[0][0], order.index(kv[0][1]))):
        lines.append(
            f"| {variant} | {density:.0%} | {len(runs)} | {mean_sd([r['fid'] for r in runs], 1)} "
            f"| {mean_sd([r.get('fid_last10', math.nan) for r in runs], 1)} "
            f"| {mean_sd([r['tvd'] for r in runs], 3)} | {mean_sd([float(r['classes'] or 0) for r in runs], 1)} "
            f"| {mean_sd([100 * r['flops_ratio'] for r in runs], 1)} "
            f"| {mean_sd([100 * r['flops_br_share'] for r in runs], 2)} "
            f"| {mean_sd([r['density_d_final'] for r in runs], 2)} "
            f"| {min(r['density_d_min'] for r in runs):.2f} / {max(r['density_d_max'] for r in runs):.2f} |"
        )
    lines += ["", f"BR / d_D every {every} generations (generation {every}, {2 * every}, ...):", ""]
    for (density, variant), runs in sorted(groups.items(), key=lambda kv: (-kv[0][0], order.index(kv[0][1]))):
        if variant in ("dense", "set", "rigl"):
            continue
        for r in sorted(runs, key=lambda r: r["seed"]):
            picks = range(every - 1, len(r["br"]), every)
            line = f"- {variant} d_G {density:.0%} seed {r['seed']}: BR " + " ".join(
                fmt(r["br"][i], 2) for i in picks
            )
            if variant.startswith("adapt"):
                line += " | d_D " + " ".join(f"{r['density_d'][i]:.2f}" for i in picks)
                if 'band="auto"' in VARIANTS[variant][1] and r["br_band"]:
                    line += f" | band [{fmt(r['br_band'][0], 3)}, {fmt(r['br_band'][1], 3)}]"
            lines.append(line)
    return "\n".join(lines)


def conv_step_time(iterations: int, batch: int, threads: int) -> float:
    """Seconds per training iteration (one hinge G step + one D step, Adam) of the conv32 pair on 1x32x32
    images (Fashion-MNIST's shape; random pixels: data loading is not what costs). Dense compute: masked
    weights cost the same on CPU (see "Sparse kernels on CPU")."""
    import torch

    from evogan.builtin.gan.image_networks import Conv32

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
    parser.add_argument("--generations", type=int, default=60)
    parser.add_argument("--batches", type=int, default=50, help="G steps per generation")
    parser.add_argument("--densities", type=float, nargs="+", default=[0.3, 0.1])
    parser.add_argument("--methods", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--every", type=int, default=6, help="print BR every this many generations")
    parser.add_argument("--json", type=Path, default=None, help="append every finished run here (JSON lines)")
    parser.add_argument("--report", type=Path, nargs="+", default=None, help="only print the table of these")
    parser.add_argument("--conv-timing", type=int, default=0, help="only time this many conv32 iterations")
    parser.add_argument("--threads", type=int, default=1, help="threads for --conv-timing")
    args = parser.parse_args()
    if args.conv_timing:
        seconds = conv_step_time(args.conv_timing, 64, args.threads)
        print(f"conv32 pair, 1x32x32, batch 64, {args.threads} thread(s): {seconds:.3f} s per G+D iteration")
        return
    if args.report:
        print(report([r for path in args.report for r in read_jsonl(path)], args.every))
        return
    out = Path(tempfile.mkdtemp(prefix="evogan-sparse-"))
    print("command:", " ".join(["python", *sys.argv]), flush=True)
    results = []
    for density in args.densities:
        for seed in args.seeds:  # seed-major: a cut matrix still has every method
            for variant in args.methods:
                if variant == "dense" and density != args.densities[0]:
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
                    with args.json.open("a") as stream:
                        stream.write(json.dumps(result) + "\n")
    print()
    print(report(results, args.every))


if __name__ == "__main__":
    main()
