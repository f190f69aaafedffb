"""The floor for sparse training: a plain PyTorch loop training the demo's MLP pair with fixed masks.

No engine: the recipe's problem only builds the networks (same architecture and initialisation), the data
and the metric. The loop is the demo's settings (BCE, Adam 2e-4 (0.5, 0.999), D on every batch, batch 100);
masks are random, fixed, re-applied after every optimizer step (weights and Adam moments). Each variant
switches one practice on, so the table says what lets a masked GAN train:

- ``uniform`` / ``erk``: layer densities (ERK: Evci et al. 2020, RigL; the first and last layers get more);
- ``scaled-init``: every unit's initial weights rescaled by sqrt(fan-in / active fan-in), so a sparse
  layer starts with the dense layer's activation scale (Evci et al. 2022, "Gradient flow in sparse neural
  networks and how lottery tickets win");
- ``lrX``: Adam's learning rate times X on masked layers;
- ``sn``: spectral normalisation on D's layers (Miyato et al. 2018; STU-GAN and ADAPT train SNGAN);
- ``ddense``: only G masked; ``dNN`` / ``gNN``: D's / G's density in per cent; ``keepio``: the first and
  last layers dense (RigL's practice for the first layer), the others sparser for the same count.

A variant is its tokens joined by dashes (``erk-scaled-sn``; ``dense`` alone: no masks). Scored as an
evogan run of the same seed reports its generator: the recipe's metric (the MNIST classifier FID and
classes) on the seed's test noise stream against the test half of the real data, for the live generator
and for its average (decay 0.999). One JSON line per run goes to ``--json``; ``--report`` prints the
table from such files:

    nice -n 5 python benchmarks/sparse_floor.py --hidden 640 --steps 5000 --seeds 1 2 3 \
        --variants dense-sn erk-scaled-sn --json benchmarks/logs/sparse_floor/<commit>.jsonl
    python benchmarks/sparse_floor.py --report benchmarks/logs/sparse_floor/<commit>.jsonl
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import mean_sd
from evogan_gan.problem import GanProblem
from evogan_gan.sparse.masks import layer_counts, maskable_parameters, random_masks

from evogan.engine.run import build_settings, set_threads
from evogan.plugins import make_plugin_manager
from evogan.recipe import load as load_recipe
from evogan.registry import Registries
from evogan.rng import score_generator

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "demo.toml"
EMA = 0.999  # decay of the generator average (ADAPT's and StyleGAN2-ADA's evaluation copy)


def parse_variant(name: str) -> dict[str, Any]:
    """``erk-scaled-lr2-sn-d50`` -> settings. Tokens: dense, uniform, erk, scaled, lrX, sn, ddense, dXX
    (D's density in %), gXX (G's density in %), keepio (first and last layers dense)."""
    settings: dict[str, Any] = {
        "masked": True, "distribution": "erk", "scaled": False, "lr_scale": 1.0, "sn": False,
        "density_g": None, "density_d": None, "d_dense": False, "keep_io": False,
    }
    for token in name.split("-"):
        if token == "dense":
            settings["masked"] = False
        elif token in ("uniform", "erk"):
            settings["distribution"] = token
        elif token == "scaled":
            settings["scaled"] = True
        elif token.startswith("lr"):
            settings["lr_scale"] = float(token[2:])
        elif token == "sn":
            settings["sn"] = True
        elif token == "ddense":
            settings["d_dense"] = True
        elif token == "keepio":
            settings["keep_io"] = True
        elif token[0] in "dg" and token[1:].isdigit():
            settings["density_d" if token[0] == "d" else "density_g"] = int(token[1:]) / 100
        else:
            raise SystemExit(f"unknown variant token {token!r} in {name!r}")
    return settings


def build_problem(hidden: int, spectral_norm: bool) -> GanProblem:
    registries = Registries.from_plugin_manager(make_plugin_manager())
    overrides = [f"problem.network.hidden={hidden}", f"problem.network.spectral_norm={str(spectral_norm).lower()}"]
    recipe = load_recipe(RECIPE, registries, overrides)
    problem = build_settings(recipe, registries, None, torch.device("cpu")).problem
    assert isinstance(problem, GanProblem)
    problem.setup()
    problem.prepare_scoring()
    return problem


def make_masks(
    network: nn.Module, density: float, settings: dict[str, Any], generator: torch.Generator
) -> dict[str, torch.Tensor]:
    params = maskable_parameters(network)
    if settings["keep_io"]:
        names = list(params)
        params = {n: p for n, p in params.items() if n not in (names[0], names[-1])}
        kept = sum(p.numel() for n, p in maskable_parameters(network).items() if n not in params)
        total = sum(p.numel() for p in maskable_parameters(network).values())
        inner = sum(p.numel() for p in params.values())
        density = max(0.0, (density * total - kept) / inner)  # same overall count
    counts = layer_counts({n: p.shape for n, p in params.items()}, density, settings["distribution"])
    return random_masks(params, counts, generator=generator)


@torch.no_grad()
def rescale_init(network: nn.Module, masks: dict[str, torch.Tensor]) -> None:
    """Each output unit's weights times sqrt(fan-in / its active fan-in) (units with none stay zero)."""
    params = dict(network.named_parameters())
    for name, mask in masks.items():
        weight = params[name]
        flat = mask.reshape(mask.shape[0], -1).float()
        active = flat.sum(dim=1).clamp(min=1)
        scale = torch.sqrt(flat.shape[1] / active)
        weight.mul_(scale.view(-1, *([1] * (weight.dim() - 1))))


@torch.no_grad()
def enforce(network: nn.Module, masks: dict[str, torch.Tensor], optimizer: torch.optim.Optimizer) -> None:
    params = dict(network.named_parameters())
    for name, mask in masks.items():
        param = params[name]
        param.mul_(mask)
        for value in optimizer.state.get(param, {}).values():
            if isinstance(value, torch.Tensor) and value.shape == param.shape:
                value.mul_(mask)


def optimizer_for(network: nn.Module, masks: dict[str, torch.Tensor], lr: float, scale: float,
                  betas: tuple[float, float]) -> torch.optim.Optimizer:
    params = dict(network.named_parameters())
    masked = [params[n] for n in masks]
    rest = [p for n, p in params.items() if n not in masks]
    groups = [{"params": rest, "lr": lr}]
    if masked:
        groups.append({"params": masked, "lr": lr * scale})
    return torch.optim.Adam(groups, lr=lr, betas=betas)


def train(problems: dict[bool, GanProblem], variant: str, density: float, steps: int, seed: int,
          every: int) -> dict[str, Any]:
    settings = parse_variant(variant)
    problem = problems[settings["sn"]]
    options = problem.options
    data: torch.Tensor = problem.source.samples  # type: ignore[attr-defined]
    size = options.batch_size
    generator = torch.Generator().manual_seed(seed)
    g_net = problem.create("generator", generator=generator)
    d_net = problem.create("discriminator", generator=generator)
    g_masks: dict[str, torch.Tensor] = {}
    d_masks: dict[str, torch.Tensor] = {}
    if settings["masked"]:
        g_density = settings["density_g"] or density
        d_density = settings["density_d"] or density
        g_masks = make_masks(g_net, g_density, settings, generator)
        if not settings["d_dense"]:
            d_masks = make_masks(d_net, d_density, settings, generator)
        if settings["scaled"]:
            rescale_init(g_net, g_masks)
            rescale_init(d_net, d_masks)
    g_opt = optimizer_for(g_net, g_masks, options.learning_rate, settings["lr_scale"], options.betas)
    d_opt = optimizer_for(d_net, d_masks, options.learning_rate, settings["lr_scale"], options.betas)
    enforce(g_net, g_masks, g_opt)
    enforce(d_net, d_masks, d_opt)
    ones, zeros = torch.ones(size), torch.zeros(size)
    per_pass = data.shape[0] // size
    order = torch.randperm(data.shape[0], generator=generator)
    average = copy.deepcopy(g_net).requires_grad_(False)  # the generator average every GAN paper evaluates
    curve: list[dict[str, float]] = []
    started = time.perf_counter()
    for step in range(steps):
        if step % per_pass == 0:
            order = torch.randperm(data.shape[0], generator=generator)
        start = (step % per_pass) * size
        real = data.index_select(0, order[start : start + size])
        z = torch.randn(size, *problem.networks.latent_shape(), generator=generator)
        with torch.no_grad():
            fake = g_net(z)
        d_opt.zero_grad(set_to_none=True)
        loss = F.binary_cross_entropy_with_logits(d_net(real), ones)
        loss = loss + F.binary_cross_entropy_with_logits(d_net(fake), zeros)
        loss.backward()
        d_opt.step()
        enforce(d_net, d_masks, d_opt)
        z = torch.randn(size, *problem.networks.latent_shape(), generator=generator)
        d_net.requires_grad_(False)
        g_opt.zero_grad(set_to_none=True)
        F.binary_cross_entropy_with_logits(d_net(g_net(z)), ones).backward()
        g_opt.step()
        enforce(g_net, g_masks, g_opt)
        d_net.requires_grad_(True)
        with torch.no_grad():
            for kept, live in zip(average.parameters(), g_net.parameters(), strict=True):
                kept.lerp_(live, 1 - EMA)
        if every and (step + 1) % every == 0 and step + 1 < steps:
            curve.append({"step": step + 1, **score(problem, g_net, seed), **prefixed(score(problem, average, seed))})
    seconds = time.perf_counter() - started
    final = {**score(problem, g_net, seed), **prefixed(score(problem, average, seed))}
    return {
        "variant": variant, "density": density, "seed": seed, "steps": steps,
        "hidden": problem.networks.options.hidden,  # type: ignore[attr-defined]
        "spectral_norm": settings["sn"],
        "g_weights": sum(int(m.sum()) for m in g_masks.values()) if g_masks else
        sum(p.numel() for p in maskable_parameters(g_net).values()),
        "seconds": seconds, **final, "curve": curve,
    }


def prefixed(metrics: dict[str, float]) -> dict[str, float]:
    return {f"ema_{k}": v for k, v in metrics.items()}


@torch.no_grad()
def score(problem: GanProblem, g_net: nn.Module, seed: int) -> dict[str, float]:
    """The test stream of ``seed``, as an evogan run of that seed reports its generator."""
    return problem.evaluate_on([g_net], [1.0], stream="test", generator=score_generator(seed, "test"))


def commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def report(paths: list[Path]) -> None:
    rows = [json.loads(line) for path in paths for line in path.read_text().splitlines() if line.strip()]
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["hidden"], row["steps"], row["density"], row["variant"]), []).append(row)
    print("| width | steps | density | variant | seeds | FID | classes | average's FID | average's classes "
          "| G weights | s / 1k steps |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for (hidden, steps, density, variant), runs in sorted(groups.items()):
        fid = mean_sd([r["fid"] for r in runs], digits=1)
        classes = mean_sd([r["classes_covered"] for r in runs], digits=1)
        ema = [r for r in runs if "ema_fid" in r]
        ema_fid = mean_sd([r["ema_fid"] for r in ema], digits=1) if ema else "-"
        ema_classes = mean_sd([r["ema_classes_covered"] for r in ema], digits=1) if ema else "-"
        per_k = statistics.mean(r["seconds"] / r["steps"] * 1000 for r in runs)
        print(f"| {hidden} | {steps} | {density} | {variant} | {len(runs)} | {fid} | {classes} | {ema_fid} "
              f"| {ema_classes} "
              f"| {runs[0]['g_weights']:,} | {per_k:.1f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=640)
    parser.add_argument("--steps", type=int, default=5000)
    parser.add_argument("--density", type=float, nargs="+", default=[0.3])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1])
    parser.add_argument("--variants", nargs="+", default=["dense", "erk"])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--curve-every", type=int, default=0, help="score every N steps too (0: end only)")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--report", type=Path, nargs="+", default=None)
    args = parser.parse_args()
    if args.report:
        report(args.report)
        return
    set_threads(args.threads)
    problems = {sn: build_problem(args.hidden, sn) for sn in {parse_variant(v)["sn"] for v in args.variants}}
    for seed in args.seeds:
        for density in args.density:
            for variant in args.variants:
                load = os.getloadavg()[0]
                row = train(problems, variant, density, args.steps, seed, args.curve_every)
                row.update(commit=commit(), load_1min=[load, os.getloadavg()[0]], threads=args.threads)
                print(json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()
                                  if k != "curve"}), flush=True)
                if args.json:
                    args.json.parent.mkdir(parents=True, exist_ok=True)
                    with args.json.open("a") as out:
                        out.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
