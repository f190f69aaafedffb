"""Vectorised cells (``run.vectorize``): the cells of a process trained as one batched computation.

Records match the looped path within float tolerance (batched products round differently: the first
generations agree to about 1e-7, the tolerance below leaves room for a few generations of drift), the
same seed gives identical records run to run, resume is exact, and what cannot be stacked falls back to
the looped path with the reason logged (or, with ``true``, is a one-line error).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch
from click.testing import CliRunner
from evogan_gan.image_networks import MnistMlp
from evogan_gan.sparsity import Static
from evogan_gan.stacked import Stack, linear_plan, run_plan
from test_run import metrics, run  # pytest puts tests/ on sys.path (rootdir conftest, prepend mode)
from torch import nn

from evogan.adversarial.contracts import Metric, Networks
from evogan.api import Role
from evogan.cli import cli
from evogan.engine.run import build_settings
from evogan.engine.rundir import RunDirectory
from evogan.engine.vectorized import decide
from evogan.hookspecs import Register, hookimpl
from evogan.individual import Individual
from evogan.plugins import make_plugin_manager, registered
from evogan.recipe import AUTO_VECTORIZES_ON
from evogan.recipe import load as load_recipe
from evogan.registry import Registries
from evogan.runtime.single import prepare, run_in_process

ROOT = Path(__file__).resolve().parents[1]
# Relative, on every number of a record (losses, learning rates, mixture weights). The stacked and looped
# paths sum in different orders, and AVX-512 and AVX2 kernels round differently: after a few steps a loss
# differs by up to 1.8e-4 relative on an AVX-512 machine, while a real defect moves it by whole percents.
TOLERANCE = 1e-3
VECTORISED, LOOPED = "run.vectorize=true", "run.vectorize=false"
BATCHED = "fitness: all-vs-all as one batched evaluation per cell"


def assert_close(left: Any, right: Any, path: str = "", rel_tol: float = TOLERANCE) -> None:
    if isinstance(left, dict):
        assert left.keys() == right.keys(), path
        for key in left:
            assert_close(left[key], right[key], f"{path}.{key}", rel_tol)
    elif isinstance(left, list):
        assert len(left) == len(right), path
        for index, (a, b) in enumerate(zip(left, right, strict=True)):
            assert_close(a, b, f"{path}[{index}]", rel_tol)
    elif isinstance(left, float):
        assert math.isclose(left, right, rel_tol=rel_tol, abs_tol=1e-6), f"{path}: {left} vs {right}"
    else:
        assert left == right, path


def log(run_dir: Path, cell: int = 0) -> str:
    return (run_dir / "logs" / f"cell-{cell:04d}.log").read_text()


def assert_real_choices(run_dir: Path) -> None:
    """The run made the choices an equality test must see: the mixture ES accepted a step (some cell's
    weights left the uniform start) and the best cell was picked among different scores."""
    records = metrics(run_dir)
    assert any(len(set(r["mixture"].values())) > 1 for r in records), "the mixture ES accepted no step"
    cells = json.loads((run_dir / "summary.json").read_text())["cells"]
    assert len({scores["mixture_score"] for scores in cells.values()}) > 1, "the best cell was a tie"


@pytest.mark.parametrize(
    "options",
    [
        (),  # selection on, population 1, the default pairing
        ("population.selection=false", "population.size=2", 'problem.pairing={use="g_neighbourhood"}'),
        ('problem.pairing={use="g_mixture"}', "problem.loss.use=mse", "problem.d_batch=separate"),
        ("population.size=2", "problem.critic_steps=2", "problem.d_skip=1"),
        ('problem.loss={use="wasserstein"}', "problem.clip_weights=0.05", "problem.critic_steps=2"),  # Adam here
    ],
    ids=["default", "no-selection-pop2", "weighted-opponents-mse", "pop2-critic-skip", "wasserstein-clipped"],
)
def test_vectorised_records_match_the_looped_ones(tiny_recipe, options: tuple[str, ...]) -> None:
    path = tiny_recipe(seed=4, generations=3, varied=True)
    looped = run(path, LOOPED, *options)
    vectorised = run(path, VECTORISED, *options)
    assert_real_choices(looped)
    assert "training: vectorised over the 4 cells" in log(vectorised)
    assert f"{BATCHED}\n" in log(vectorised)
    assert "training: looped (run.vectorize = false)" in log(looped) and "fitness:" not in log(looped)
    left, right = metrics(looped), metrics(vectorised)
    assert len(left) == len(right) == 12
    for a, b in zip(left, right, strict=True):
        assert_close(a, b)
    summaries = [json.loads((d / "summary.json").read_text()) for d in (looped, vectorised)]
    assert summaries[0]["best_cell"] == summaries[1]["best_cell"]


def test_vectorised_runs_are_reproducible_and_resume_exactly(tiny_recipe) -> None:
    path = tiny_recipe(seed=3, generations=4, varied=True)
    first, second = run(path, VECTORISED), run(path, VECTORISED)
    assert_real_choices(first)
    assert (first / "metrics.jsonl").read_bytes() == (second / "metrics.jsonl").read_bytes()
    interrupted = run(path, VECTORISED, "run.checkpoint_every=2", stop_after=3)
    run_in_process(prepare(None, resume_dir=interrupted))
    assert metrics(interrupted) == metrics(first)


AUTO_NOTE = (
    "training: looped (run.vectorize = auto is looped until make gpu-check has passed on a GPU; true vectorises)"
)


def test_auto_is_looped_everywhere_until_the_gpu_check_has_passed(tiny_recipe) -> None:
    registries = Registries.from_plugin_manager(make_plugin_manager())
    recipe = load_recipe(tiny_recipe(), registries)
    settings = build_settings(recipe, registries, None, torch.device("cpu"))
    assert not AUTO_VECTORIZES_ON  # "cuda" joins with a gpu-check verdict in RESULTS.md
    for device in (torch.device("cpu"), torch.device("cuda", 0)):  # the decision, not a device
        assert decide("auto", settings, device, 4) == (False, AUTO_NOTE)
        assert decide(True, settings, device, 4) == (True, "training: vectorised over the 4 cells of this process")
        assert decide(False, settings, device, 4) == (False, "training: looped (run.vectorize = false)")
    assert decide(True, settings, torch.device("cpu"), 1)[0] is True
    assert AUTO_NOTE in log(run(tiny_recipe(generations=1)))


def test_auto_once_cuda_has_passed_vectorises_there_only(tiny_recipe, monkeypatch) -> None:
    registries = Registries.from_plugin_manager(make_plugin_manager())
    settings = build_settings(load_recipe(tiny_recipe(), registries), registries, None, torch.device("cpu"))
    monkeypatch.setattr("evogan.recipe.AUTO_VECTORIZES_ON", frozenset({"cuda"}))
    assert decide("auto", settings, torch.device("cuda", 0), 4) == (
        True,
        "training: vectorised over the 4 cells of this process",
    )
    one_cell = decide("auto", settings, torch.device("cuda", 0), 1)
    assert one_cell == (False, "training: looped (one cell in this process)")
    assert decide("auto", settings, torch.device("cpu"), 4) == (
        False,
        "training: looped (run.vectorize = auto vectorises on cuda only; true vectorises)",
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="with CUDA the script runs the whole check (minutes)")
def test_gpu_check_without_cuda_ends_with_one_fail_line(tmp_path: Path) -> None:
    log_path = tmp_path / "gpu-check.log"
    env = {**os.environ, "PYTHON": sys.executable, "GPU_CHECK_LOG": str(log_path)}
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu_check.sh")], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    verdicts = [line for line in lines if line.startswith("gpu-check:")]
    assert verdicts == lines[-1:] and verdicts[0].startswith("gpu-check: FAIL: no CUDA device visible (torch ")
    assert f"torch {torch.__version__}," in verdicts[0] and log_path.read_text().splitlines()[-1] == verdicts[0]


def test_what_cannot_be_stacked_is_looped_with_the_reason(tiny_recipe, monkeypatch) -> None:
    path = tiny_recipe(generations=2)
    # As auto will decide on CUDA once it has passed there: vectorise, then ask the problem.
    monkeypatch.setattr("evogan.recipe.AUTO_VECTORIZES_ON", frozenset({"cpu"}))
    mustangs = run(path, 'problem.loss={use="mustangs"}')
    assert "training: looped (loss mustangs is not marked stackable" in log(mustangs)
    assert metrics(mustangs) == metrics(run(path, 'problem.loss={use="mustangs"}', LOOPED))
    with registered(BatchNormPlugin()):
        registries = Registries.from_plugin_manager(make_plugin_manager())
        settings = build_settings(
            load_recipe(path, registries, ['problem.sparsity={use="unstackable"}']),
            registries,
            None,
            torch.device("cpu"),
        )
    assert decide("auto", settings, torch.device("cpu"), 4) == (
        False,
        "training: looped (sparsity unstackable is not marked stackable (its hooks may replace tensors the "
        "stack shares))",
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (('problem.sparsity={use="unstackable"}',), "run.vectorize: true, but sparsity unstackable is not marked"),
        (("exchange.every_batches=2",), "run.vectorize: true, but exchange.every_batches: cells exchange inside"),
        (('problem.loss={use="mustangs"}',), "run.vectorize: true, but loss mustangs is not marked stackable"),
        (('problem.network={use="dropout_mlp"}',), "run.vectorize: true, but the generator networks use dropout"),
        (("run.vectorize=1",), 'run.vectorize: must be "auto", true or false'),
    ],
)
def test_vectorize_true_where_it_cannot_be_done_is_a_one_line_error(
    tiny_recipe, options: tuple[str, ...], message: str
) -> None:
    path = tiny_recipe(generations=1)
    sets = [item for option in (VECTORISED, *options) for item in ("--set", option)]
    with registered(BatchNormPlugin()):
        result = CliRunner().invoke(cli, ["run", str(path), *sets, "--quiet"], catch_exceptions=False)
        validated = CliRunner().invoke(cli, ["validate", str(path), *sets])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
    if "but sparsity" in message or "but exchange" in message or "must be" in message:  # known from the recipe
        assert validated.exit_code == 2 and message in validated.output


class BatchNormMlp(Networks):
    """The toy MLP with a BatchNorm layer: running statistics, stacked one row per individual."""

    name: ClassVar[str] = "bn_mlp"
    description: ClassVar[str] = "test network with BatchNorm"
    norm: ClassVar[type[nn.Module]] = nn.BatchNorm1d

    def latent_shape(self) -> tuple[int, ...]:
        return (4,)

    def layer(self, width: int) -> nn.Module:
        return self.norm(width)

    def build(self, role: Role, sample_shape: tuple[int, ...], *, generator: torch.Generator) -> nn.Module:
        inputs, outputs = (4, sample_shape[0]) if role == "generator" else (sample_shape[0], 1)
        # No bias right before the normalisation (as in DCGAN), nor a normalisation behind a layer that is
        # linear on the whole batch (tanh, not ReLU): a shift that the normalisation removes gets a
        # gradient of zero up to rounding, which Adam turns into steps of about lr, and the two paths'
        # weights and running means would drift apart by rounding alone.
        network = nn.Sequential(
            nn.Linear(inputs, 8), nn.Tanh(),
            nn.Linear(8, 8, bias=False), self.layer(8), nn.Tanh(),
            nn.Linear(8, outputs),
        )  # fmt: skip
        with torch.no_grad():
            for p in network.parameters():
                p.uniform_(-0.3, 0.3, generator=generator)
        return nn.Sequential(*network, nn.Flatten(0)) if role == "discriminator" else network


class LayerNormMlp(BatchNormMlp):
    """Per-sample normalisation with parameters: not a chain of linear layers, so it runs under vmap."""

    name: ClassVar[str] = "ln_mlp"
    description: ClassVar[str] = "test network with LayerNorm"
    norm: ClassVar[type[nn.Module]] = nn.LayerNorm


class DropoutMlp(BatchNormMlp):
    """Random draws inside the network: never stacked."""

    name: ClassVar[str] = "dropout_mlp"
    description: ClassVar[str] = "test network with dropout"

    def layer(self, width: int) -> nn.Module:
        return nn.Dropout(0.25)


class PixelMean(Metric):
    """A metric any samples have (the toy ones need 2-D data, the image ones weights): mean |pixel|."""

    name: ClassVar[str] = "pixel_mean"
    description: ClassVar[str] = "test metric: mean absolute sample value"
    primary: ClassVar[str] = "pixel_mean"

    def score(self, samples: torch.Tensor) -> dict[str, float]:
        return {"pixel_mean": float(samples.abs().mean())}


class Unstackable(Static):
    """A controller not marked stackable (as a third-party one is by default): its cells train looped."""

    name: ClassVar[str] = "unstackable"
    description: ClassVar[str] = "test controller not marked stackable"
    stackable: ClassVar[bool] = False


class BatchNormPlugin:
    @hookimpl
    def evogan_register_sparsity_controllers(self, register: Register) -> None:
        register(Unstackable)

    @hookimpl
    def evogan_register_networks(self, register: Register) -> None:
        register(BatchNormMlp)
        register(LayerNormMlp)
        register(DropoutMlp)

    @hookimpl
    def evogan_register_metrics(self, register: Register) -> None:
        register(PixelMean)


def running_statistics(run_dir: Path, cells: int, generation: int) -> list[torch.Tensor]:
    """Every BatchNorm buffer of every individual in the cells' checkpoints of ``generation``."""
    directory = RunDirectory(run_dir)
    found = []
    for cell in range(cells):
        state = directory.read_checkpoint(cell, generation)
        for role in ("generators", "discriminators"):
            for individual in state[role]:
                found += [v for k, v in individual["network"].items() if k.endswith(BUFFERS)]
    return found


BUFFERS = ("running_mean", "running_var", "num_batches_tracked")


def assert_same_statistics(looped: Path, vectorised: Path, cells: int, generations: int) -> None:
    for generation in range(1, generations + 1):
        left = running_statistics(looped, cells, generation)
        right = running_statistics(vectorised, cells, generation)
        assert len(left) == len(right) > 0
        for a, b in zip(left, right, strict=True):
            torch.testing.assert_close(a, b, rtol=TOLERANCE, atol=1e-7)  # integer counts: exactly


@pytest.mark.parametrize(
    "options",
    [
        (),
        ("population.size=2",),  # two attackers update one opponent's statistics in turn
        ("population.selection=false", "population.size=2"),  # and neighbours' copies' statistics move
        ("population.size=2", 'problem.pairing={use="g_mixture"}', "problem.critic_steps=2"),
    ],
    ids=["default", "pop2", "no-selection-pop2", "pop2-weighted-opponents-critic"],
)
def test_batchnorm_networks_are_stacked_with_running_statistics_per_cell(tiny_recipe, options) -> None:
    """Records match at the usual learning rate. The running statistics are compared with the weights
    held still (a learning rate of 1e-12): a parameter whose gradient is zero up to rounding (here one
    that only shifts what a normalisation removes) takes Adam steps of about +-lr whose sign is the
    rounding's, so the weights, and the statistics they produce, may drift apart by rounding alone."""
    path = tiny_recipe(seed=5, generations=2, varied=True)
    options = ('problem.network={use="bn_mlp"}', *options)
    still = (*options, "problem.learning_rate=1e-12")
    with registered(BatchNormPlugin()):
        looped, vectorised = run(path, LOOPED, *options), run(path, VECTORISED, *options)
        looped_still, vectorised_still = run(path, LOOPED, *still), run(path, VECTORISED, *still)
    assert "training: vectorised over the 4 cells" in log(vectorised)
    for a, b in zip(metrics(looped), metrics(vectorised), strict=True):
        assert_close(a, b)
    assert_same_statistics(looped_still, vectorised_still, cells=4, generations=2)
    means = {tuple(s.tolist()) for s in running_statistics(vectorised_still, 4, 2)[::3]}  # running_mean
    assert len(means) > 4  # each network its own statistics


def test_the_dcgan_like_conv32_pair_is_stacked_with_its_batchnorm(tiny_recipe, tmp_path: Path) -> None:
    check_conv32_stacked(tiny_recipe, tmp_path)


def image_pair(tmp_path: Path, network: str) -> tuple[str, ...]:
    """Small 32x32 images and ``network`` (ngf = ndf = 4), scored by the test plugin's pixel mean."""
    from test_celeba_recipe import write_shapes

    folder = write_shapes(tmp_path / "pngs", count=16, size=32)
    return (
        f'problem.data={{use="image_folder", root="{folder}", image_size=32, workers=0}}',
        f'problem.network={{use="{network}", ngf=4, ndf=4, latent_size=8}}',
        'problem.metric={use="pixel_mean"}',
        "problem.batch_size=4",
        "problem.batches_per_generation=3",
        "problem.fitness_samples=8",
        "problem.score_samples=8",
    )


def check_conv32_stacked(tiny_recipe, tmp_path: Path, *device: str) -> None:  # type: ignore[no-untyped-def]
    """conv32's BatchNorm generator trained stacked equals the looped run, statistics included (also run on
    CUDA by tests/test_gpu.py with ``device`` set)."""
    path = tiny_recipe(seed=6, generations=2, rows=1, cols=2)
    options = (*device, *image_pair(tmp_path, "conv32"))
    with registered(BatchNormPlugin()):
        looped = run(path, LOOPED, *options)
        vectorised = run(path, VECTORISED, *options)
        again = run(path, VECTORISED, *options)
    assert "training: vectorised over the 2 cells" in log(vectorised) and BATCHED in log(vectorised)
    for a, b in zip(metrics(looped), metrics(vectorised), strict=True):
        assert_close(a, b)
    assert_same_statistics(looped, vectorised, cells=2, generations=2)
    assert (vectorised / "metrics.jsonl").read_bytes() == (again / "metrics.jsonl").read_bytes()


def test_networks_other_than_linear_chains_run_under_vmap_and_match(tiny_recipe) -> None:
    network = LayerNormMlp(LayerNormMlp.Options()).build("generator", (2,), generator=torch.Generator())
    assert linear_plan(network) is None
    path = tiny_recipe(seed=2, generations=2, varied=True)
    with registered(BatchNormPlugin()):
        looped = run(path, LOOPED, 'problem.network={use="ln_mlp"}')
        vectorised = run(path, VECTORISED, 'problem.network={use="ln_mlp"}')
    assert "training: vectorised" in log(vectorised)
    for a, b in zip(metrics(looped), metrics(vectorised), strict=True):
        assert_close(a, b)


def test_the_linear_plan_computes_what_vmap_computes() -> None:
    networks = MnistMlp(MnistMlp.Options())
    for role, inputs in (("generator", (5, 64)), ("discriminator", (5, 1, 28, 28))):
        built = [networks.build(role, (1, 28, 28), generator=torch.Generator().manual_seed(i)) for i in range(3)]
        plan = linear_plan(built[0])
        assert plan is not None
        named = [dict(b.named_parameters()) for b in built]
        params = {name: torch.stack([n[name] for n in named]) for name in named[0]}
        x = torch.randn(3, *inputs, generator=torch.Generator().manual_seed(9))
        expected = torch.stack([b(x[i]) for i, b in enumerate(built)])
        assert torch.allclose(run_plan(plan, params, x), expected, atol=1e-6)


# ------------------------------------------------------------------------------------------ sparse cells
# Each controller with its mask events, balance-ratio samples and density decisions due within the tiny
# run's 8 G steps per cell (2 generations of 4 batches), and what must have happened for the comparison
# to mean something: "g": G mask changes, "d": D mask changes, "br": balance-ratio samples taken.
DST = "density_g=0.3, density_d=0.5, g_interval=3, total_steps=16"
BR = "br_freq=1, da_iters=2, d_interval=2"
CONTROLLERS = {
    "static": ('{use="static", density_g=0.3, density_d=0.5, br_freq=1, da_iters=2}', ("br",)),
    "set": (f'{{use="set", {DST}}}', ("g",)),
    "rigl-sema": (f'{{use="rigl", {DST}, sema=0.9}}', ("g",)),
    "adapt-relax": (f'{{use="adapt-relax", {DST}, {BR}}}', ("g", "d", "br")),
    # BR is always above the band: at the density cap every decision is a D prune-and-grow by gradient
    "adapt-strict": (f'{{use="adapt-strict", {DST}, {BR}, br_lower=-5, br_upper=-4}}', ("g", "d", "br")),
    "adapt-g-static": (f'{{use="adapt-relax", {DST}, {BR}, g_mask="static"}}', ("d", "br")),
    "adapt-auto-band": (
        '{use="adapt-relax", density_g=0.3, density_d=0.3, g_interval=3, total_steps=16, br_freq=1, '
        'da_iters=2, d_interval=2, calibrate={warmup=4}}',
        ("g", "d", "br"),
    ),
}
# The balance ratio (fG - fD) / (r - fD) divides differences of nearly equal mean logits: rounding of the
# logits (1e-7) moves it by up to about 1e-5 absolute on one machine and 6.7e-5 between AVX-512 and AVX2
# kernels, beyond the relative tolerance near 0.
BR_TOLERANCE = 2e-4


def assert_sparse_close(left: dict[str, Any], right: dict[str, Any]) -> None:
    for key in ("br", "br_lower", "br_upper"):
        if key in left.get("sparsity", {}):
            assert abs(left["sparsity"].pop(key) - right["sparsity"].pop(key)) < BR_TOLERANCE, key
    assert_close(left, right)


def sparse_states(run_dir: Path, cells: int, generation: int) -> list[dict[str, Any]]:
    directory = RunDirectory(run_dir)
    return [
        individual["sparse"]
        for cell in range(cells)
        for role in ("generators", "discriminators")
        for individual in directory.read_checkpoint(cell, generation)[role]
    ]


def assert_same_masks(looped: Path, vectorised: Path, generation: int, happened: tuple[str, ...]) -> None:
    """Masks equal, and the same mask changes, steps and BR samples counted, individual by individual."""
    left, right = sparse_states(looped, 4, generation), sparse_states(vectorised, 4, generation)
    assert len(left) == len(right) > 0
    for a, b in zip(left, right, strict=True):
        assert a["masks"].keys() == b["masks"].keys()
        for name in a["masks"]:
            assert torch.equal(a["masks"][name], b["masks"][name]), name
        assert (a["density"], a["steps"], a["mask_updates"]) == (b["density"], b["steps"], b["mask_updates"])
        if "balance" in a:
            counts = ("clock", "samples", "due", "decisions")
            assert [a["balance"][k] for k in counts] == [b["balance"][k] for k in counts]
    for role, key in (("generator", "g"), ("discriminator", "d")):
        assert (sum(s["mask_updates"] for s in left if s["role"] == role) > 0) == (key in happened), role
    assert (sum(s.get("balance", {}).get("samples", 0) for s in left) > 0) == ("br" in happened)


@pytest.mark.parametrize(
    ("controller", "options"),
    [
        *((name, ()) for name in CONTROLLERS),
        ("adapt-relax", ("population.size=2",)),  # offspring share their incumbent's balance state
        ("adapt-relax", ("population.selection=false", "population.size=2", 'problem.pairing={use="g_neighbourhood"}')),
        ("rigl-sema", ('problem.pairing={use="g_mixture"}', "problem.d_skip=1")),  # weighted opponents, D every 2nd
    ],
    ids=[*CONTROLLERS, "adapt-relax-pop2", "adapt-relax-no-selection-pop2", "rigl-sema-weighted-d-skip"],
)
def test_sparse_cells_train_vectorised_as_the_looped_path_trains_them(tiny_recipe, controller, options) -> None:
    check_sparse_stacked(tiny_recipe, controller, options)


def check_sparse_stacked(tiny_recipe, controller: str, options: tuple[str, ...], *device: str) -> None:  # type: ignore[no-untyped-def]
    """The controller's hooks run on every stacked individual in the looped order: records (the sparsity
    sub-record's densities, BR and FLOPs ledgers among them) match, and so do the masks (also run on
    CUDA by tests/test_gpu.py with ``device`` set)."""
    sparsity, happened = CONTROLLERS[controller]
    # The plain tiny recipe: BR divides differences of nearly equal mean logits, and the varied recipe's
    # larger steps move it off 0, where that rounding shows beyond the relative tolerance.
    path = tiny_recipe(seed=4, generations=2)
    options = (*device, f"problem.sparsity={sparsity}", *options)
    looped, vectorised = run(path, LOOPED, *options), run(path, VECTORISED, *options)
    assert "training: vectorised over the 4 cells" in log(vectorised)
    left, right = metrics(looped), metrics(vectorised)
    assert len(left) == len(right) == 8 and all("sparsity" in r for r in right)
    for a, b in zip(left, right, strict=True):
        assert_sparse_close(a, b)
    assert_same_masks(looped, vectorised, 2, happened)


def test_vectorised_sparse_runs_are_reproducible_and_resume_exactly(tiny_recipe) -> None:
    path = tiny_recipe(seed=3, generations=4, varied=True)
    sparse = f"problem.sparsity={CONTROLLERS['adapt-relax'][0][:-1]}, sema=0.9}}"
    first, second = run(path, VECTORISED, sparse), run(path, VECTORISED, sparse)
    assert (first / "metrics.jsonl").read_bytes() == (second / "metrics.jsonl").read_bytes()
    interrupted = run(path, VECTORISED, sparse, "run.checkpoint_every=2", stop_after=3)
    run_in_process(prepare(None, resume_dir=interrupted))
    assert metrics(interrupted) == metrics(first)


def test_batchnorm_discriminators_faced_by_several_sparse_generators_are_looped(tiny_recipe) -> None:
    """A BR sample runs D in train mode after a G step: looped it falls between the steps of a cell's
    generators, stacked after all of them, so D's running statistics would move in another order. One
    generator per cell keeps the order, and is stacked, running statistics and masks per row. (Compared
    with static masks and no BR: behind a normalisation some gradients are zero up to rounding, so RigL's
    regrowth ranks them by rounding; and the train-mode batch means of D's logits hardly move, so the BR
    of either path is rounding noise near 0.)"""
    path = tiny_recipe(seed=5, generations=2)
    with registered(BatchNormPlugin()):
        with pytest.MonkeyPatch.context() as cuda:  # auto decides as it will on CUDA, then asks the problem
            cuda.setattr("evogan.recipe.AUTO_VECTORIZES_ON", frozenset({"cpu"}))
            shared = run(
                path,
                'problem.network={use="bn_mlp"}',
                f"problem.sparsity={CONTROLLERS['adapt-relax'][0]}",
                "population.size=2",
                stop_after=1,
            )
        options = ('problem.network={use="bn_mlp"}', 'problem.sparsity={use="static", density_g=0.3, density_d=0.5}')
        looped, vectorised = run(path, LOOPED, *options), run(path, VECTORISED, *options)
        still = (*options, "problem.learning_rate=1e-12")  # see the BatchNorm test above
        looped_still, vectorised_still = run(path, LOOPED, *still), run(path, VECTORISED, *still)
    assert "training: looped (sparse cells with several generators facing one BatchNorm discriminator" in log(
        shared
    )
    assert "training: vectorised over the 4 cells" in log(vectorised)
    for a, b in zip(metrics(looped), metrics(vectorised), strict=True):
        assert_close(a, b)
    assert_same_masks(looped, vectorised, 2, ())
    assert_same_statistics(looped_still, vectorised_still, cells=4, generations=2)


def test_stacked_individuals_are_views_of_the_stack_until_it_closes() -> None:
    """What a controller does in place to an individual (masking weights and moments) acts on the stack;
    its gradient of the latest step is its row; closing gives it its own tensors back."""
    trained = individuals(3, [1e-2, 1e-2, 1e-2])
    originals = [[p.data for p in ind.network.parameters()] for ind in trained]
    stack = Stack(trained, gradients=True)
    weight = trained[1].network[0].weight
    with torch.no_grad():
        weight.mul_(0)
        trained[1].optimizer.state[weight]["exp_avg"].fill_(3.0)
    assert not stack.params["0.weight"][1].any() and stack.params["0.weight"][0].all()
    assert (stack._views["0.weight"][1][1] == 3.0).all()
    x = torch.randn(4, 3, generator=torch.Generator().manual_seed(0))
    outputs = torch.func.vmap(lambda p: torch.func.functional_call(stack.template, p, (x,)))(stack.params)
    grads = torch.autograd.grad(outputs.square().sum(), list(stack.params.values()))
    stack.adam(grads)
    assert torch.equal(weight.grad, grads[0][1])
    assert torch.equal(trained[2].network[2].bias.grad, grads[3][2])
    stack.close()
    for ind, own in zip(trained, originals, strict=True):
        for p, tensor, grad in zip(ind.network.parameters(), own, grads, strict=True):
            assert p.data_ptr() == tensor.data_ptr()  # its own storage again, holding the trained values
            assert p.grad is not None and p.grad.untyped_storage().data_ptr() != grad.untyped_storage().data_ptr()
    row = stack.params["0.weight"][1].detach().clone()
    assert torch.equal(weight, row)
    with torch.no_grad():
        weight.add_(1)
    assert torch.equal(stack.params["0.weight"][1], row)  # no longer shared


# ------------------------------------------------------------------------------------------ the stack's Adam
def individuals(count: int, lrs: list[float]) -> list[Individual]:
    made = []
    for i in range(count):
        network = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 1))
        with torch.no_grad():
            for p in network.parameters():
                p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(10 + i)))
        optimizer = torch.optim.Adam(network.parameters(), lr=lrs[i], betas=(0.5, 0.999), fused=True)
        made.append(Individual("generator", network, optimizer, {"lr": lrs[i]}, 0, f"0/G{i}"))
    return made


def test_the_stacked_adam_is_torchs_adam_per_row_with_its_own_learning_rate() -> None:
    lrs = [1e-2, 3e-3, 5e-4]
    looped, stacked = individuals(3, lrs), individuals(3, lrs)
    x = torch.randn(7, 3, generator=torch.Generator().manual_seed(0))
    for ind in looped:  # two plain steps first: the stack must pick up existing moments and step counts
        for _ in range(2):
            ind.optimizer.zero_grad()
            ind.network(x).square().mean().backward()
            ind.optimizer.step()
    for ind in stacked:
        for _ in range(2):
            ind.optimizer.zero_grad()
            ind.network(x).square().mean().backward()
            ind.optimizer.step()
    stack = Stack(stacked)
    for _ in range(3):
        for ind in looped:
            ind.optimizer.zero_grad()
            ind.network(x).square().mean().backward()
            ind.optimizer.step()
        outputs = torch.func.vmap(lambda p: torch.func.functional_call(stack.template, p, (x,)))(stack.params)
        stack.adam(torch.autograd.grad(outputs.square().mean(dim=(1, 2)).sum(), list(stack.params.values())))
    stack.close()
    for a, b in zip(looped, stacked, strict=True):
        for p, q in zip(a.network.parameters(), b.network.parameters(), strict=True):
            assert torch.allclose(p, q, rtol=1e-5, atol=1e-7)
            for key in ("exp_avg", "exp_avg_sq"):
                assert torch.allclose(a.optimizer.state[p][key], b.optimizer.state[q][key], rtol=1e-5, atol=1e-9)
            assert float(a.optimizer.state[p]["step"]) == float(b.optimizer.state[q]["step"]) == 5.0
    for ind in stacked:  # the written-back state is one torch's Adam accepts and continues from
        ind.optimizer.zero_grad()
        ind.network(x).square().mean().backward()
        ind.optimizer.step()


@pytest.mark.slow
def test_each_worker_trains_its_block_of_cells_vectorised(tiny_recipe) -> None:
    from test_distributed import launched, records

    path = tiny_recipe(seed=7, generations=2, varied=True)
    single = run(path, VECTORISED)
    workers, _ = launched(path, VECTORISED)
    for cell in range(4):
        assert "training: vectorised over the 2 cells of this process" in log(workers, cell)
    for a, b in zip(records(single), records(workers), strict=True):
        assert_close(a, b)
    sparse = f"problem.sparsity={CONTROLLERS['adapt-relax'][0]}"  # masks and balance state travel between workers
    single, (workers, _) = run(path, VECTORISED, sparse), launched(path, VECTORISED, sparse)
    assert "training: vectorised over the 2 cells of this process" in log(workers, 3)
    for a, b in zip(records(single), records(workers), strict=True):
        assert_sparse_close(a, b)
    with registered(BatchNormPlugin()):
        refused = CliRunner().invoke(
            cli,
            ["run", str(path), "--set", VECTORISED, "--set", 'problem.sparsity={use="unstackable"}', "--workers", "2"],
        )
    assert refused.exit_code == 2 and "run.vectorize: true, but sparsity unstackable" in refused.output
