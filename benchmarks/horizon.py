"""The horizon sweep: how the grid and its controls score as every GAN trains longer, from one run per seed.

Does coevolution still pay when each GAN is trained to convergence (issue 35)? Each configuration of a
benchmark's matrix (``--of grid_size``: the demo's MNIST recipe, FID; ``--of mode_collapse``: the 25-mode
toy grid, modes covered; configurations as ``_controls.py`` names them: ``grid-RxC``, ``independent-RxC``,
``lone-steps``, ``lone-flops-RxC``, ``pairing-NAME-RxC``) runs once per seed to the longest of
``--horizons`` (steps per cell), keeping a checkpoint at every horizon; each checkpoint is then scored as
``evogan evaluate --generation`` scores it (the mixture chosen on the validation stream, reported on the
test stream, and the means over the cells), one JSON line per (run, horizon) in
``benchmarks/logs/horizon/<commit>.jsonl``. The lone GAN at equal FLOPs is scored at the generations whose
training FLOPs match the grid's at each horizon. ``--adopt RUN_DIR CONFIG`` scores a run made elsewhere (a
``mode_collapse.py --output-dir`` run with kept checkpoints) the same way. ``--summarise`` re-derives every
table from the logs alone, and ``--plot FILE`` draws the target figure against steps per configuration.

    .venv/bin/python benchmarks/horizon.py --of grid_size --grids 2x2 --horizons 5000 10000 20000 \\
        --configs grid-2x2 independent-2x2 --seeds 1                   # hours on 2 cores
    .venv/bin/python benchmarks/horizon.py --of mode_collapse --adopt runs/toy-grid-... grid-3x3 \\
        --horizons 5000 10000 20000
    .venv/bin/python benchmarks/horizon.py --summarise --plot docs/images/horizon-mnist.png
"""

from __future__ import annotations

import argparse
import importlib
import math
import re
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import LOGS, ROOT, append_log, git_commit, log_path, machine, mean_sd, read_logs, run_recipe
from _controls import (
    Configuration,
    Script,
    contents_of,
    cost_per_generation,
    figures,
    has,
    load,
    lookup,
    overrides_of,
    plan,
    recipe_digest,
    recipe_sha,
    versus,
)

from evogan import recipe as recipes
from evogan.compare import spread
from evogan.engine.run import reported
from evogan.plugins import make_plugin_manager
from evogan.registry import Registries
from evogan.trained import load as load_run

NAME = "horizon"


def script_of(name: str) -> Script:
    script: Script = importlib.import_module(name).SCRIPT
    return script


def steps_per_generation(recipe: recipes.Recipe, registries: Registries) -> int:
    """Generator steps of one cell in one generation (the problem's schedule; constant in the shipped ones)."""
    _, steps = next(cost_per_generation(recipe, registries))
    return steps


def cumulative_flops(recipe: recipes.Recipe, registries: Registries, generations: int) -> list[float]:
    """Training FLOPs of the whole grid after each generation 1..``generations``."""
    costs, total, out = cost_per_generation(recipe, registries), 0.0, []
    for _ in range(generations):
        total += next(costs)[0]
        out.append(total)
    return out


def horizon_generations(horizons: Sequence[int], per_generation: int) -> list[int]:
    wrong = [h for h in horizons if h % per_generation]
    if wrong:
        raise SystemExit(f"--horizons: {wrong} are not whole generations of {per_generation} steps per cell")
    return [h // per_generation for h in sorted(horizons)]


def matched(flops: Sequence[float], target: float) -> int:
    """The generation (1-based) whose cumulative FLOPs come nearest ``target``."""
    return min(range(len(flops)), key=lambda i: abs(flops[i] - target)) + 1


# ------------------------------------------------------------------------------------------ scoring
def score_along(
    script: Script,
    run_dir: Path,
    points: Mapping[int, int],
    base: Mapping[str, Any],
    flops: Sequence[float],
    log: Path,
) -> None:
    """Score ``run_dir`` at each generation of ``points`` (horizon -> generation) it has a checkpoint of
    (a run stopped by ``--deadline`` has the early ones), one log line each."""
    trained = load_run(run_dir)
    if missed := sorted(h for h, g in points.items() if g not in trained.generations):
        print(f"{run_dir.name}: stopped before the horizons {missed}; scoring the rest", flush=True)
    points = {h: g for h, g in points.items() if g in trained.generations}
    alone = trained.problem.roles[0]
    for horizon, generation in sorted(points.items()):
        scores = trained.at(generation).scores()
        summary = {**reported(scores, alone), "cells": scores, "problem": trained.problem.describe()}
        record = {
            **base,
            "horizon": horizon,
            "generation": generation,
            "training_flops": flops[generation - 1],
            **figures(summary, script),
            "scored": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "machine_scored": machine(),
        }
        append_log(log, record)
        target = lookup(record, ("test", "best_mixture", *script.target))
        cells = lookup(record, ("test", "mean_over_cells", alone, *script.target))
        name = "/".join(base["configs"])
        print(f"{name} seed {base['seed']} at {horizon} steps: mixture {target:.4g}, mean cell {cells:.4g}", flush=True)


def base_record(
    script: Script,
    config: Configuration,
    recipe: recipes.Recipe,
    seed: int,
    extra: Sequence[str],
    registries: Registries,
) -> dict[str, Any]:
    commit, dirty = git_commit()
    return {
        "script": NAME,
        "of": script.name,
        "configs": [config.name],
        "what": config.what,
        "recipe": str(script.recipe.relative_to(ROOT)),
        "recipe_sha": recipe_sha(script.recipe),
        "recipe_digest": recipe_digest(script.recipe, registries),
        "set": list(extra),
        "grid": config.grid,
        "pairing": recipe.choices["problem"].options.pairing.use,
        "selection": recipe.population.selection,
        "seed": seed,
        "commit": commit,
        "dirty": dirty,
        "device": torch.cuda.get_device_name(0) if recipe.run.device != "cpu" and torch.cuda.is_available() else "cpu",
    }


def sweep(script: Script, args: argparse.Namespace) -> Path:
    registries = Registries.from_plugin_manager(make_plugin_manager())
    output = args.output_dir or Path(tempfile.mkdtemp(prefix="evogan-horizon-"))
    probe = load(script, registries, overrides_of(script, args, Configuration("", 1, 1, (), 1, ""), 0, output))
    wanted = horizon_generations(args.horizons, steps_per_generation(probe, registries))
    args.generations = wanted[-1]  # the plan's grids run to the longest horizon
    args.grids = sorted({*args.grids, "1x1"})  # the lone GAN's configurations come with the 1x1
    configs = {c.name: c for c in plan(script, args, registries)}
    if unknown := set(args.configs) - set(configs):
        raise SystemExit(f"--configs: unknown {', '.join(sorted(unknown))}; known: {', '.join(configs)}")
    log = log_path(NAME, args.log_dir)
    deadline = time.monotonic() + args.deadline if args.deadline else math.inf
    for seed in args.seeds:
        for name in args.configs:
            if time.monotonic() > deadline:
                print(f"--deadline: {name} seed {seed} not run", flush=True)
                continue
            config = configs[name]
            points = dict(zip(sorted(args.horizons), wanted, strict=True))
            if name.startswith("lone-flops-"):  # the lone GAN's generations of the grid's FLOPs at each horizon
                rows, cols = (int(n) for n in name.removeprefix("lone-flops-").split("x"))
                grid = configs[f"grid-{rows}x{cols}"]
                grid_flops = cumulative_flops(
                    load(script, registries, overrides_of(script, args, grid, seed, output)), registries, wanted[-1]
                )
                lone = load(script, registries, overrides_of(script, args, config, seed, output))
                lone_flops = cumulative_flops(lone, registries, config.generations)
                points = {h: matched(lone_flops, grid_flops[g - 1]) for h, g in points.items()}
            every = math.gcd(*points.values())
            keep = max(points.values()) // every + 1
            overrides = [
                *overrides_of(script, args, config, seed, output),
                f"run.checkpoint_every={every}",
                f"run.keep_checkpoints={keep}",
            ]
            overrides.append(f"run.generations={max(points.values())}")
            recipe = load(script, registries, overrides)
            flops = cumulative_flops(recipe, registries, recipe.run.generations)
            before, started = machine(), time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            _, wall, run_dir = run_recipe(script.recipe, overrides, stop=lambda: time.monotonic() > deadline)
            base = base_record(script, config, recipe, seed, [*script.base(args), *args.set], registries)
            base |= {"wall_s": wall, "started": started, "machine": {**before, "load_end": machine()["load"]}}
            base |= {
                "threads": args.threads,
                "run_dir": str(run_dir),
                "overrides": [o for o in overrides if "output_dir" not in o],
            }
            score_along(script, run_dir, points, base, flops, log)
    return log


def adopt(script: Script, args: argparse.Namespace, run_dir: Path, name: str) -> Path:
    """Score a finished (or stopped) run of ``script``'s recipe at ``--horizons`` as configuration ``name``."""
    registries = Registries.from_plugin_manager(make_plugin_manager())
    trained = load_run(run_dir)
    recipe = trained.recipe
    wanted = horizon_generations(args.horizons, steps_per_generation(recipe, registries))
    missing = [g for g in wanted if g not in trained.generations]
    if missing:
        raise SystemExit(
            f"{run_dir}: no checkpoint of every cell at generation(s) {missing}; kept: {trained.generations}"
        )
    options = trained.topology.options if trained.topology else None
    rows, cols = getattr(options, "rows", len(trained.cells)), getattr(options, "cols", 1)
    config = Configuration(name, rows, cols, (), recipe.run.generations, "adopted run")
    base = base_record(script, config, recipe, recipe.run.seed, [*script.base(args), *args.set], registries)
    base |= {"run_dir": str(run_dir), "adopted": True}
    flops = cumulative_flops(recipe, registries, max(wanted))
    log = log_path(NAME, args.log_dir)
    score_along(script, run_dir, dict(zip(sorted(args.horizons), wanted, strict=True)), base, flops, log)
    return log


# ------------------------------------------------------------------------------------------ tables
# How a run was executed, not what was trained: lines differing only in these group together.
EXECUTION = ("run.vectorize=", "run.threads=", "run.device=", "run.keep_checkpoints=")


def configuration_set(record: Mapping[str, Any]) -> list[str]:
    """The line's --set without execution settings, 0.2's top-level parts spelled where they live now."""
    moved = tuple(f"{part}{sep}" for part in recipes.PROBLEM_PARTS for sep in ("=", "."))
    return [f"problem.{s}" if s.startswith(moved) else s for s in record["set"] if not s.startswith(EXECUTION)]


def grouped(records: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str, str, int], list[Mapping[str, Any]]]:
    """Lines by (benchmark, --set, configuration, horizon). A seed run again on the same kind of device is a
    reproduction, not another sample: the newest line of each (seed, device) counts."""
    out: dict[tuple[str, str, str, int], dict[tuple[int, str], Mapping[str, Any]]] = {}
    for record in sorted(records, key=lambda r: str(r.get("scored", ""))):
        for name in record["configs"]:
            key = (
                f"{record['of']} {record['recipe']}@{contents_of(record)}",
                " ".join(configuration_set(record)),
                name,
                record["horizon"],
            )
            out.setdefault(key, {})[record["seed"], str(record.get("device", "cpu"))] = record
    return {key: list(runs.values()) for key, runs in out.items()}


def table(script: Script, records: Sequence[Mapping[str, Any]]) -> str:
    alone = "generator"
    columns = [
        ("mixture", ("test", "best_mixture", *script.target)),
        ("mean cell mixture", ("test", "mean_over_cells", "mixture", *script.target)),
        ("mean cell G", ("test", "mean_over_cells", alone, *script.target)),
    ]
    target = script.target[-1]
    headers = [
        "benchmark",
        "--set",
        "configuration",
        "steps per cell",
        "seeds",
        *(f"{c} {target}" for c, _ in columns),
        "training TFLOPs",
    ]
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for (bench, extra, name, horizon), runs in sorted(grouped(records).items()):
        # a star marks a run on a GPU (its own noise, so a seed run on both devices counts twice)
        ordered = sorted(runs, key=lambda r: r["seed"])
        seeds = " ".join(f"{r['seed']}{'*' if r.get('device', 'cpu') != 'cpu' else ''}" for r in ordered)
        cells = [bench, extra or "-", name, str(horizon), seeds]
        for _, path in columns:
            cells.append(mean_sd([lookup(r, path) for r in runs]) if all(has(r, path) for r in runs) else "-")
        cells.append(mean_sd([r["training_flops"] * 1e-12 for r in runs]))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def comparisons(script: Script, records: Sequence[Mapping[str, Any]]) -> str:
    """At each horizon, every grid configuration against the controls of its size, on the chosen mixture."""
    by = grouped(records)
    path = ("test", "best_mixture", *script.target)
    lines = [
        "| benchmark | --set | steps per cell | configuration | control | grid | control | difference | pooled sd "
        "| better by > sd | Welch p |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (bench, extra, name, horizon), runs in sorted(by.items()):
        size = name.rsplit("-", 1)[-1]
        if name.startswith(("lone-", "independent-")) or size == "1x1":
            continue
        # a pairing set for the grid leaves its controls alone (each trains its own pair): theirs stand in
        unpaired = re.sub(r"\s*problem\.pairing(\.\w+)?=(\{[^}]*\}|\S+)", "", extra).strip()
        for control in ("lone-steps", f"lone-flops-{size}", f"independent-{size}"):
            others = by.get((bench, extra, control, horizon)) or by.get((bench, unpaired, control, horizon))
            if not others:
                continue
            a, b = [lookup(r, path) for r in runs], [lookup(r, path) for r in others]
            cells = versus(a, b, script.higher_is_better)
            lines.append(f"| {bench} | {extra or '-'} | {horizon} | {name} | {control} | {cells} |")
    return "\n".join(lines)


def plot(script: Script, records: Sequence[Mapping[str, Any]], path: Path) -> None:
    """The chosen mixture's test figure (solid) and the mean cell generator's (dashed) against steps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 5.5), dpi=110)
    # one curve per configuration and --set: a scheme's runs differ from the shipped grid's by their --set
    common = set.intersection(*(set(configuration_set(r)) for r in records))
    curves: dict[str, dict[int, list[Mapping[str, Any]]]] = {}
    for (_, _, name, horizon), runs in grouped(records).items():
        extra = " ".join(s for s in configuration_set(runs[0]) if s not in common)
        curves.setdefault(f"{name} {extra}".strip(), {})[horizon] = runs
    target = script.target[-1]
    for index, (name, points) in enumerate(sorted(curves.items())):
        colour = f"C{index}"
        horizons = sorted(points)
        for path_, style, label in (
            (("test", "best_mixture", *script.target), "-o", name),
            (("test", "mean_over_cells", "generator", *script.target), "--", None),
        ):
            values = [spread([lookup(r, path_) for r in points[h]]) for h in horizons]
            means = [v["mean"] for v in values]
            sds = [0.0 if math.isnan(v["sd"]) else v["sd"] for v in values]
            axes.errorbar(horizons, means, yerr=sds, fmt=style, color=colour, label=label, capsize=3)
    axes.set_xscale("log", base=2)
    ticks = sorted({h for points in curves.values() for h in points})
    axes.set_xticks(ticks, [f"{h:,}" for h in ticks])
    axes.minorticks_off()
    axes.set_xlabel("generator steps per cell")
    axes.set_ylabel(f"test {target} ({'higher' if script.higher_is_better else 'lower'} is better)")
    axes.set_title(f"{script.name}: chosen mixture (solid) and mean cell generator (dashed)")
    # below the axes, one entry a line (a scheme's label is its --set): savefig widens the image to fit it
    axes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(0.0, -0.12), ncol=1, frameon=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, bbox_inches="tight")  # the legend sits below the axes
    print(f"plot: {path}")


def summarise(script: Script, paths: Sequence[Path], plot_to: Path | None) -> None:
    records = [r for r in read_logs(paths) if r.get("script") == NAME and r.get("of") == script.name]
    if not records:
        raise SystemExit(f"no {NAME} lines of {script.name} in {', '.join(map(str, paths))}")
    print(table(script, records))
    print()
    print(comparisons(script, records))
    if plot_to is not None:
        plot(script, records, plot_to)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--of", choices=("grid_size", "mode_collapse"), default="grid_size", help="whose recipe, figures and controls"
    )
    parser.add_argument("--horizons", type=int, nargs="+", default=[5000, 10000, 20000, 40000], help="steps per cell")
    parser.add_argument("--grids", nargs="+", default=["2x2"], help="ROWSxCOLS of the configurations")
    parser.add_argument("--configs", nargs="+", default=["grid-2x2", "independent-2x2"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1])
    parser.add_argument("--pairing", help="the grids' pairing (default: the script's)")
    parser.add_argument("--batches", type=int, default=50, help="batches per generation (grid_size's recipe)")
    parser.add_argument("--set", nargs="+", default=[], help="further recipe overrides, KEY=VALUE")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--output-dir", type=Path, help="keep the run directories here (default: a temporary one)")
    parser.add_argument(
        "--deadline",
        type=float,
        help="seconds from the start after which training stops (at the end of a generation) and only the "
        "horizons reached are scored; later runs of the sweep are skipped (default: none)",
    )
    parser.add_argument("--log-dir", type=Path, default=LOGS, help="where horizon/<commit>.jsonl goes")
    parser.add_argument("--adopt", nargs=2, metavar=("RUN_DIR", "CONFIG"), help="score this run as CONFIG and stop")
    parser.add_argument("--summarise", type=Path, nargs="*", help="print the tables of these logs and stop")
    parser.add_argument("--plot", type=Path, help="with --summarise: draw the figure against steps into this file")
    args = parser.parse_args()
    script = script_of(args.of)
    if args.summarise is not None:
        summarise(script, args.summarise or [args.log_dir / NAME], args.plot)
        return
    log = adopt(script, args, Path(args.adopt[0]), args.adopt[1]) if args.adopt else sweep(script, args)
    print(f"\nlog: {log}\n")
    summarise(script, [log], None)


if __name__ == "__main__":
    main()
