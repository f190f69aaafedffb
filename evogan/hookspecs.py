"""Every extension point of evogan, as pluggy hook specifications (project name ``evogan``).

Hooks are called with keyword arguments and an implementation may accept any subset, so specs only grow at the end.
Registration hooks, one per component kind (:data:`evogan.kinds.KINDS`), receive a ``register`` callable that takes a
component class; a name registered twice is an error naming both plugins. Each lifecycle event fires once however
many processes run: per-run hooks in the process that drives the run (worker rank 0), per-cell hooks in the process
that runs the cell, and the launching process fires them for plugin objects that live only there (``extra=``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pluggy

from evogan.api import Component
from evogan.entry_points import PROJECT
from evogan.kinds import KINDS

if TYPE_CHECKING:
    from evogan.api import ComponentRegistries
    from evogan.engine.run import RunInfo
    from evogan.recipe import Recipe

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

Register = Callable[[type], None]


# ------------------------------------------------------------------------------------------ registration
def _registration_spec(base: type[Component[Any]]) -> Callable[..., None]:
    """The spec of ``base.hook``: plugins call ``register`` with their ``base`` subclasses."""

    def spec(register: Register) -> None:
        pass

    summary = (base.__doc__ or "").strip().splitlines()[0].rstrip(".")
    spec.__name__ = spec.__qualname__ = base.hook
    spec.__doc__ = (
        f"Register :class:`{base.__module__}.{base.__name__}` classes ({summary[:1].lower()}{summary[1:]}).\n\n"
        ":param register: call with each component class.\n\n"
        "Called in: every process, once per plugin manager.\n"
    )
    return hookspec(spec)


# One registration hook per component kind (evogan.kinds.KINDS): evogan_register_topologies, ...
for _base in KINDS:
    globals()[_base.hook] = _registration_spec(_base)
del _base


# ------------------------------------------------------------------------------------------ lifecycle
@hookspec
def evogan_run_start(run: RunInfo) -> None:
    """A run is about to start its first generation (or resume).

    :param run: the run's recipe, directory, cells and generations.

    Called in: the process that drives the run (worker rank 0 of a launched run), once per run.
    """


@hookspec
def evogan_exchange(
    run: RunInfo, cell: int, generation: int, received: Mapping[int, Mapping[str, Any]]
) -> None:
    """A cell gathered its neighbours' models for ``generation``.

    :param run: the run.
    :param cell: the receiving cell.
    :param generation: the generation about to be trained.
    :param received: neighbour cell -> envelope header of the message used (its ``generation`` tells how stale).

    Called in: the process that runs the cell, once per cell per generation.
    """


@hookspec
def evogan_generation_end(run: RunInfo, cell: int, generation: int, record: Mapping[str, Any]) -> None:
    """A cell finished a generation; ``record`` is the line written to ``metrics.jsonl``.

    :param run: the run.
    :param cell: the cell.
    :param generation: the generation just finished (1-based).
    :param record: the metrics record (fitness, learning rates, mixture, timings, ...); the generation's picture, if
        any, is already written (``run.run_dir.picture_path(f"gen-{generation:04d}", cell)``).

    Called in: the process that runs the cell, once per cell per generation.
    """


@hookspec
def evogan_checkpoint(run: RunInfo, cell: int, generation: int, path: Path) -> None:
    """A cell's checkpoint was written atomically to ``path``.

    Called in: the process that runs the cell, once per checkpoint written.
    """


@hookspec
def evogan_run_end(run: RunInfo, summary: Mapping[str, Any], interrupted: bool) -> None:
    """The run ended; ``summary`` is what ``summary.json`` holds.

    :param run: the run.
    :param summary: every cell's final metrics and the best mixture (``{}`` when workers failed before writing one).
    :param interrupted: True when the run stopped early (Ctrl-C) after writing checkpoints.

    Called in: the process that drives the run (worker rank 0 of a launched run), once per run.
    """


# ------------------------------------------------------------------------------------------ questions
@hookspec(firstresult=True)
def evogan_training_cost(recipe: Recipe, registries: ComponentRegistries) -> Mapping[str, list[float]] | None:
    """The training cost of ``recipe``'s run, cumulative after each generation 1, 2, ...:
    ``{"flops": [...], "steps": [...]}`` (FLOPs of the whole grid, training steps of one cell), which
    ``evogan sweep`` records beside each run's scores; None where this plugin does not count the recipe's
    problem (the GAN problem's distribution counts its own). The first answer that is not None is used.

    :param recipe: the run's recipe, validated.
    :param registries: every component kind's registry, to build what the recipe names.

    Called in: a process of its own that ``evogan sweep`` starts per finished run (``python -m evogan.sweep
    RUN_DIR``).
    """


__all__ = ["PROJECT", "Register", "hookimpl", "hookspec"]
