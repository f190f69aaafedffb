"""The grid benchmarks' configurations and controls, one raw log line per run, tables re-derived from logs.

Named configurations, for grids ``RxC`` of the script's ``--grids`` (every control of a grid is made for
each grid of more than one cell):

- ``grid-RxC``: the grid with the script's pairing (``--pairing``, default the recipe's own);
  ``grid-1x1`` is the lone GAN, also named ``lone-steps`` (equal steps per cell: same generations and
  batches);
- ``lone-flops-RxC``: the lone GAN given ``grid-RxC``'s training FLOPs (more generations; see below);
- ``independent-RxC``: the same grid with pairing ``own_pair`` and selection off: independent GANs,
  mixed by the grid's mixture ES;
- ``pairing-NAME-RxC``: every built-in pairing on the grid.

Configurations that make the same recipe (its digest and length) run once; the run's log line names all
of them.

Training FLOPs (:func:`training_flops`, on :mod:`evogan_gan.cost`) use the sparse ledger's cost model
(``evogan_gan.sparse.flops``): per sample, a generator step costs ``3 f_G + 2 k f_D`` (G forward and backward, and
each of the ``k`` discriminators it faces forward plus the input-gradient half of a backward: ``g_mixture``
faces every discriminator of the neighbourhood, the other built-in pairings one), a discriminator step
``6 f_D + f_G`` (real and fake batches, the fakes drawn without gradients); times the batch size, the
population and the steps the problem's schedule trains. E-GAN (``problem.egan``) makes a generator step one
plain step per child plus each child's fitness (:func:`egan_step_cost`). The engine's fitness, scoring and the
mixture ES are not training and are not counted. ``lone-flops-RxC`` gets the number of generations whose
training FLOPs come nearest the grid's.

Every run appends one JSON line to ``benchmarks/logs/<script>/<commit>.jsonl`` (``-dirty`` when tracked
files differed from the commit): the recipe and every override, seed, commit, the validation and test
figures (the mixture chosen on validation, the generator chosen on validation, every cell's), the means
over the cells (test), training FLOPs, wall time and the machine's load, and the run's ``key`` (as
``evogan sweep`` keys its runs: recipe, grid, the configuration's overrides, seed, generations, ``--set``).
The line is written as ``evogan sweep`` writes its own, and a run whose key is already in the commit's log
is skipped: the same command again resumes a matrix cut short. Tables show test figures only and come
from those lines alone (``--summarise``), their statistics from :mod:`evogan.compare`; ``evogan compare``
reads the same lines (``evogan compare benchmarks/logs/mode_collapse --config grid-3x3 --config
lone-steps --baseline config=lone-steps``: mean ± sd, difference, pooled sd and Welch's test).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import subprocess
import tempfile
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _common import (
    LOGS,
    ROOT,
    append_log,
    git_commit,
    log_path,
    machine,
    mean_sd,
    quiet_overrides,
    read_logs,
    run_recipe,
)
from evogan_gan.cost import (  # the scripts and tests reach the cost model here too
    cost_per_generation,
    discriminators_faced,  # noqa: F401
    egan_step_cost,  # noqa: F401
)

from evogan import recipe as recipes
from evogan.compare import contrast
from evogan.errors import RecipeError, UserError
from evogan.plugins import make_plugin_manager
from evogan.registry import Registries
from evogan.sweep import read_keys, run_key

BUILTIN = "evogan.builtin."  # the plugin name of every built-in component's module


@dataclass(frozen=True)
class Configuration:
    """One named configuration: the grid, its own overrides (applied last) and its length."""

    name: str
    rows: int
    cols: int
    overrides: tuple[str, ...]
    generations: int
    what: str

    @property
    def grid(self) -> str:
        return f"{self.rows}x{self.cols}"


@dataclass(frozen=True)
class Column:
    """A table column: its header, the path of the figure in a record, and how to print it."""

    header: str
    path: tuple[str, ...]
    digits: int | None = None
    scale: float = 1.0


@dataclass(frozen=True)
class Script:
    """What differs between the benchmark scripts."""

    name: str
    recipe: Path
    grids: tuple[str, ...]
    seeds: tuple[int, ...]
    generations: int
    columns: tuple[Column, ...]
    target: tuple[str, ...]  # the figure the grid must beat its controls on (test, chosen mixture)
    higher_is_better: bool
    best_generator: Callable[[Mapping[str, Any]], str]  # cells -> the cell whose G is best on validation
    base: Callable[[argparse.Namespace], list[str]] = lambda args: []  # the script's own overrides


# ------------------------------------------------------------------------------------------ planning
def parse_grid(text: str) -> tuple[int, int]:
    rows, _, cols = text.partition("x")
    if not (rows.isdigit() and cols.isdigit() and int(rows) > 0 and int(cols) > 0):
        raise SystemExit(f"--grids: {text!r} is not ROWSxCOLS")
    return int(rows), int(cols)


def pairing(name: str) -> str:
    return f"problem.pairing={{use={json.dumps(name)}}}"


def builtin_pairings(registries: Registries) -> list[str]:
    return sorted(entry.name for entry in registries["pairing"] if entry.plugin.startswith(BUILTIN))


def plan(script: Script, args: argparse.Namespace, registries: Registries) -> list[Configuration]:
    """Every configuration of ``args.grids``, the controls included, before ``--configs`` filters them."""
    main = () if args.pairing is None else (pairing(args.pairing),)
    configs: list[Configuration] = []
    for rows, cols in (parse_grid(g) for g in args.grids):
        grid = f"{rows}x{cols}"
        if rows * cols == 1:
            what = "the lone GAN at equal steps per cell"
            configs.append(Configuration("grid-1x1", 1, 1, main, args.generations, what))
            configs.append(Configuration("lone-steps", 1, 1, main, args.generations, what))
            continue
        configs.append(Configuration(f"grid-{grid}", rows, cols, main, args.generations, "the grid"))
        flops = lone_generations(script, args, registries, rows, cols, main)
        what = f"the lone GAN at grid-{grid}'s training FLOPs"
        configs.append(Configuration(f"lone-flops-{grid}", 1, 1, main, flops, what))
        independent = (pairing("own_pair"), "population.selection=false")
        what = "independent GANs on the grid, mixed (own_pair, selection off)"
        configs.append(Configuration(f"independent-{grid}", rows, cols, independent, args.generations, what))
        for name in builtin_pairings(registries):
            what = f"pairing {name}"
            name_grid = f"pairing-{name}-{grid}"
            configs.append(Configuration(name_grid, rows, cols, (pairing(name),), args.generations, what))
    return configs


def overrides_of(
    script: Script, args: argparse.Namespace, config: Configuration, seed: int, output: Path
) -> list[str]:
    """Quiet defaults, the grid, the script's own overrides, ``--set``, then the configuration's (last:
    ``--set population.selection=true`` cannot turn the independent ensemble's selection on)."""
    return [
        *quiet_overrides(seed, config.generations, args.threads, output),
        f"topology.rows={config.rows}",
        f"topology.cols={config.cols}",
        "run.workers=1",
        *script.base(args),
        *args.set,
        *config.overrides,
    ]


def load(script: Script, registries: Registries, overrides: Sequence[str]) -> recipes.Recipe:
    return recipes.load(script.recipe, registries, list(overrides))


# ------------------------------------------------------------------------------------------ FLOPs
def training_flops(recipe: recipes.Recipe, registries: Registries) -> tuple[float, int]:
    """The whole run's training FLOPs and generator steps per cell."""
    costs = cost_per_generation(recipe, registries)
    parts = [next(costs) for _ in range(recipe.run.generations)]
    return sum(p[0] for p in parts), sum(p[1] for p in parts)


def lone_generations(
    script: Script, args: argparse.Namespace, registries: Registries, rows: int, cols: int, main: tuple[str, ...]
) -> int:
    """Generations of the lone GAN whose training FLOPs come nearest those of the ``rows`` x ``cols`` grid."""
    out = Path(tempfile.gettempdir())
    grid = Configuration("", rows, cols, main, args.generations, "")
    target, _ = training_flops(load(script, registries, overrides_of(script, args, grid, 0, out)), registries)
    lone = Configuration("", 1, 1, main, 1, "")
    costs = cost_per_generation(load(script, registries, overrides_of(script, args, lone, 0, out)), registries)
    spent, generations = 0.0, 0
    while spent < target:
        cost, _ = next(costs)
        if spent + cost - target > target - spent:  # one more would overshoot by more than we fall short
            break
        spent, generations = spent + cost, generations + 1
    return max(generations, 1)


# ------------------------------------------------------------------------------------------ running
def figures(summary: Mapping[str, Any], script: Script) -> dict[str, Any]:
    """The run's figures from ``summary.json``: under ``test`` what is reported, under ``validation`` what
    the choices (the mixture, the best single generator) were made on."""
    cells = summary["cells"]
    single = script.best_generator(cells)
    return {
        "best_cell": summary["best_cell"],
        "best_generator_cell": int(single),
        "test": {
            "best_mixture": summary["chosen"]["test"],
            "best_generator": cells[single]["generator"],
            "mean_over_cells": summary["mean_over_cells"],
            "cells": {c: {"mixture": s["mixture"], "generator": s["generator"]} for c, s in cells.items()},
        },
        "validation": {
            "best_mixture": summary["chosen"]["validation"],
            "best_generator": cells[single]["validation"]["generator"],
            "cells": {
                c: {"mixture": s["validation"]["mixture"], "generator": s["validation"]["generator"]}
                for c, s in cells.items()
            },
        },
        "problem": summary.get("problem", {}),
    }


def run_matrix(script: Script, args: argparse.Namespace) -> Path:
    """Run every chosen configuration for every seed (seeds outermost: a matrix cut short still covers
    every configuration); one log line per run. Returns the log file."""
    registries = Registries.from_plugin_manager(make_plugin_manager())
    configs = plan(script, args, registries)
    if args.configs and (unknown := set(args.configs) - {c.name for c in configs}):
        raise SystemExit(f"--configs: unknown {', '.join(sorted(unknown))}; see --list")
    output = args.output_dir or Path(tempfile.mkdtemp(prefix=f"evogan-{script.name}-"))
    same: dict[tuple[str, int], list[Configuration]] = {}  # (recipe digest, generations) -> its names
    for config in configs:  # the digest leaves out how long a run goes: the generations say it
        digest = load(script, registries, overrides_of(script, args, config, 0, output)).digest
        same.setdefault((digest, config.generations), []).append(config)
    wanted = set(args.configs or (c.name for c in configs))
    runs = [named for named in same.values() if wanted & {c.name for c in named}]
    path = log_path(script.name, args.log_dir)
    commit, dirty = git_commit()
    done = read_keys(path)  # resumable as evogan sweep is: a run already in this commit's log is skipped
    planned = [(seed, named, key(script, args, named[0], seed)) for seed in args.seeds for named in runs]
    if skipped := sum(k in done for _, _, k in planned):
        print(f"{skipped} of {len(planned)} runs already in {path}: skipped", flush=True)
    for seed, named, identity in planned:
        if identity in done:
            continue
        config = named[0]
        overrides = overrides_of(script, args, config, seed, output)
        recipe = load(script, registries, overrides)
        flops, steps = training_flops(recipe, registries)
        before, started = machine(), time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        summary, wall, run_dir = run_recipe(script.recipe, overrides)
        record = {
            "key": identity,
            "script": script.name,
            "configs": [c.name for c in named],
            "what": config.what,
            "recipe": str(script.recipe.relative_to(ROOT)),
            "recipe_sha": recipe_sha(script.recipe),
            "recipe_digest": recipe_digest(script.recipe, registries),
            "set": [*script.base(args), *args.set],  # what this invocation changed for every run
            "overrides": [o for o in overrides if not o.startswith("run.output_dir=")],
            "base_generations": args.generations,
            "grid": config.grid,
            "pairing": recipe.choices["problem"].options.pairing.use,
            "selection": recipe.population.selection,
            "generations": config.generations,
            "seed": seed,
            "commit": commit,
            "dirty": dirty,
            "generator_steps_per_cell": steps,
            "training_flops": flops,
            **figures(summary, script),
            "wall_s": wall,
            "started": started,
            "machine": {**before, "load_end": machine()["load"]},
            "threads": args.threads,
            "run_dir": str(run_dir),
        }
        append_log(path, record)
        target = lookup(record, ("test", "best_mixture", *script.target))
        names = "/".join(record["configs"])
        print(f"{names} seed {seed}: {script.target[-1]} {target:.4g} ({wall:.0f} s)", flush=True)
    return path


def key(script: Script, args: argparse.Namespace, config: Configuration, seed: int) -> str:
    """What makes a run the same run for resuming, as ``evogan sweep`` keys its runs: the recipe, the
    grid and the configuration's overrides, the seed, the generations and the invocation's ``--set``."""
    variation = {"grid": config.grid, "overrides": " ".join(config.overrides)}
    sets = [*script.base(args), *args.set]
    return run_key(script.recipe.relative_to(ROOT), variation, seed, config.generations, sets)


# ------------------------------------------------------------------------------------------ tables
def lookup(record: Mapping[str, Any], path: Sequence[str]) -> float:
    value: Any = record
    for key in path:
        value = value[key]
    return float(value)


def has(record: Mapping[str, Any], path: Sequence[str]) -> bool:
    value: Any = record
    for key in path:
        if not isinstance(value, Mapping) or key not in value:
            return False
        value = value[key]
    return True


def recipe_sha(path: Path) -> str:
    """The first 8 hex digits of the recipe file's SHA-256: a shipped recipe can change between commits
    (the demo's networks did at fc980de), and runs of different contents must not share a table row."""
    return hashlib.sha256(path.read_bytes()).hexdigest()[:8]


def recipe_digest(path: Path, registries: Registries) -> str:
    """The recipe's :attr:`~evogan.recipe.Recipe.digest` (what decides its numbers, not its comments or
    layout), shortened as :func:`recipe_sha`: a line records it beside the file's hash."""
    return recipes.load(path, registries).digest[:8]


_DIGESTS: dict[tuple[str, str], str | None] = {}


def contents_of(record: Mapping[str, Any]) -> str:
    """What a line's base recipe was, for grouping: its settings' digest (recorded, or derived from the recipe
    file at the line's commit), so that a comment or a table moved to its new place (the demo's ``[pairing]``
    at 0.3) does not split runs of the same settings; the file's hash where the digest cannot be had."""
    if record.get("recipe_digest"):
        return str(record["recipe_digest"])
    sha = str(record["recipe_sha"])
    key = (str(record.get("commit", "")), str(record["recipe"]))
    if key not in _DIGESTS:
        _DIGESTS[key] = _digest_at(*key)
    return _DIGESTS[key] or sha


def _digest_at(commit: str, recipe: str) -> str | None:
    """The digest of ``recipe`` as committed at ``commit``, or None (an unknown commit, or a recipe today's
    code no longer reads)."""
    if not commit:
        return None
    shown = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{commit}:{recipe}"], capture_output=True, text=True, check=False
    )
    if shown.returncode != 0:
        return None
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an old layout's deprecation warnings: the digest reads through them
        path = Path(tmp) / Path(recipe).name
        path.write_text(shown.stdout)
        try:
            return recipe_digest(path, Registries.from_plugin_manager(make_plugin_manager()))
        except (UserError, RecipeError, ValueError):
            return None


def groups(records: Sequence[Mapping[str, Any]]) -> dict[tuple[str, ...], list[Mapping[str, Any]]]:
    """Runs by (recipe and its settings, --set, base generations, configuration name): a run under each name
    it has. Lines from before the contents were recorded group by the recipe's path alone."""
    out: dict[tuple[str, ...], list[Mapping[str, Any]]] = {}
    for record in records:
        recipe = record["recipe"] + (f"@{contents_of(record)}" if record.get("recipe_sha") else "")
        for name in record["configs"]:
            key = (recipe, " ".join(record["set"]), str(record["base_generations"]), name)
            out.setdefault(key, []).append(record)
    return out


def order(name: str) -> tuple[int, str]:
    prefixes = ("grid-", "lone-steps", "lone-flops-", "independent-", "pairing-")
    return next(i for i, p in enumerate((*prefixes, "")) if name.startswith(p)), name


def table(script: Script, records: Sequence[Mapping[str, Any]]) -> str:
    """The markdown table of ``records``: test figures only, mean ± sd over seeds."""
    headers = ["recipe", "--set", "configuration", "grid", "pairing", "selection", "generations", "seeds", "commit"]
    lines = ["| " + " | ".join([*headers, *(c.header for c in script.columns)]) + " |"]
    lines.append("|" + "---|" * (len(headers) + len(script.columns)))
    for key, runs in sorted(groups(records).items(), key=lambda item: (*item[0][:3], order(item[0][3]))):
        recipe, extra, _, name = key
        first = runs[0]
        seeds = " ".join(str(r["seed"]) for r in sorted(runs, key=lambda r: r["seed"]))
        commits = " ".join(sorted({r["commit"] + ("-dirty" if r["dirty"] else "") for r in runs}))
        cells = [recipe, extra or "-", name, first["grid"], first["pairing"], str(first["selection"]).lower()]
        cells += [str(first["generations"]), seeds, commits]
        for column in script.columns:
            if not all(has(r, column.path) for r in runs):  # a figure older logs did not record
                cells.append("-")
                continue
            values = [lookup(r, column.path) * column.scale for r in runs]
            cells.append(mean_sd(values, column.digits))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def versus(a: Sequence[float], b: Sequence[float], higher_is_better: bool) -> str:
    """The table cells of ``a`` (a grid) against ``b`` (a control), from :func:`evogan.compare.contrast`:
    both means ± sd, the difference of the means, the pooled sd, whether ``a`` is better by more than that
    sd, and Welch's two-sided p."""
    figures = contrast(a, b)
    difference, sd, p = figures["difference"], figures["pooled_sd"], figures["p"]
    better = difference > sd if higher_is_better else -difference > sd
    verdict = "n/a (one run each)" if math.isnan(sd) else ("yes" if better else "no")
    welch = "-" if math.isnan(p) else f"{p:.2g}"
    return f"{mean_sd(a)} | {mean_sd(b)} | {difference:+.3g} | {sd:.2g} | {verdict} | {welch}"


def comparisons(script: Script, records: Sequence[Mapping[str, Any]]) -> str:
    """Each grid against its controls on the target figure (test): the difference of the means, the
    pooled sd, whether the grid is better by more than that sd, and Welch's p (:func:`versus`)."""
    by = groups(records)
    path = ("test", "best_mixture", *script.target)
    lines = [
        f"| recipe | --set | grid | control | {script.target[-1]} grid | control | difference | pooled sd "
        "| better by > sd | Welch p |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (recipe, extra, base, name), runs in sorted(by.items()):
        if not name.startswith("grid-") or name == "grid-1x1":
            continue
        grid = name.removeprefix("grid-")
        for control in ("lone-steps", f"lone-flops-{grid}", f"independent-{grid}"):
            others = by.get((recipe, extra, base, control))
            if not others:
                continue
            a, b = [lookup(r, path) for r in runs], [lookup(r, path) for r in others]
            cells = versus(a, b, script.higher_is_better)
            lines.append(f"| {recipe} | {extra or '-'} | {name} | {control} | {cells} |")
    return "\n".join(lines)


def summarise(script: Script, paths: Sequence[Path]) -> None:
    records = [r for r in read_logs(paths) if r.get("script") == script.name]
    if not records:
        raise SystemExit(f"no {script.name} runs in {', '.join(map(str, paths))}")
    print(table(script, records))
    print()
    print(comparisons(script, records))


# ------------------------------------------------------------------------------------------ command line
def arguments(script: Script, doc: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--grids", nargs="+", default=list(script.grids), help="ROWSxCOLS")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(script.seeds))
    parser.add_argument("--generations", type=int, default=script.generations, help="generations of every grid")
    parser.add_argument("--pairing", help="the grids' pairing (default: the recipe's)")
    parser.add_argument("--configs", nargs="+", help="run only these configurations (see --list)")
    parser.add_argument("--set", nargs="+", default=[], help="further recipe overrides, KEY=VALUE")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--output-dir", type=Path, help="keep the run directories here (default: a temporary one)")
    parser.add_argument("--log-dir", type=Path, default=LOGS, help="where <script>/<commit>.jsonl goes")
    parser.add_argument("--list", action="store_true", help="print the configurations and stop")
    parser.add_argument(
        "--summarise",
        type=Path,
        nargs="*",
        help="print the tables of these logs (files or directories; none: LOG_DIR/<script>) and stop",
    )
    return parser


def main(script: Script, doc: str, extra: Callable[[argparse.ArgumentParser], None] = lambda p: None) -> None:
    parser = arguments(script, doc)
    extra(parser)
    args = parser.parse_args()
    if args.summarise is not None:
        summarise(script, args.summarise or [args.log_dir / script.name])
        return
    if args.list:
        registries = Registries.from_plugin_manager(make_plugin_manager())
        for config in plan(script, args, registries):
            extra = " ".join(config.overrides)
            print(f"{config.name:28} {config.grid:5} {config.generations:6} generations  {config.what}  {extra}")
        return
    path = run_matrix(script, args)
    print(f"\nlog: {path}\n")
    summarise(script, [path])
