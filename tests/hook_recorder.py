"""A plugin for tests/test_hooks.py, loaded in every process of a run through ``EVOGAN_PLUGINS``: each
lifecycle hook call appends one JSON line (the hook, the process and what its payload holds) to the file
``EVOGAN_HOOK_LOG`` names. Lines are short, so appends from several processes do not interleave."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evogan import hookimpl

LOG_ENV = "EVOGAN_HOOK_LOG"


def _write(hook: str, **facts: Any) -> None:
    path = os.environ.get(LOG_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"hook": hook, "pid": os.getpid(), **facts}) + "\n")


def _run(run: Any) -> dict[str, Any]:
    return {"cells": run.cells, "generations": run.generations, "start": run.start_generation}


@hookimpl
def evogan_run_start(run: Any) -> None:
    _write("evogan_run_start", run=_run(run))


@hookimpl
def evogan_exchange(run: Any, cell: int, generation: int, received: Mapping[int, Mapping[str, Any]]) -> None:
    _write("evogan_exchange", cell=cell, generation=generation, peers=sorted(received))


@hookimpl
def evogan_generation_end(run: Any, cell: int, generation: int, record: Mapping[str, Any]) -> None:
    _write(
        "evogan_generation_end",
        cell=cell,
        generation=generation,
        record={"cell": record["cell"], "generation": record["generation"], "keys": sorted(record)},
        # the workers' runtime annotates its own observations (peer ages, transport counts): not engine events
        timings=sorted(set(record["timings"]) - {"liveness", "transport"}),
    )


@hookimpl
def evogan_checkpoint(run: Any, cell: int, generation: int, path: Path) -> None:
    _write("evogan_checkpoint", cell=cell, generation=generation, exists=path.exists())


@hookimpl
def evogan_run_end(run: Any, summary: Mapping[str, Any], interrupted: bool) -> None:
    _write(
        "evogan_run_end",
        run=_run(run),
        cells=sorted(summary.get("cells", {})),
        generations=summary.get("generations"),
        interrupted=interrupted,
    )
