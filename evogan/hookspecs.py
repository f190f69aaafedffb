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
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from evogan.engine.run import RunInfo

PROJECT = "evogan"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

Register = Callable[[type], None]


# ------------------------------------------------------------------------------------------ registration
@hookspec
def evogan_register_topologies(register: Register) -> None:
    """Register :class:`evogan.api.Topology` classes (which cells neighbour which).

    :param register: call with each component class.

    Called in: every process, once per plugin manager.
    """


@hookspec
def evogan_register_selections(register: Register) -> None:
    """Register :class:`evogan.api.Selection` classes (parent selection over a neighbourhood).

    :param register: call with each component class.

    Called in: every process, once per plugin manager.
    """


@hookspec
def evogan_register_mutations(register: Register) -> None:
    """Register :class:`evogan.api.Mutation` classes (hyper-parameter mutation).

    :param register: call with each component class.

    Called in: every process, once per plugin manager.
    """


@hookspec
def evogan_register_sparsity_controllers(register: Register) -> None:
    """Register :class:`evogan.api.SparsityController` classes (masks, density control).

    :param register: call with each component class.

    Called in: every process, once per plugin manager.
    """


@hookspec
def evogan_register_problems(register: Register) -> None:
    """Register :class:`evogan.api.Problem` classes (what coevolves: the GAN problem).

    :param register: call with each component class.

    Called in: every process, once per plugin manager.
    """


@hookspec
def evogan_register_datasets(register: Register) -> None:
    """Register :class:`evogan.api.Dataset` classes (real data for the GAN problem).

    :param register: call with each component class.

    Called in: every process, once per plugin manager.
    """


@hookspec
def evogan_register_networks(register: Register) -> None:
    """Register :class:`evogan.api.Networks` classes (generator/discriminator architecture pairs).

    :param register: call with each component class.

    Called in: every process, once per plugin manager.
    """


@hookspec
def evogan_register_losses(register: Register) -> None:
    """Register :class:`evogan.api.Loss` classes (adversarial losses).

    :param register: call with each component class.

    Called in: every process, once per plugin manager.
    """


@hookspec
def evogan_register_metrics(register: Register) -> None:
    """Register :class:`evogan.api.Metric` classes (sample quality scores).

    :param register: call with each component class.

    Called in: every process, once per plugin manager.
    """


@hookspec
def evogan_register_transports(register: Register) -> None:
    """Register :class:`evogan.api.Transport` classes (how neighbour models travel).

    :param register: call with each component class.

    Called in: every process, once per plugin manager.
    """


@hookspec
def evogan_register_pairings(register: Register) -> None:
    """Register :class:`evogan.api.Pairing` classes (who each training step trains against).

    :param register: call with each component class.

    Called in: every process, once per plugin manager.
    """


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
    :param record: the metrics record (fitness, learning rates, mixture, timings, ...).

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
