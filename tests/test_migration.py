"""Migration (``population.migration_every``): a better neighbour's pair moves in, a worse one does not,
records say so, and runs stay reproducible and resume exactly."""

from __future__ import annotations

import pytest
import torch
from click.testing import CliRunner
from test_pairing import centre_cell
from test_run import metrics as records
from test_run import run

from evogan.cli import _attach_commands, cli
from evogan.engine import migration
from evogan.runtime.single import prepare, run_in_process

_attach_commands()
IN_PLACE = ("population.selection=false", 'problem.pairing.use="own_pair"')


def scored(monkeypatch: pytest.MonkeyPatch, scores: dict[int, float]) -> None:
    """Validation scores by the cell an individual came from (the cell's own: its index)."""
    monkeypatch.setattr(migration, "validation_score", lambda cell, individual: scores[individual.origin])


def test_a_better_neighbours_pair_moves_in(tiny_recipe, monkeypatch: pytest.MonkeyPatch) -> None:
    cell = centre_cell(tiny_recipe, list(IN_PLACE))
    pool = {role: cell.neighbourhood(role) for role in cell.roles}
    data = cell.problem.fitness_batch(generator=torch.Generator().manual_seed(0), cell=cell.index)
    from evogan.rng import CellRandom

    rnd = CellRandom.for_generation(1, cell.index, 1)
    cell.evaluate(pool["generator"], pool["discriminator"], data, rnd)
    uids = {role: cell.population(role)[0].uid for role in cell.roles}
    scored(monkeypatch, {4: 2.0, 1: 3.0, 3: 1.0, 5: 1.5, 7: 9.0})
    assert migration.migrate(cell, pool, data, rnd) == 3
    for role in cell.roles:
        (moved,) = cell.population(role)
        source = cell.foreign[3][role]
        assert moved is not source and moved.origin == 4 and moved.uid == uids[role]
        assert all(
            torch.equal(a, b) for a, b in zip(moved.network.parameters(), source.network.parameters(), strict=True)
        )
        assert moved.optimizer is not None and moved.fitness.loss is not None  # trains on, re-scored here


def test_a_cell_better_than_its_neighbours_keeps_its_pair(tiny_recipe, monkeypatch: pytest.MonkeyPatch) -> None:
    cell = centre_cell(tiny_recipe, list(IN_PLACE))
    before = {role: cell.population(role)[0] for role in cell.roles}
    scored(monkeypatch, {4: 1.0, 1: 3.0, 3: 1.0, 5: 1.5, 7: 9.0})  # a tie is no reason to move
    pool = {role: cell.neighbourhood(role) for role in cell.roles}
    assert migration.migrate(cell, pool, None, None) is None  # type: ignore[arg-type]
    assert {role: cell.population(role)[0] for role in cell.roles} == before


def test_records_name_the_migrations_and_runs_resume_exactly(tiny_recipe) -> None:
    path = tiny_recipe(seed=3, generations=4, varied=True)
    overrides = (*IN_PLACE, "population.migration_every=2")
    straight = run(path, *overrides)
    lines = records(straight)
    assert all(("migrated_from" in r) for r in lines)
    assert all(r["migrated_from"] is None for r in lines if r["generation"] % 2)  # only every second generation
    assert all(r["migrated_from"] in (None, *range(4)) for r in lines)
    again = run(path, *overrides)
    assert (straight / "metrics.jsonl").read_bytes() == (again / "metrics.jsonl").read_bytes()
    interrupted = run(path, *overrides, stop_after=2)
    run_in_process(prepare(None, resume_dir=interrupted))
    assert (interrupted / "metrics.jsonl").read_bytes() == (straight / "metrics.jsonl").read_bytes()
    plain = records(run(path, *IN_PLACE))
    assert all("migrated_from" not in r for r in plain)  # off: the records stay as they were


def test_a_negative_migration_interval_is_a_one_line_recipe_error(tiny_recipe) -> None:
    result = CliRunner().invoke(cli, ["validate", str(tiny_recipe()), "--set", "population.migration_every=-1"])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and "population.migration_every" in lines[0]
