"""The generators' moving average (``problem.g_ema``): it trails the weights without changing training,
evaluation uses it, and it survives selection, checkpoints, resume, stacking and the exchange."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from click.testing import CliRunner
from test_exchange import two_cells  # pytest puts tests/ on sys.path (rootdir conftest, prepend mode)
from test_run import metrics, run

from evogan.cli import _attach_commands, cli
from evogan.engine.rundir import RunDirectory
from evogan.individual import AVERAGE
from evogan.runtime.single import prepare, run_in_process

LOSSES = ("g_loss", "d_loss", "lr_g", "lr_d")


def generators(run_dir: Path, cell: int, generation: int) -> list[dict[str, Any]]:
    return RunDirectory(run_dir).load_checkpoint(cell, generation)["generators"]


def test_the_average_trails_the_weights_and_leaves_training_alone(tiny_recipe) -> None:
    path = tiny_recipe(generations=2)
    plain, averaged = run(path), run(path, "problem.g_ema=0.5")
    assert [{k: r[k] for k in LOSSES} for r in metrics(plain)] == [
        {k: r[k] for k in LOSSES} for r in metrics(averaged)
    ]
    (generator,) = generators(averaged, 0, 2)
    average, weights = generator["average"], generator["network"]
    assert set(average) == {name for name in weights if name.endswith(("weight", "bias"))}
    assert all(not torch.equal(average[k], weights[k]) for k in average)  # it trails...
    assert all(torch.allclose(average[k], weights[k], atol=0.05) for k in average)  # ...closely
    assert RunDirectory(averaged).load_checkpoint(0, 2)["discriminators"][0]["average"] is None
    assert generators(plain, 0, 2)[0]["average"] is None


def test_evaluation_uses_the_average_and_selection_copies_it(tiny_recipe) -> None:
    sender, _ = two_cells(tiny_recipe(), "problem.g_ema=0.9")
    generator = sender.best("generator")
    average = generator.extra[AVERAGE]
    evaluated = sender.evaluated(generator)
    assert evaluated is not generator.network
    assert all(torch.equal(p, average[n]) for n, p in evaluated.named_parameters())
    copy = generator.clone(sender.problem.make_optimizer)
    assert copy.extra[AVERAGE] is not average
    assert all(torch.equal(copy.extra[AVERAGE][n], t) for n, t in average.items())


def test_resume_is_exact_with_the_average(tiny_recipe) -> None:
    path = tiny_recipe(seed=4, generations=4)
    straight = run(path, "problem.g_ema=0.8")
    stopped = run(path, "problem.g_ema=0.8", "run.checkpoint_every=2", stop_after=2)
    run_in_process(prepare(None, resume_dir=stopped))
    assert metrics(stopped) == metrics(straight)
    for a, b in zip(generators(straight, 1, 4), generators(stopped, 1, 4), strict=True):
        assert all(torch.equal(a["average"][k], b["average"][k]) for k in a["average"])


def test_stacked_training_keeps_the_same_average(tiny_recipe) -> None:
    path = tiny_recipe(generations=2)
    looped = run(path, "problem.g_ema=0.5", "run.vectorize=false")
    stacked = run(path, "problem.g_ema=0.5", "run.vectorize=true")
    for cell in range(4):
        a, b = generators(looped, cell, 2)[0]["average"], generators(stacked, cell, 2)[0]["average"]
        assert all(torch.allclose(a[k], b[k], atol=1e-4) for k in a)


def test_the_average_travels_with_the_model_and_a_malformed_one_is_dropped(tiny_recipe) -> None:
    sender, receiver = two_cells(tiny_recipe(), "problem.g_ema=0.9")
    average = sender.best("generator").extra[AVERAGE]
    receiver.receive({0: sender.message()})
    received = receiver.foreign[0]["generator"].extra[AVERAGE]
    assert all(torch.equal(received[k], v) for k, v in average.items())

    name = next(iter(average))
    for broken, reason in (
        ({**average, name: average[name][:1]}, "average"),  # wrong shape
        ({k: v for k, v in average.items() if k != name}, "average"),  # a parameter missing
    ):
        sender.best("generator").extra[AVERAGE] = broken
        receiver.exchange.dropped.clear()
        receiver.receive({0: sender.message()})
        assert receiver.exchange.dropped == {reason: 1}
    assert all(torch.equal(receiver.foreign[0]["generator"].extra[AVERAGE][k], v) for k, v in average.items())


def test_g_ema_with_sema_is_a_one_line_error(tiny_recipe) -> None:
    _attach_commands()
    path = tiny_recipe()
    sets = ["--set", "problem.g_ema=0.99", "--set", 'problem.sparsity={use="rigl", sema=0.99}']
    # the masked controller asks the problem when the run's pieces are built
    result = CliRunner().invoke(cli, ["run", str(path), "--quiet", *sets])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "problem.g_ema: problem.sparsity.sema already averages the generator" in lines[0]


@pytest.mark.slow
def test_workers_keep_the_single_process_records_and_averages(tiny_recipe, tmp_path: Path) -> None:
    path = tiny_recipe(generations=2)
    single = run(path, "problem.g_ema=0.5")
    result = CliRunner().invoke(
        cli,
        ["run", str(path), "--workers", "2", "--quiet", "--set", "problem.g_ema=0.5", "--run-dir", str(tmp_path / "w")],
    )
    assert result.exit_code == 0, result.output
    key = lambda r: (r["generation"], r["cell"])  # noqa: E731
    assert sorted(metrics(tmp_path / "w"), key=key) == sorted(metrics(single), key=key)
    for cell in range(4):
        a, b = generators(single, cell, 2)[0]["average"], generators(tmp_path / "w", cell, 2)[0]["average"]
        assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_loaded_run_samples_and_exports_the_average(tiny_recipe) -> None:
    import evogan

    averaged = run(tiny_recipe(generations=2), "problem.g_ema=0.5")
    trained = evogan.load(averaged)
    (stored,) = generators(averaged, 0, 2)
    mixture = trained.mixture(0)  # what sample and export draw from
    own = mixture.networks[mixture.members.index(0)]
    for network in (trained.generator(0), own):
        assert all(torch.equal(p, stored["average"][n]) for n, p in network.named_parameters())
