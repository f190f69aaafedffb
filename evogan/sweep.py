"""``evogan sweep``: a recipe run once per seed and per combination of ``--vary`` values, each run an
``evogan run`` subprocess (runs are isolated; ``--jobs`` of them at a time, the machine's cores split
between them through ``run.threads``), each finished run one JSON line appended to a log that
``evogan compare`` reads.

A line holds what the run's ``summary.json`` reports (the mixture chosen on the validation stream, its
test and validation figures, the test means over the cells), the recipe's path and digest, evogan's
version and commit, the seed, the variation, wall and CPU time and the machine's load; with ``--along``,
every kept checkpoint scored too (:mod:`evogan.along`). A run whose key (recipe path, variation, seed,
generations, ``--set``) is already in the log is skipped, so a stopped sweep resumes where it stopped.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from evogan.cli_common import handle_errors, leave
from evogan.errors import RunFailure, UserError
from evogan.version import __version__

STOPPED = 130  # evogan run's exit code after Ctrl-C: checkpoints written, no summary to log


# ------------------------------------------------------------------------------------------ planning
def split_values(text: str) -> list[str]:
    """``V1,V2,...`` split at the commas outside brackets, braces and quotes, so a component table
    (``{use="a"},{use="b"}``) or a list stays one value."""
    values: list[str] = []
    current: list[str] = []
    depth, quote = 0, ""
    for char in text:
        if quote:
            quote = "" if char == quote else quote
        elif char in "\"'":
            quote = char
        elif char in "[{(":
            depth += 1
        elif char in "]})":
            depth -= 1
        elif char == "," and depth == 0:
            values.append("".join(current).strip())
            current = []
            continue
        current.append(char)
    values.append("".join(current).strip())
    return values


def parse_variations(vary: Iterable[str]) -> list[tuple[str, list[str]]]:
    """``KEY=V1,V2`` options as (key, values); ``UserError`` for a malformed one or a repeated key."""
    out: list[tuple[str, list[str]]] = []
    for text in vary:
        key, sep, rest = text.partition("=")
        key = key.strip()
        values = split_values(rest)
        if not sep or not key or not all(values):
            raise UserError(f"--vary {text!r}: expected KEY=V1,V2,... (values as --set takes them)")
        if key in (k for k, _ in out):
            raise UserError(f"--vary {key}: given twice; list every value in one --vary")
        out.append((key, values))
    return out


def configurations(variations: Sequence[tuple[str, list[str]]]) -> list[dict[str, str]]:
    """The cartesian product of the variations, in the order given (one empty one when none)."""
    keys = [key for key, _ in variations]
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*(v for _, v in variations))]


def label(variation: dict[str, str]) -> str:
    """A configuration's name: its ``KEY=VALUE`` pairs, or ``recipe`` when nothing varies."""
    return " ".join(f"{key}={value}" for key, value in variation.items()) or "recipe"


def run_key(recipe: Path, variation: dict[str, str], seed: int, generations: int | None, sets: Sequence[str]) -> str:
    """What makes a run the same run for resuming (the recipe's digest left out: editing a recipe's
    comments does not rerun the sweep)."""
    fields = {"recipe": str(recipe), "vary": variation, "seed": seed, "generations": generations, "set": list(sets)}
    return json.dumps(fields, sort_keys=True)


def read_keys(log: Path) -> set[str]:
    """The keys of the runs ``log`` already holds (none when it does not exist); lines that are not JSON
    (a half line from a full disk) are ignored here: ``evogan compare`` names them."""
    if not log.exists():
        return set()
    keys = set()
    for line in log.read_text(encoding="utf-8").splitlines():
        with contextlib.suppress(json.JSONDecodeError, TypeError):
            record = json.loads(line)
            if isinstance(record, dict) and isinstance(record.get("key"), str):
                keys.add(record["key"])
    return keys


def append_line(path: Path, record: dict[str, Any]) -> None:
    """One run, one line, in one ``O_APPEND`` write: sweeps sharing a log never interleave halves."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = (json.dumps(record, sort_keys=True) + "\n").encode()
    handle = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        written = os.write(handle, data)
        if written != len(data):
            raise OSError(f"{path}: wrote {written} of {len(data)} bytes")
    finally:
        os.close(handle)


def git_commit() -> dict[str, Any]:
    """The commit of evogan's own checkout and whether it had changes; empty when not a git checkout."""
    where = Path(__file__).resolve().parent

    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", *args], cwd=where, capture_output=True, text=True, check=False)

    try:
        head = git("rev-parse", "--short=12", "HEAD")
        if head.returncode != 0:
            return {}
        return {"commit": head.stdout.strip(), "dirty": git("diff", "--quiet", "HEAD", "--").returncode != 0}
    except OSError:  # no git at all
        return {}


# ------------------------------------------------------------------------------------------ running
@dataclass
class Job:
    recipe: Path
    seed: int
    variation: dict[str, str]
    key: str
    run_dir: Path


@dataclass
class Outcome:
    job: Job
    status: str  # "done", "failed" or "stopped"
    message: str = ""
    record: dict[str, Any] = field(default_factory=dict)


class Sweep:
    """Runs jobs ``jobs`` at a time; :meth:`stop` (Ctrl-C) stops launching and asks the running ones to
    stop (SIGINT: they end at their generation's end, checkpoints written), a second time kills them."""

    def __init__(self, *, jobs: int, threads: int, sets: Sequence[str], generations: int | None, along: bool) -> None:
        self.jobs, self.threads, self.sets, self.generations, self.along = jobs, threads, list(sets), generations, along
        self.stopping = 0
        self._children: set[subprocess.Popen[bytes]] = set()
        self._lock = threading.Lock()

    def stop(self, *_: Any) -> None:
        self.stopping += 1
        with self._lock:
            for child in self._children:
                with contextlib.suppress(ProcessLookupError):
                    child.send_signal(signal.SIGINT if self.stopping == 1 else signal.SIGKILL)

    def _child(self, command: list[str], stderr: Path) -> tuple[int, float, float, bytes]:
        """Run ``command`` in its own session (Ctrl-C reaches it through :meth:`stop` only); return
        (exit code, wall seconds, CPU seconds of the child, its stdout)."""
        env = {**os.environ, "OMP_NUM_THREADS": str(self.threads), "MKL_NUM_THREADS": str(self.threads)}
        stderr.parent.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        with stderr.open("wb") as err, self._lock:
            if self.stopping:
                return STOPPED, 0.0, 0.0, b""
            child = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, env=env, start_new_session=True
            )
            self._children.add(child)
        try:
            output = child.stdout.read() if child.stdout else b""
            _, status, usage = os.wait4(child.pid, 0)
            child.returncode = os.waitstatus_to_exitcode(status)
        finally:
            with self._lock:
                self._children.discard(child)
            if child.stdout:
                child.stdout.close()
        code = child.returncode if child.returncode >= 0 else 128 - child.returncode
        return code, time.perf_counter() - started, usage.ru_utime + usage.ru_stime, output

    def run(self, job: Job) -> Outcome:
        """Run ``job`` to its outcome; whatever goes wrong here fails this run alone."""
        try:
            return self._run(job)
        except Exception as exc:  # e.g. an unreadable scoring output, a full disk: named, the others go on
            return Outcome(job, "failed", f"{type(exc).__name__}: {exc}")

    def _run(self, job: Job) -> Outcome:
        if self.stopping:
            return Outcome(job, "stopped")
        command = [sys.executable, "-m", "evogan", "run", str(job.recipe), "--quiet", "--seed", str(job.seed)]
        command += ["--run-dir", str(job.run_dir), "--set", f"run.threads={self.threads}"]
        if self.generations is not None:
            command += ["--generations", str(self.generations)]
        for setting in [*self.sets, *(f"{k}={v}" for k, v in job.variation.items())]:
            command += ["--set", setting]
        load_before = os.getloadavg()
        errors = job.run_dir.parent / f".{job.run_dir.name}.stderr"
        code, wall, cpu, _ = self._child(command, errors)
        if code == STOPPED or self.stopping:
            errors.unlink(missing_ok=True)
            return Outcome(job, "stopped")
        if code != 0:  # the whole stderr stays beside the run directories
            return Outcome(job, "failed", f"exit {code}: {last_line(errors)} (all of it: {errors})")
        summary_path = job.run_dir / "summary.json"
        try:
            summary = json.loads(summary_path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            return Outcome(job, "failed", f"{summary_path}: cannot read ({type(exc).__name__})")
        errors.unlink(missing_ok=True)
        if summary.get("interrupted"):
            return Outcome(job, "stopped")
        record = self._record(job, summary, wall, cpu, load_before)
        costs = self._costs(job, errors)
        generations = int(record["generations"] or 0)
        if 0 < generations <= len(costs.get("flops", [])):
            record["training_flops"] = costs["flops"][generations - 1]
            record["steps"] = int(costs["steps"][generations - 1])
        if self.along:
            evaluate = [sys.executable, "-m", "evogan", "evaluate", str(job.run_dir), "--along", "--json"]
            code, scoring_wall, scoring_cpu, output = self._child(evaluate, errors)
            if code == STOPPED or self.stopping:
                errors.unlink(missing_ok=True)
                return Outcome(job, "stopped")
            if code != 0:
                return Outcome(job, "failed", f"scoring along: exit {code}: {last_line(errors)} (all of it: {errors})")
            errors.unlink(missing_ok=True)
            rows = json.loads(output.decode())["along"]
            record["along"] = [along_row(row, costs.get("flops", [])) for row in rows]
            record["along_wall_s"], record["along_cpu_s"] = scoring_wall, scoring_cpu
        return Outcome(job, "done", record=record)

    def _costs(self, job: Job, errors: Path) -> dict[str, list[float]]:
        """The run's cumulative training FLOPs and steps per generation (the ``evogan_training_cost`` hook,
        in a process of its own: :func:`training_cost`); empty when no plugin counts them or it fails."""
        code, _, _, output = self._child([sys.executable, "-m", "evogan.sweep", str(job.run_dir)], errors)
        errors.unlink(missing_ok=True)
        if code != 0:
            return {}
        with contextlib.suppress(json.JSONDecodeError, AttributeError):
            costs = json.loads(output.decode())
            if isinstance(costs, dict):
                return costs
        return {}

    def _record(
        self, job: Job, summary: dict[str, Any], wall: float, cpu: float, load_before: tuple[float, ...]
    ) -> dict[str, Any]:
        problem = summary.get("problem", {})
        return {
            "key": job.key,
            "recipe": str(job.recipe),
            "recipe_digest": summary.get("recipe"),
            "evogan": __version__,
            **git_commit(),
            "seed": job.seed,
            "vary": job.variation,
            "config": label(job.variation),
            "set": self.sets,
            "requested_generations": self.generations,
            "generations": summary.get("generations"),
            "best_cell": summary.get("best_cell"),
            "test": (summary.get("chosen") or {}).get("test"),
            "validation": (summary.get("chosen") or {}).get("validation"),
            "mean_over_cells": summary.get("mean_over_cells"),
            "metric": metric_of(problem.get("metric")),
            "wall_s": round(wall, 3),
            "cpu_s": round(cpu, 3),
            "threads": self.threads,
            "jobs": self.jobs,
            "machine": {
                "load": [round(x, 2) for x in load_before],
                "load_end": [round(x, 2) for x in os.getloadavg()],
                "cpus": os.cpu_count(),
            },
            "run_dir": str(job.run_dir),
            "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }


def along_row(row: dict[str, Any], flops: Sequence[float] = ()) -> dict[str, Any]:
    """An ``evogan evaluate --along --json`` row in a sweep line's shape (``flops``: cumulative training
    FLOPs per generation, when known)."""
    out = {"generation": row["generation"], **({"steps": row["steps"]} if "steps" in row else {})}
    if 0 < row["generation"] <= len(flops):
        out["training_flops"] = flops[row["generation"] - 1]
    return out | {
        "test": row["chosen"]["test"],
        "validation": row["chosen"]["validation"],
        "mean_over_cells": row["mean_over_cells"],
        "best_cell": row["best_cell"],
    }


@functools.cache
def metric_of(name: Any) -> dict[str, Any] | None:
    """The metric's name, its primary figure and direction (None when the plugin cannot be found)."""
    if not isinstance(name, str):
        return None
    try:
        from evogan.plugins import make_plugin_manager
        from evogan.registry import Registries

        component: Any = Registries.from_plugin_manager(make_plugin_manager())["metric"].get(name)
        return {"name": name, "primary": component.primary, "lower_is_better": bool(component.lower_is_better)}
    except Exception:  # the line is still worth keeping without it
        return {"name": name}


def last_line(path: Path) -> str:
    """The child's last non-empty line of stderr (its one-line error), without the ``error:`` prefix."""
    try:
        lines = [line.strip() for line in path.read_text(encoding="utf-8", errors="replace").splitlines()]
    except OSError:
        return "no error output"
    lines = [line for line in lines if line]
    return lines[-1].removeprefix("error:").strip() if lines else "no error output"


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-")[:60] or "recipe"


def plan(
    recipe: Path,
    seeds: Sequence[int],
    variations: Sequence[tuple[str, list[str]]],
    generations: int | None,
    sets: Sequence[str],
    output_dir: Path,
) -> list[Job]:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    jobs = []
    for variation in configurations(variations):
        for seed in seeds:
            name = f"{slug(recipe.stem)}-{slug(label(variation))}-seed{seed}-{stamp}"
            key = run_key(recipe, variation, seed, generations, sets)
            jobs.append(Job(recipe, seed, variation, key, output_dir / name))
    return jobs


# ------------------------------------------------------------------------------------------ command
def positionals(recipe: str, rest: Sequence[str], seeds: Sequence[int]) -> tuple[Path, tuple[int, ...]]:
    """The recipe and every seed from the command line: a click option takes one value, so the rest of
    ``--seeds 1 2 3`` arrives as positional arguments, before or after RECIPE."""
    words = [recipe, *rest]
    paths = [word for word in words if not word.lstrip("-").isdigit()]
    if len(paths) != 1:
        raise UserError(f"expected one RECIPE and integer seeds; got {' '.join(words)}")
    return Path(paths[0]), (*seeds, *(int(word) for word in words if word.lstrip("-").isdigit()))


class _SweepCommand(click.Command):
    """Usage without the unnamed argument that collects the rest of ``--seeds 1 2 3``."""

    def collect_usage_pieces(self, ctx: click.Context) -> list[str]:
        return [piece for piece in super().collect_usage_pieces(ctx) if piece.strip()]


@click.command(cls=_SweepCommand)
@click.argument("recipe")
@click.argument("more_seeds", nargs=-1, metavar="")
@click.option(
    "--seeds",
    type=int,
    multiple=True,
    required=True,
    metavar="S [S ...]",
    help="The seeds every configuration runs with: --seeds 1 2 3 (or --seeds 1 --seeds 2 ...).",
)
@click.option(
    "--vary",
    multiple=True,
    metavar="KEY=V1,V2",
    help="A recipe key and the values to try, as --set takes them; commas inside {} [] and quotes do not split "
    "(problem.batch_size=50,100 or problem.loss={use=\"bce\"},{use=\"hinge\"}). Repeatable: every combination runs.",
)
@click.option(
    "--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override a recipe key in every run. Repeatable."
)
@click.option("--generations", type=click.IntRange(min=1), help="Override run.generations in every run.")
@click.option(
    "--jobs",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Runs at a time; each gets run.threads = cores // jobs (at least 1).",
)
@click.option(
    "--log",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("sweep.jsonl"),
    show_default=True,
    help="JSONL file every finished run appends its line to; runs already in it are skipped.",
)
@click.option(
    "--output-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("runs"),
    show_default=True,
    help="Where the runs' directories go.",
)
@click.option(
    "--along",
    is_flag=True,
    help="Also score every checkpoint each run kept (evogan evaluate --along): the line gets the curve of "
    "test figures against steps. How many are kept: run.checkpoint_every and run.keep_checkpoints.",
)
@handle_errors
def sweep(
    recipe: str,
    more_seeds: tuple[str, ...],
    seeds: tuple[int, ...],
    vary: tuple[str, ...],
    sets: tuple[str, ...],
    generations: int | None,
    jobs: int,
    log: Path,
    output_dir: Path,
    along: bool,
) -> None:
    """Run RECIPE once per seed and per combination of the --vary values, each run its own `evogan run`
    process, and append one JSON line per finished run to --log (read by `evogan compare`). Ctrl-C stops
    launching and stops the running ones at their generation's end; finished lines stay."""
    from rich.console import Console
    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    path, seeds = positionals(recipe, more_seeds, seeds)
    if not path.is_file():
        raise UserError(f"{path}: recipe not found")
    if len(set(seeds)) != len(seeds):
        raise UserError(f"--seeds {' '.join(map(str, seeds))}: a seed is given twice")
    variations = parse_variations(vary)
    planned = plan(path, seeds, variations, generations, sets, output_dir)
    done = read_keys(log)
    pending = [job for job in planned if job.key not in done]
    console = Console(stderr=True, highlight=False, soft_wrap=True)
    if skipped := len(planned) - len(pending):
        console.print(f"{skipped} of {len(planned)} runs already in {log}: skipped")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    threads = max(1, cores // jobs)
    for setting in sets:  # the user's run.threads wins (it comes later on each run's command line)
        key, _, value = setting.replace(" ", "").partition("=")
        if key == "run.threads" and value.isdigit():
            threads = int(value)
    runner = Sweep(jobs=jobs, threads=threads, sets=sets, generations=generations, along=along)
    failed: list[Outcome] = []
    stopped = 0
    previous = signal.signal(signal.SIGINT, runner.stop)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    try:
        with Progress(*columns, console=console, transient=False) as progress, ThreadPoolExecutor(jobs) as pool:
            task = progress.add_task(f"sweep ({jobs} at a time, {threads} threads each)", total=len(pending))
            futures = [pool.submit(runner.run, job) for job in pending]
            for future in futures:
                while not future.done():
                    time.sleep(0.1)  # a short wait: Ctrl-C's handler runs in this thread
                outcome = future.result()
                name = f"{label(outcome.job.variation)} seed {outcome.job.seed}"
                if outcome.status == "done":
                    append_line(log, outcome.record)
                    progress.console.print(f"done: {escape(name)} ({outcome.record['wall_s']:.0f} s)")
                elif outcome.status == "failed":
                    failed.append(outcome)
                    progress.console.print(f"[red]failed:[/] {escape(name)}: {escape(outcome.message)}")
                else:
                    stopped += 1
                progress.advance(task)
    finally:
        signal.signal(signal.SIGINT, previous)
    finished = len(pending) - len(failed) - stopped
    console.print(f"{finished} runs logged to {log}; {len(failed)} failed; {stopped} stopped; {skipped} skipped")
    if runner.stopping:
        leave(STOPPED)
    if failed:
        raise RunFailure(f"{len(failed)} of {len(pending)} runs failed (each named above)")


def training_cost(run_dir: Path) -> dict[str, list[float]]:
    """What a plugin's ``evogan_training_cost`` answers for the recipe of ``run_dir`` (``{}``: none does)."""
    from evogan import recipe as recipes
    from evogan.engine.rundir import RunDirectory
    from evogan.plugins import make_plugin_manager
    from evogan.registry import Registries

    pm = make_plugin_manager()
    registries = Registries.from_plugin_manager(pm)
    recipe = recipes.load(RunDirectory.open_existing(run_dir).recipe_path, registries)
    return dict(pm.hook.evogan_training_cost(recipe=recipe, registries=registries) or {})


if __name__ == "__main__":  # the child process of Sweep._costs: python -m evogan.sweep RUN_DIR
    print(json.dumps(training_cost(Path(sys.argv[1]))))


__all__ = [
    "Job",
    "Outcome",
    "Sweep",
    "configurations",
    "label",
    "parse_variations",
    "plan",
    "read_keys",
    "run_key",
    "sweep",
    "training_cost",
]
