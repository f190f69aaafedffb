"""All-vs-all fitness as one batched computation (vectorised cells): the matrices equal the looped
path's (:meth:`GanProblem.fitness`, one discriminator forward per pair) within 1e-4, with the same random
draws, for linear chains, BatchNorm networks in eval mode and the spectral-norm critic; score subsets
and the memo of D(real) behave as in the looped path."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from evogan_gan.problem import GanProblem
from evogan_gan.stacked import run_plan
from evogan_gan.stacked_fitness import StackedGanFitness, run_stacked
from test_celeba_recipe import write_shapes
from test_vectorized import BatchNormPlugin
from torch import nn

from evogan.api import Problem, Role
from evogan.engine.run import build_settings
from evogan.plugins import make_plugin_manager, registered
from evogan.recipe import load
from evogan.registry import Registries

TOLERANCE = 1e-4


@pytest.fixture(params=["per-network", "stacked-rows"], autouse=True)
def rows(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test in both ways of running the networks: on the CPU each network on its own (the default
    there), and as stacked rows (the default on CUDA, exercised here on the CPU)."""
    from evogan_gan import stacked_fitness

    monkeypatch.setitem(stacked_fitness.STACK_ROWS, "cpu", request.param == "stacked-rows")
    return str(request.param)


def problem_of(tiny_recipe, *overrides: str, device: str = "cpu") -> GanProblem:  # type: ignore[no-untyped-def]
    registries = Registries.from_plugin_manager(make_plugin_manager())
    recipe = load(tiny_recipe(), registries, overrides)
    problem = build_settings(recipe, registries, None, torch.device(device), scoring=False).problem
    assert isinstance(problem, GanProblem)
    return problem


def images(tmp_path: Path, network: str) -> tuple[str, ...]:
    folder = write_shapes(tmp_path / "pngs", count=12, size=32)
    return (
        f'problem.data={{use="image_folder", root="{folder}", image_size=32, workers=0}}',
        f"problem.network={{{network}}}",
        "problem.batch_size=4",
    )


def population(problem: Problem, role: Role, count: int, seed: int) -> list[nn.Module]:
    return [problem.create(role, generator=torch.Generator().manual_seed(seed + i)) for i in range(count)]


def disturb_running_statistics(networks: Sequence[nn.Module], seed: int) -> None:
    """Each network its own running statistics, so eval mode's normalisation differs per row."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for network in networks:
            for name, buffer in network.named_buffers():
                if name.endswith("running_mean"):
                    buffer.copy_(torch.randn(buffer.shape, generator=generator) * 0.3)
                elif name.endswith("running_var"):
                    buffer.copy_(torch.rand(buffer.shape, generator=generator) + 0.5)


def both(
    problem: GanProblem,
    gens: Sequence[nn.Module],
    discs: Sequence[nn.Module],
    real: torch.Tensor,
    score: Sequence[Role] = ("generator", "discriminator"),
    memos: tuple[dict[nn.Module, Any], dict[nn.Module, Any]] | None = None,
) -> tuple[tuple[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    """The looped and the batched matrices, each from a generator seeded alike; the two streams must
    be left in the same state (the same draws)."""
    memos = memos or ({}, {})
    looped_stream, stacked_stream = torch.Generator().manual_seed(11), torch.Generator().manual_seed(11)
    looped = problem.fitness(gens, discs, real, generator=looped_stream, score=score, memo=memos[0])
    stacked = problem.stacked_fitness(gens, discs)
    assert isinstance(stacked, StackedGanFitness), stacked
    batched = stacked.fitness(real, generator=stacked_stream, score=score, memo=memos[1])
    assert torch.equal(looped_stream.get_state(), stacked_stream.get_state())
    return looped, batched


Matrices = tuple[torch.Tensor, ...]


def assert_matrices_close(looped: Matrices, batched: Matrices) -> None:
    for a, b in zip(looped, batched, strict=True):
        torch.testing.assert_close(b, a, rtol=TOLERANCE, atol=1e-6)


CASES = {
    "toy-mlp": (),
    "mnist-mlp": ('problem.data={use="mnist_demo"}', 'problem.network={use="mnist_mlp", hidden=32, latent_size=16}'),
}


@pytest.mark.parametrize("case", list(CASES))
def test_batched_fitness_equals_the_looped_matrices_for_linear_chains(tiny_recipe, case: str) -> None:
    problem = problem_of(tiny_recipe, *CASES[case], "problem.fitness_samples=64")
    gens, discs = population(problem, "generator", 5, 0), population(problem, "discriminator", 4, 50)
    real = problem.fitness_batch(generator=torch.Generator().manual_seed(1))
    looped, batched = both(problem, gens, discs, real)
    assert_matrices_close(looped, batched)
    assert not torch.equal(looped[0][0], looped[0][1])  # the pairs really differ


@pytest.mark.parametrize("network", [f'use="{use}", ngf=4, ndf=4, latent_size=8' for use in ("conv32", "sngan32")])
def test_batched_fitness_equals_the_looped_matrices_for_conv_pairs(tiny_recipe, tmp_path: Path, network: str) -> None:
    """conv32: BatchNorm in eval mode, each row its own running statistics. sngan32: the spectral-norm
    critic (eval mode: no power iteration, u and v stacked as buffers) and the BatchNorm generator."""
    problem = problem_of(tiny_recipe, *images(tmp_path, network), "problem.fitness_samples=6")
    gens, discs = population(problem, "generator", 3, 0), population(problem, "discriminator", 3, 50)
    disturb_running_statistics([*gens, *discs], 5)
    real = problem.fitness_batch(generator=torch.Generator().manual_seed(1))
    modes = [network.training for network in (*gens, *discs)]
    looped, batched = both(problem, gens, discs, real)
    assert_matrices_close(looped, batched)
    assert [network.training for network in (*gens, *discs)] == modes  # modes restored


@pytest.mark.gpu
@pytest.mark.parametrize("case", ["toy-mlp", "mnist-mlp", "conv32", "sngan32"])
def test_batched_fitness_equals_the_looped_matrices_on_cuda(tiny_recipe, tmp_path: Path, case: str, rows: str) -> None:
    """On CUDA the rows run stacked (baddbmm chains, vmap for the conv pairs) whatever ``rows`` says."""
    if rows == "stacked-rows":
        pytest.skip("STACK_ROWS only changes the CPU's way")
    overrides = CASES[case] if case in CASES else images(tmp_path, f'use="{case}", ngf=4, ndf=4, latent_size=8')
    problem = problem_of(tiny_recipe, *overrides, "problem.fitness_samples=24", device="cuda")
    gens, discs = population(problem, "generator", 4, 0), population(problem, "discriminator", 3, 50)
    disturb_running_statistics([*gens, *discs], 5)
    real = problem.fitness_batch(generator=torch.Generator().manual_seed(1))
    assert real.device.type == "cuda"
    assert_matrices_close(*both(problem, gens, discs, real))


def test_score_subsets_and_the_memo_behave_as_in_the_looped_path(tiny_recipe) -> None:
    problem = problem_of(tiny_recipe, "problem.fitness_samples=32")
    gens, discs = population(problem, "generator", 3, 0), population(problem, "discriminator", 3, 50)
    real = problem.fitness_batch(generator=torch.Generator().manual_seed(1))
    full_looped, full_batched = both(problem, gens, discs, real)
    assert_matrices_close(full_looped, full_batched)
    memos: tuple[dict[nn.Module, Any], dict[nn.Module, Any]] = ({}, {})
    g_only = both(problem, gens, discs, real, score=("generator",), memos=memos)
    assert memos == ({}, {})  # D(real) is not computed when only generators are scored
    assert_matrices_close((g_only[0][0],), (g_only[1][0],))
    torch.testing.assert_close(g_only[1][0], full_batched[0])
    d_only = both(problem, gens, discs, real, score=("discriminator",), memos=memos)
    assert_matrices_close((d_only[0][1],), (d_only[1][1],))
    torch.testing.assert_close(d_only[1][1], full_batched[1])
    assert set(memos[1]) == set(discs) == set(memos[0])
    for d in discs:
        torch.testing.assert_close(memos[1][d], memos[0][d], rtol=TOLERANCE, atol=1e-6)
    # A memoised D(real) is used as found: a stale entry shows in the batched matrix as in the looped one.
    for memo in memos:
        memo[discs[0]] = memo[discs[0]] + 1.0
    stale = both(problem, gens[:2], discs, real, score=("discriminator",), memos=memos)
    assert_matrices_close((stale[0][1],), (stale[1][1],))
    assert not torch.allclose(stale[1][1][0], full_batched[1][0, :2])
    torch.testing.assert_close(stale[1][1][1:], full_batched[1][1:, :2])


def test_what_cannot_be_stacked_is_declined_with_the_reason(tiny_recipe) -> None:
    problem = problem_of(tiny_recipe)
    gens, discs = population(problem, "generator", 2, 0), population(problem, "discriminator", 2, 50)
    other = nn.Sequential(nn.Linear(2, 3), nn.Tanh(), nn.Linear(3, 1))
    assert problem.stacked_fitness(gens, [*discs, other]) == "the discriminator networks differ in architecture"
    assert problem.stacked_fitness([], discs) == "no generator networks to stack"


def test_the_batchnorm_and_layernorm_test_networks_stack_too(tiny_recipe) -> None:
    for use in ("bn_mlp", "ln_mlp", "dropout_mlp"):  # dropout is off in eval mode: nothing random
        with registered(BatchNormPlugin()):
            problem = problem_of(tiny_recipe, f'problem.network={{use="{use}"}}', "problem.fitness_samples=16")
        gens, discs = population(problem, "generator", 3, 0), population(problem, "discriminator", 2, 50)
        disturb_running_statistics([*gens, *discs], 3)
        real = problem.fitness_batch(generator=torch.Generator().manual_seed(1))
        assert_matrices_close(*both(problem, gens, discs, real))


def test_the_shared_input_chain_and_the_chunks_compute_each_rows_network(monkeypatch, rows: str) -> None:
    """The first layer of every row as one product, then ``baddbmm``; inputs cut into chunks of samples
    (here forced small) give the same rows."""
    from evogan_gan import stacked_fitness
    from evogan_gan.stacked import linear_plan
    from evogan_gan.stacked_fitness import stacked_state

    networks = [
        nn.Sequential(nn.Flatten(), nn.Linear(6, 5), nn.LeakyReLU(0.2), nn.Linear(5, 1), nn.Flatten(0))
        for _ in range(4)
    ]
    x = torch.randn(10, 2, 3, generator=torch.Generator().manual_seed(0))
    expected = torch.stack([network(x) for network in networks]).detach()
    plan = linear_plan(networks[0])
    assert plan is not None
    params, _ = stacked_state(networks)
    torch.testing.assert_close(run_plan(plan, params, x, shared=True), expected)
    per_chunk = 3 * (len(networks) if rows == "stacked-rows" else 1)  # three samples per chunk
    monkeypatch.setitem(stacked_fitness.FITNESS_SAMPLES, "cpu", per_chunk)
    torch.testing.assert_close(run_stacked(networks, x, 6), expected)


def test_a_problem_that_declines_is_scored_pair_by_pair_with_the_reason_logged(tiny_recipe) -> None:
    """A vectorised run asks for batched fitness in every evaluation; its records agree with pair-by-pair
    fitness within the tolerance and are identical run to run."""
    from test_run import metrics, run
    from test_vectorized import LOOPED, VECTORISED, assert_close, log

    problem = problem_of(tiny_recipe)
    assert Problem.stacked_fitness(problem, [], []) == "problem gan scores fitness pair by pair"  # the default
    path = tiny_recipe(seed=4, generations=2)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(GanProblem, "stacked_fitness", lambda self, *_: Problem.stacked_fitness(self, *_))
        declined = run(path, VECTORISED)
    assert "training: vectorised over the 4 cells of this process\n" in log(declined)
    assert "fitness: pair by pair (problem gan scores fitness pair by pair)\n" in log(declined)
    calls: list[int] = []
    original = StackedGanFitness.fitness
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(StackedGanFitness, "fitness", lambda self, *a, **k: calls.append(1) or original(self, *a, **k))
        batched = run(path, VECTORISED)
    assert len(calls) == 4 * 2 * 3  # each cell, each generation: before training and the two re-evaluations
    assert (run(path, VECTORISED) / "metrics.jsonl").read_bytes() == (batched / "metrics.jsonl").read_bytes()
    for a, b in zip(metrics(declined), metrics(batched), strict=True):
        assert_close(a, b)
    assert "fitness:" not in log(run(path, LOOPED))
