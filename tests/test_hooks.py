"""Lifecycle hooks fire once per event, in the process hookspecs.py names, whatever the number of
workers: a plugin loaded everywhere (``EVOGAN_PLUGINS``) logs each call, and the logs of one process, two
launched workers and two torchrun agents hold the same events with the same payloads."""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from hook_recorder import LOG_ENV

from evogan import hookimpl
from evogan.plugins import PLUGINS_ENV, make_plugin_manager
from evogan.runtime.launcher import launch
from evogan.runtime.single import prepare, run_in_process

TESTS = Path(__file__).resolve().parent
CELLS, GENERATIONS = 4, 2


@pytest.fixture
def hook_log(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Load tests/hook_recorder.py in this process and in every worker a run starts."""
    monkeypatch.setenv(PLUGINS_ENV, "hook_recorder")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])))
    path = tmp_path / "hooks.jsonl"
    monkeypatch.setenv(LOG_ENV, str(path))
    return path


def take(log: Path) -> list[dict[str, Any]]:
    """The logged calls, oldest first; the log is emptied for the next run."""
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    log.unlink()
    return entries


def events(entries: list[dict[str, Any]]) -> list[str]:
    """Every call with its payload facts, without the process: a sorted multiset."""
    return sorted(json.dumps({k: v for k, v in e.items() if k != "pid"}, sort_keys=True) for e in entries)


def test_a_single_process_run_fires_each_event_once(tiny_recipe, hook_log: Path) -> None:
    run_in_process(prepare(tiny_recipe(generations=GENERATIONS)))
    entries = take(hook_log)
    counts = Counter(e["hook"] for e in entries)
    per_cell = CELLS * GENERATIONS
    assert counts == {
        "evogan_run_start": 1,
        "evogan_exchange": per_cell,
        "evogan_generation_end": per_cell,
        "evogan_checkpoint": per_cell + CELLS,  # checkpoint_every = 1, and every cell at the end
        "evogan_run_end": 1,
    }
    assert [e["hook"] for e in (entries[0], entries[-1])] == ["evogan_run_start", "evogan_run_end"]
    ends = [e for e in entries if e["hook"] == "evogan_generation_end"]
    assert sorted((e["cell"], e["generation"]) for e in ends) == [
        (c, g) for c in range(CELLS) for g in range(1, GENERATIONS + 1)
    ]
    assert all(e["record"]["cell"] == e["cell"] and e["record"]["generation"] == e["generation"] for e in ends)
    assert entries[-1]["cells"] == [str(c) for c in range(CELLS)] and entries[-1]["generations"] == GENERATIONS
    assert len({e["pid"] for e in entries}) == 1


class LauncherOnly:
    """A plugin object the workers cannot load: the launching process replays the run hooks for it."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.summary: Mapping[str, Any] = {}

    @hookimpl
    def evogan_run_start(self) -> None:
        self.calls["evogan_run_start"] += 1

    @hookimpl
    def evogan_generation_end(self, cell: int, record: Mapping[str, Any]) -> None:
        assert record["cell"] == cell and "timings" in record
        self.calls["evogan_generation_end"] += 1

    @hookimpl
    def evogan_run_end(self, summary: Mapping[str, Any]) -> None:
        self.calls["evogan_run_end"] += 1
        self.summary = summary


@pytest.mark.slow
def test_workers_and_agents_fire_the_same_events_as_one_process(tiny_recipe, hook_log: Path) -> None:
    from test_distributed import finish, free_port, torchrun

    recipe = tiny_recipe(generations=GENERATIONS)
    run_in_process(prepare(recipe))
    single = take(hook_log)

    only_here = LauncherOnly()
    launch(prepare(recipe, overrides=["run.workers=2"], pm=make_plugin_manager(extra=[only_here])))
    workers = take(hook_log)
    assert events(workers) == events(single)
    per_run = [e for e in workers if e["hook"] in ("evogan_run_start", "evogan_run_end")]
    assert len(per_run) == 2 and per_run[0]["pid"] == per_run[1]["pid"]  # rank 0 drives
    assert len({e["pid"] for e in workers}) == 2 and os.getpid() not in {e["pid"] for e in workers}
    assert only_here.calls == {"evogan_run_start": 1, "evogan_generation_end": CELLS * GENERATIONS, "evogan_run_end": 1}
    assert sorted(only_here.summary["cells"]) == [str(c) for c in range(CELLS)]

    port = free_port()
    results = finish([torchrun(recipe, recipe.parent / "agents", port, "hooks") for _ in range(2)])
    assert [code for code, _ in results] == [0, 0], results
    assert events(take(hook_log)) == events(single)
