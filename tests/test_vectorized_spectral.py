"""Spectral norm on the vectorised path: each stacked row keeps its own power-iteration vectors (``u``, ``v``)
and updates them as its looped forward does, so the demo's and the SNGAN recipe's networks train
vectorised, with records (and vectors) that match the looped path's within the other stacked tests'
tolerance."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from click.testing import CliRunner
from evogan_gan.image_networks import MnistMlp
from evogan_gan.stacked import StackedGanTraining, momenta, power_iterations
from test_run import metrics, run  # pytest puts tests/ on sys.path (rootdir conftest, prepend mode)
from test_vectorized import LOOPED, VECTORISED, BatchNormPlugin, assert_close, image_pair, log
from torch import nn

from evogan.cli import cli
from evogan.engine.rundir import RunDirectory
from evogan.plugins import registered

# The demo's networks (recipes/demo.toml: mnist_mlp with spectral norm on D), small, on its digits.
DEMO = (
    'problem.data={use="mnist_demo"}',
    'problem.network={use="mnist_mlp", hidden=32, latent_size=16, spectral_norm=true}',
    'problem.metric={use="classifier", samples=100}',
    "problem.batch_size=16",
    "problem.batches_per_generation=3",
    "problem.fitness_samples=32",
    "problem.score_samples=100",
)
VECTORS = ("._u", "._v")


def discriminators(count: int) -> list[nn.Module]:
    networks = MnistMlp(MnistMlp.Options(hidden=8, latent_size=4, spectral_norm=True))
    return [
        networks.build("discriminator", (1, 28, 28), generator=torch.Generator().manual_seed(seed))
        for seed in range(count)
    ]


def test_each_rows_power_iteration_is_the_looped_forwards() -> None:
    nets = discriminators(3)
    iterations = power_iterations(nets[0])
    assert isinstance(iterations, list) and len(iterations) == 3  # every linear layer of D
    found = momenta(nets[0])
    assert isinstance(found, dict) and set(found) == {n for it in iterations for n in (it.u, it.v)}
    assert all(value is None for value in found.values())  # replaced, not blended
    for it in iterations:
        params = [dict(net.named_parameters())[it.weight] for net in nets]
        buffers = [dict(net.named_buffers()) for net in nets]
        stacked = [torch.stack([b[name] for b in buffers]) for name in (it.u, it.v)]
        u, v = it.step(torch.stack(params), *stacked)
        for row, net in enumerate(nets):
            owner = net.get_submodule(it.owner)
            owner._power_method(owner.__class__._reshape_weight_to_matrix(owner, params[row].detach()), 1)
            torch.testing.assert_close(u[row], owner._u, rtol=1e-5, atol=1e-7)
            torch.testing.assert_close(v[row], owner._v, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("style", ["parametrizations", "old-style"])
def test_a_stacked_train_mode_forward_is_each_networks_own(style: str) -> None:
    """Outputs and vectors after one stacked forward are each network's after its own, for the
    parametrization and for the old-style hook (whose weight attribute is put back: no batched tensor stays)."""
    norm = nn.utils.parametrizations.spectral_norm if style == "parametrizations" else nn.utils.spectral_norm
    torch.manual_seed(0)
    nets = [nn.Sequential(norm(nn.Linear(6, 5)), nn.LeakyReLU(0.2), norm(nn.Linear(5, 1))) for _ in range(3)]
    found = momenta(nets[0])
    assert isinstance(found, dict) and len(found) == 4 and all(value is None for value in found.values())
    names = dict(nets[0].named_buffers())
    weights = [dict(net.named_parameters()) for net in nets]
    params = {n: torch.stack([w[n].detach() for w in weights]) for n in weights[0]}
    buffers = {n: torch.stack([dict(net.named_buffers())[n] for net in nets]) for n in names}
    stack = SimpleNamespace(template=nets[0], buffers=buffers, iterations=power_iterations(nets[0]))
    x = torch.randn(3, 4, 6)
    held = [nets[0][i].__dict__.get("weight") for i in (0, 2)]  # the old hook's attribute (None: a property)
    out = StackedGanTraining._forward(stack)(params, buffers, x)  # type: ignore[arg-type]
    assert all(nets[0][i].__dict__.get("weight") is w for i, w in zip((0, 2), held, strict=True))  # put back
    for row, net in enumerate(nets):
        torch.testing.assert_close(out[row], net(x[row]), rtol=1e-5, atol=1e-6)
        for name, value in net.named_buffers():
            torch.testing.assert_close(buffers[name][row], value, rtol=1e-5, atol=1e-6)
    nets[0].eval()
    before = {n: b.clone() for n, b in buffers.items()}
    StackedGanTraining._forward(stack)(params, buffers, x)  # type: ignore[arg-type]
    assert all(torch.equal(before[n], buffers[n]) for n in buffers)  # eval mode: no iteration


def test_spectral_norm_chained_with_another_parametrization_stays_looped() -> None:
    layer = nn.utils.parametrizations.spectral_norm(nn.Linear(4, 3))
    nn.utils.parametrize.register_parametrization(layer, "weight", nn.Identity())
    reason = "spectral norm chained with other parametrizations (0.parametrizations.weight)"
    assert momenta(nn.Sequential(layer)) == reason


def spectral_vectors(run_dir: Path, cells: int, generation: int) -> list[torch.Tensor]:
    directory = RunDirectory(run_dir)
    return [
        value
        for cell in range(cells)
        for individual in directory.read_checkpoint(cell, generation)["discriminators"]
        for key, value in individual["network"].items()
        if key.endswith(VECTORS)
    ]


DEMO_PAIRING = ("population.selection=false", "population.size=2", 'problem.pairing={use="g_neighbourhood"}')
STILL = "problem.learning_rate=1e-12"


@pytest.mark.parametrize(
    "options",
    [
        (),
        # the demo's pairing with two pairs per cell: several generators face one discriminator in a step,
        # the later ones from the vectors the earlier ones left
        DEMO_PAIRING,
        ('problem.pairing={use="g_mixture"}', "problem.d_skip=1"),  # weighted opponents, D every second batch
    ],
    ids=["default", "demo-pairing-pop2", "weighted-opponents"],
)
def test_the_demos_spectral_norm_networks_train_vectorised_as_looped(tiny_recipe, options) -> None:
    path = tiny_recipe(seed=4, generations=2, varied=True)
    looped, vectorised = run(path, LOOPED, *DEMO, *options), run(path, VECTORISED, *DEMO, *options)
    assert "training: vectorised over the 4 cells" in log(vectorised)
    left, right = metrics(looped), metrics(vectorised)
    assert len(left) == len(right) == 8
    for a, b in zip(left, right, strict=True):
        assert_close(a, b)


def assert_same_vectors(looped: Path, vectorised: Path, cells: int, generations: int) -> None:
    for generation in range(1, generations + 1):
        mine, theirs = spectral_vectors(looped, cells, generation), spectral_vectors(vectorised, cells, generation)
        assert len(mine) == len(theirs) > 0
        for a, b in zip(mine, theirs, strict=True):
            torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)  # float32 unit vectors


def test_the_vectors_follow_the_looped_order_of_forwards(tiny_recipe) -> None:
    """Compared with the weights held still (a learning rate of 1e-12), as the BatchNorm statistics are: u
    follows the top singular vector, which rounding in the weights moves by up to the rounding over the
    gap between the top two singular values (2e-4 relative after 2 generations here). Without chaining the
    start of rows that face one discriminator, they differed by about 1e-2."""
    path = tiny_recipe(seed=4, generations=2, varied=True)
    options = (*DEMO, *DEMO_PAIRING, STILL)
    looped, vectorised = run(path, LOOPED, *options), run(path, VECTORISED, *options)
    assert "training: vectorised over the 4 cells" in log(vectorised)
    for a, b in zip(metrics(looped), metrics(vectorised), strict=True):
        assert_close(a, b)
    assert_same_vectors(looped, vectorised, cells=4, generations=2)


def test_vectorize_true_with_the_demos_networks_runs_through_the_cli(tiny_recipe) -> None:
    path = tiny_recipe(seed=4, generations=1)
    sets = [item for option in (VECTORISED, *DEMO) for item in ("--set", option)]
    result = CliRunner().invoke(cli, ["run", str(path), *sets, "--quiet"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    (run_dir,) = (path.parent / "runs").iterdir()
    assert "training: vectorised over the 4 cells" in log(run_dir)


def test_the_sngan_pair_trains_vectorised_as_looped(tiny_recipe, tmp_path: Path) -> None:
    """recipes/cifar10-sngan.toml's networks: spectral norm on every convolution of the critic, BatchNorm in
    the generator, the hinge loss and critic steps. With the weights held still: this pair's pixel-mean
    score (a mean of pixels that nearly cancel) drifts by rounding alone beyond the tolerance, more so
    without spectral norm (2e-3 relative after 2 generations)."""
    path = tiny_recipe(seed=6, generations=2, rows=1, cols=2)
    options = (*image_pair(tmp_path, "sngan32"), 'problem.loss={use="hinge"}', "problem.critic_steps=2", STILL)
    with registered(BatchNormPlugin()):
        looped, vectorised = run(path, LOOPED, *options), run(path, VECTORISED, *options)
    assert "training: vectorised over the 2 cells" in log(vectorised)
    for a, b in zip(metrics(looped), metrics(vectorised), strict=True):
        assert_close(a, b)
    assert_same_vectors(looped, vectorised, cells=2, generations=2)


def test_sparse_spectral_norm_cells_train_vectorised_as_looped(tiny_recipe, monkeypatch) -> None:
    """recipes/mnist-adapt.toml's combination: the demo's networks under ADAPT (masks on the original weight
    spectral norm divides), one pair per cell; several generators per discriminator stay looped."""
    from test_vectorized import CONTROLLERS, check_sparse_stacked

    check_sparse_stacked(tiny_recipe, "adapt-relax", DEMO)
    path = tiny_recipe(seed=4, generations=2)
    monkeypatch.setattr("evogan.recipe.AUTO_VECTORIZES_ON", frozenset({"cpu"}))  # auto as it will decide on CUDA
    shared = run(path, *DEMO, f"problem.sparsity={CONTROLLERS['adapt-relax'][0]}", "population.size=2", stop_after=1)
    assert "training: looped (sparse cells with several generators facing one spectral-norm discriminator" in log(
        shared
    )
