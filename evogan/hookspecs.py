"""Every extension point of evogan, as pluggy hook specifications (project name ``evogan``).

Lifecycle of a run, and where each hook fires::

    make_plugin_manager ─ built-ins + entry points "evogan" ─► evogan_register_* (once per manager)
    evogan run RECIPE ─► evogan_run_start
                          └─ per generation, per cell: train ─► evogan_exchange ─► evogan_generation_end
                                                          └─ every k generations: evogan_checkpoint
                     ─► evogan_run_end

Hooks are always called with keyword arguments; an implementation may accept any subset of a spec's
arguments, so specs only ever grow at the end. Registration hooks receive a ``register`` callable; call it
with a component class (see :mod:`evogan.api`). A name registered twice is an error naming both plugins.

Each lifecycle event fires once, whatever the number of worker processes or machines:

- per run (``evogan_run_start``, ``evogan_run_end``): in the process that drives the run, with the whole
  run's payload. That is the only process of a single-process run, and worker rank 0 of a launched run
  (``evogan run --workers N``, ``--nnodes``, or ``torchrun ... -m evogan.worker``);
- per cell (``evogan_exchange``, ``evogan_generation_end``, ``evogan_checkpoint``): in the process that
  runs the cell.

Workers load the built-ins, the entry-point plugins and ``EVOGAN_PLUGINS`` themselves. A plugin object
that lives only in the process that called ``evogan run`` (the CLI's terminal reporter, ``extra=``
objects) cannot run there: that process fires ``evogan_run_start``, ``evogan_generation_end`` (read back
from ``metrics.jsonl``, with the same record) and ``evogan_run_end`` (with ``summary.json``) for those
plugins alone, so each plugin still sees each event once.

There is one registration hook per component kind, made below from :data:`evogan.api.KINDS` (each base
class names its hook); docs/reference.md lists them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pluggy

from evogan.api import KINDS, Component
from evogan.plugin_manager import PROJECT

if TYPE_CHECKING:
    from evogan.engine.run import RunInfo

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
        f"Register :class:`evogan.api.{base.__name__}` classes ({summary[:1].lower()}{summary[1:]}).\n\n"
        ":param register: call with each component class.\n\n"
        "Called in: every process, once per plugin manager.\n"
    )
    return hookspec(spec)


# One registration hook per component kind (evogan.api.KINDS): evogan_register_topologies, ...
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
    :param received: neighbour cell -> envelope header of the message used (``generation`` in it tells
        how stale it was).

    Called in: the process that runs the cell, once per cell per generation.
    """


@hookspec
def evogan_generation_end(run: RunInfo, cell: int, generation: int, record: Mapping[str, Any]) -> None:
    """A cell finished a generation; ``record`` is the line written to ``metrics.jsonl``.

    :param run: the run.
    :param cell: the cell.
    :param generation: the generation just finished (1-based).
    :param record: the metrics record (fitness, learning rates, mixture, timings, ...). The
        generation's sample picture, when ``run.samples_every`` asks for one, is already written
        (``run.run_dir.picture_path(f"gen-{generation:04d}", cell)``).

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
    :param summary: final metrics of every cell of the run and the best mixture ensemble (``{}`` when
        the launching process reports workers that failed before writing one).
    :param interrupted: True when the run stopped early (Ctrl-C) after writing checkpoints.

    Called in: the process that drives the run (worker rank 0 of a launched run), once per run.
    """


__all__ = ["PROJECT", "Register", "hookimpl", "hookspec"]
