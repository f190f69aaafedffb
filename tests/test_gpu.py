"""What only a CUDA device can show (``make gpu-check``; marked ``gpu``, skipped without CUDA).

Device placement per LOCAL_RANK, two workers sharing one GPU, the fused Adam on CUDA, the Frechet
distance in float64 on the device, a resume on CUDA, and vectorised against looped training on CUDA
(MLPs, the conv32 pair with its BatchNorm statistics, sparse cells with their masks).
The CPU-side halves of these branches (the device choice, the auto decision, the stack's optimizer
state) are covered by the fast suite: test_vectorized.py and the tests below without the mark.
"""

from __future__ import annotations

import math

import pytest
import torch
from evogan_gan.image_metrics import frechet_distance, mean_cov
from test_run import metrics, run  # pytest puts tests/ on sys.path (rootdir conftest, prepend mode)
from test_vectorized import (
    AUTO_NOTE,
    LOOPED,
    VECTORISED,
    assert_close,
    check_conv32_stacked,
    check_sparse_stacked,
    log,
)

from evogan.engine.run import Driver, pick_device
from evogan.errors import UserError
from evogan.recipe import AUTO_VECTORIZES_ON
from evogan.runtime.single import prepare, run_in_process

CUDA = 'run.device="cuda"'


def test_pick_device_without_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert pick_device("auto", 3) == torch.device("cpu") and pick_device("cpu", 1) == torch.device("cpu")
    with pytest.raises(UserError, match=r"run\.device: cuda was asked for"):
        pick_device("cuda")


def test_pick_device_takes_local_rank_modulo_the_visible_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert [pick_device("auto", rank) for rank in range(4)] == [torch.device("cuda", r % 2) for r in range(4)]
    assert pick_device("cpu", 1) == torch.device("cpu")


@pytest.mark.gpu
@pytest.mark.slow
def test_local_rank_places_workers_and_two_share_one_gpu(tiny_recipe) -> None:
    from test_distributed import launched

    run_dir, _ = launched(tiny_recipe(generations=2), 'run.device="auto"')  # "cuda" wants a GPU per worker
    count = torch.cuda.device_count()
    for rank in (0, 1):
        out = (run_dir / "logs" / f"worker-{rank:04d}.out").read_text()
        assert f"local rank {rank}: device cuda:{rank % count}" in out
    assert len(metrics(run_dir)) == 8


@pytest.mark.gpu
@pytest.mark.parametrize("vectorize", [LOOPED, VECTORISED])
def test_fused_adam_steps_on_cuda(tiny_recipe, vectorize: str) -> None:
    path = tiny_recipe(generations=1)
    drivers: list[Driver] = []
    original = Driver.run

    def keep(self: Driver, **kwargs: object) -> dict:
        drivers.append(self)
        return original(self, **kwargs)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Driver, "run", keep)
        run(path, CUDA, vectorize)
    for individual in (drivers[0].cells[0].population(role)[0] for role in ("generator", "discriminator")):
        optimizer = individual.optimizer
        assert optimizer.param_groups[0]["fused"] is True
        states = list(optimizer.state.values())
        assert states and all(state["step"].device.type == "cuda" for state in states)
        assert all(state["exp_avg"].device.type == "cuda" for state in states)


@pytest.mark.gpu
def test_auto_on_cuda_vectorises_only_once_the_gpu_check_has_passed(tiny_recipe) -> None:
    expected = "training: vectorised over the 4 cells" if "cuda" in AUTO_VECTORIZES_ON else AUTO_NOTE
    assert expected in log(run(tiny_recipe(generations=1), CUDA))


@pytest.mark.gpu
def test_frechet_distance_in_float64_on_cuda() -> None:
    generator = torch.Generator().manual_seed(0)
    a, b = torch.randn(500, 16, generator=generator), torch.randn(500, 16, generator=generator) * 1.1 + 0.2
    on_cpu = frechet_distance(*mean_cov(a), *mean_cov(b))
    mu, cov = mean_cov(a.cuda())
    assert mu.dtype == cov.dtype == torch.float64 and mu.device.type == "cuda"
    on_gpu = frechet_distance(mu, cov, *mean_cov(b.cuda()))
    assert math.isclose(on_cpu, on_gpu, rel_tol=1e-9)


@pytest.mark.gpu
def test_resume_on_cuda_reproduces_an_uninterrupted_run(tiny_recipe) -> None:
    path = tiny_recipe(seed=3, generations=4)
    straight = run(path, CUDA)
    interrupted = run(path, CUDA, "run.checkpoint_every=2", stop_after=3)
    run_in_process(prepare(None, resume_dir=interrupted))
    assert metrics(interrupted) == metrics(straight)


@pytest.mark.gpu
@pytest.mark.parametrize("options", [(), ("population.selection=false", "population.size=2")])
def test_vectorised_matches_looped_on_cuda(tiny_recipe, options: tuple[str, ...]) -> None:
    path = tiny_recipe(seed=4, generations=3)
    looped, vectorised = run(path, CUDA, LOOPED, *options), run(path, CUDA, VECTORISED, *options)
    for a, b in zip(metrics(looped), metrics(vectorised), strict=True):
        assert_close(a, b)
    assert metrics(vectorised) == metrics(run(path, CUDA, VECTORISED, *options))  # same seed, same records


@pytest.mark.gpu
def test_batchnorm_networks_stacked_match_looped_on_cuda(tiny_recipe, tmp_path) -> None:  # type: ignore[no-untyped-def]
    check_conv32_stacked(tiny_recipe, tmp_path, CUDA)


@pytest.mark.gpu
@pytest.mark.parametrize("controller", ["rigl-sema", "adapt-strict"])
def test_sparse_cells_stacked_match_looped_on_cuda(tiny_recipe, controller: str) -> None:
    check_sparse_stacked(tiny_recipe, controller, (), CUDA)
