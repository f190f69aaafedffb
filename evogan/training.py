"""Train from Python: :func:`run` is ``evogan run`` as a function that returns the trained run.

The CLI's ``run`` command and :func:`run` share :func:`overrides_for` and :func:`execute`, so a recipe
trains the same way from either door, and a user mistake is the same one-line :class:`UserError` (raised
here, printed there).
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from evogan.errors import RunFailure, UserError

if TYPE_CHECKING:
    from rich.console import Console

    from evogan.runtime.single import PreparedRun
    from evogan.trained import TrainedRun

Progress = Literal["live", "plain", "quiet"]


def overrides_for(
    seed: int | None,
    generations: int | None,
    output_dir: Path | str | None,
    workers: int | None,
    sets: Iterable[str],
) -> list[str]:
    """The ``--set`` overrides that ``--seed``, ``--generations``, ``--output-dir`` and ``--workers`` stand
    for, before the explicit ones (which therefore win)."""
    overrides = []
    if seed is not None:
        overrides.append(f"run.seed={seed}")
    if generations is not None:
        overrides.append(f"run.generations={generations}")
    if output_dir is not None:
        overrides.append(f"run.output_dir={json.dumps(str(output_dir))}")
    if workers is not None:
        overrides.append(f"run.workers={workers}")
    return [*overrides, *sets]


def workers_explicit(workers: int | None, sets: Iterable[str]) -> bool:
    """Whether the user chose the worker count (then more workers than cells is their error to see)."""
    return workers is not None or any(s.replace(" ", "").startswith("run.workers=") for s in sets)


def execute(
    prepared: PreparedRun,
    *,
    stop: Callable[[], bool],
    console: Console,
    quiet: bool,
    disable: tuple[str, ...] = (),
    nodes: Any = None,
) -> dict[str, Any]:
    """Train a prepared run in this process (one worker) or through the elastic launcher (several, or
    several machines); return its summary. A run whose every cell diverged at the end raises
    :class:`RunFailure` naming the run directory, after its summary and checkpoints are written."""
    from evogan.engine.divergence import failure_line
    from evogan.runtime.launcher import Nodes
    from evogan.runtime.single import run_in_process

    nodes = nodes or Nodes(1, "", "", 600.0, None, 45.0)
    if prepared.recipe.run.workers > 1 or nodes.count > 1:
        from evogan.runtime.launcher import launch

        summary = launch(prepared, stop=stop, console=console, quiet=quiet, blocked=disable, nodes=nodes)
    else:
        summary = run_in_process(prepared, stop=stop)
    if line := failure_line(summary):
        raise RunFailure(f"{prepared.run_dir.path}: {line}")
    return summary


def run(
    recipe: str | Path | Mapping[str, Any],
    *,
    set: Sequence[str] | Mapping[str, Any] = (),  # the CLI's --set, by name
    seed: int | None = None,
    generations: int | None = None,
    workers: int | None = None,
    output_dir: str | Path | None = None,
    progress: bool | Progress = False,
    disable: Sequence[str] = (),
    device: str | None = None,
) -> TrainedRun:
    """Train the grid ``recipe`` describes and return it as :func:`evogan.load` would.

    :param recipe: a recipe file (a :class:`~pathlib.Path`, or a string naming an existing file or ending
        in ``.toml``), a recipe as TOML text, or a recipe as a dict (the tables of a recipe file).
    :param set: recipe overrides, ``["problem.batch_size=64"]`` as on the command line, or a mapping
        ``{"problem.batch_size": 64}`` (values written as TOML: strings quoted, dicts as inline tables).
    :param seed, generations, workers, output_dir: as ``evogan run``'s options of those names.
    :param progress: ``False`` or ``"quiet"`` prints nothing; ``True`` or ``"plain"`` one line per cell
        and generation; ``"live"`` the terminal view.
    :param disable: plugins not to load (``--disable-plugin``).
    :param device: where the returned run's networks live (default: the recipe's ``run.device``).
    :raises UserError: a bad recipe, key or value, missing data: the CLI's one-line message. Nothing is
        left behind (no run directory) when the recipe does not validate.
    :raises RunFailure: every cell diverged at the end (the run directory keeps what was written).

    Ctrl-C (KeyboardInterrupt) stops the run; the checkpoints written before it are intact.
    """
    from rich.console import Console

    from evogan.builtin.reporter import TerminalReporter
    from evogan.plugins import make_plugin_manager
    from evogan.runtime.single import prepare
    from evogan.trained import load

    mode: Progress = "plain" if progress is True else "quiet" if progress is False else progress
    sets = _override_lines(set)
    console = Console(soft_wrap=True, quiet=mode == "quiet")
    pm = make_plugin_manager(blocked=tuple(disable), extra=(TerminalReporter(console, mode),))
    overrides = overrides_for(seed, generations, output_dir, workers, sets)
    with _recipe_file(recipe) as (path, label):
        try:
            prepared = prepare(path, overrides=overrides, pm=pm, cap_workers=not workers_explicit(workers, sets))
        except UserError as error:  # name the recipe as the caller gave it, not the temporary file
            raise UserError(str(error).replace(str(path), label)) from None
    try:
        execute(prepared, stop=lambda: False, console=console, quiet=mode == "quiet", disable=tuple(disable))
    except UserError:
        prepared.run_dir.discard_if_unused()  # e.g. missing data: no empty run directory behind
        raise
    return load(prepared.run_dir.path, device=device, disable=tuple(disable))


def _override_lines(overrides: Sequence[str] | Mapping[str, Any]) -> list[str]:
    if isinstance(overrides, str):
        raise UserError(f"set: expected a list of KEY=VALUE strings or a mapping, got the string {overrides!r}")
    if not isinstance(overrides, Mapping):
        return [str(line) for line in overrides]
    from evogan.recipe import toml_value

    lines = []
    for key, value in overrides.items():
        try:
            lines.append(f"{key}={toml_value(value)}")
        except TypeError:
            raise UserError(f"set: {key}: cannot write {value!r} as a TOML value") from None
    return lines


@contextlib.contextmanager
def _recipe_file(recipe: str | Path | Mapping[str, Any]) -> Iterator[tuple[Path, str]]:
    """A path to the recipe and the name errors give it: the file itself, or a temporary file holding the
    TOML text or the dict."""
    if isinstance(recipe, Path) or (isinstance(recipe, str) and (recipe.endswith(".toml") or Path(recipe).is_file())):
        yield Path(recipe), str(recipe)
        return
    if isinstance(recipe, Mapping):
        from evogan.recipe import dumps_toml

        try:
            text, label = dumps_toml(recipe), "recipe (dict)"
        except TypeError as error:
            raise UserError(f"recipe (dict): {error}") from None
    elif isinstance(recipe, str):
        text, label = recipe, "recipe (TOML text)"
    else:
        raise UserError(f"recipe: expected a path, TOML text or a dict, got {type(recipe).__name__}")
    with tempfile.TemporaryDirectory(prefix="evogan-recipe-") as folder:
        path = Path(folder) / "recipe.toml"  # the run's name: run.name, else "recipe"
        path.write_text(text, encoding="utf-8")
        yield path, label


__all__ = ["execute", "overrides_for", "run", "workers_explicit"]
