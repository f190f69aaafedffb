"""The SNGAN standard-CNN pair (``sngan32``): shapes, spectral norm, seeded init, masks through the
spectral-norm parametrization, and one short sparse run with the SNGAN settings on a tiny image folder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch
from evogan_gan import sngan
from evogan_gan import sparsity as builtin
from evogan_gan.sparse import flops, masks, wire
from torch import nn
from torch.nn.utils import parametrize

from evogan.adversarial.contracts import GeneratorStep, Metric
from evogan.errors import UserError
from evogan.hookspecs import hookimpl
from evogan.plugins import distribution_modules, make_plugin_manager
from evogan.runtime.single import prepare, run_in_process

GAN_PLUGINS = distribution_modules("evogan-gan")  # the GAN problem's plugins, for autoload off

ROOT = Path(__file__).resolve().parents[1]


def build(role: str, seed: int = 0, channels: int = 3, **options: Any) -> nn.Module:
    networks = sngan.Sngan32(sngan.Sngan32.Options(**options))
    return networks.build(role, (channels, 32, 32), generator=torch.Generator().manual_seed(seed))  # type: ignore[arg-type]


def linear_layers(net: nn.Module) -> list[nn.Module]:
    return [m for m in net.modules() if isinstance(m, nn.Conv2d | nn.ConvTranspose2d | nn.Linear)]


@pytest.mark.parametrize("channels", [1, 3])
def test_shapes_and_ranges(channels: int) -> None:
    g, d = build("generator", channels=channels, ngf=8), build("discriminator", channels=channels, ndf=8)
    z = torch.randn(5, 128)
    images = g(z)
    assert images.shape == (5, channels, 32, 32) and images.abs().max() <= 1
    assert g(z.reshape(5, 128, 1, 1)).shape == images.shape  # conv-style noise is accepted too
    logits = d(images)
    assert logits.shape == (5,) and logits.dtype == torch.float32
    with pytest.raises(UserError, match=r"\(3, 32, 32\)"):
        sngan.Sngan32(sngan.Sngan32.Options()).check((3, 64, 64))


def test_default_sizes_match_the_standard_cnn() -> None:
    g, d = build("generator"), build("discriminator")
    assert sum(p.numel() for p in g.parameters()) == 3_813_379
    assert sum(p.numel() for p in d.parameters()) == 2_935_873
    convs = [m for m in d.modules() if isinstance(m, nn.Conv2d)]
    assert [c.out_channels for c in convs] == [64, 64, 128, 128, 256, 256, 512]
    assert [c.kernel_size for c in convs] == [(3, 3), (4, 4)] * 3 + [(3, 3)]


def test_spectral_norm_on_every_discriminator_layer_only() -> None:
    d, g = build("discriminator", ndf=8), build("generator", ngf=8)
    assert all(parametrize.is_parametrized(m, "weight") for m in linear_layers(d))
    assert not any(parametrize.is_parametrized(m, "weight") for m in linear_layers(g))
    plain = build("discriminator", ndf=8, spectral_norm=False)
    assert not any(parametrize.is_parametrized(m, "weight") for m in linear_layers(plain))
    d.eval()  # sigma from the stored u, v: 15 init power iterations make it accurate
    for layer in linear_layers(d):
        matrix = layer.weight.reshape(layer.weight.shape[0], -1)
        assert torch.linalg.matrix_norm(matrix, ord=2).item() == pytest.approx(1.0, abs=0.05)


@pytest.mark.parametrize("role", ["generator", "discriminator"])
def test_init_is_drawn_from_the_generator_only(role: str) -> None:
    before = torch.random.get_rng_state()
    first, again, other = build(role, 3, ngf=8, ndf=8), build(role, 3, ngf=8, ndf=8), build(role, 4, ngf=8, ndf=8)
    assert torch.equal(before, torch.random.get_rng_state())  # global RNG untouched
    a, b, c = first.state_dict(), again.state_dict(), other.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert any(not torch.equal(a[k], c[k]) for k in a if k.endswith(("original", "weight", "_u")))
    assert all(not t.is_meta for t in a.values())
    biases = [v for k, v in a.items() if k.endswith("bias")]  # conv/linear biases and BN shifts: 0
    assert biases and all(torch.all(v == 0) for v in biases)


# ------------------------------------------------------------------------------------------ masks + SN
class _Ind:
    def __init__(self, role: str, network: nn.Module) -> None:
        self.role, self.network, self.extra = role, network, {}  # the controller's state: extra["sparse"]
        self.optimizer = torch.optim.Adam(network.parameters(), lr=2e-4, betas=(0.0, 0.9))
        self.trainer = self.optimizer


def test_masks_apply_to_the_original_weight_under_spectral_norm() -> None:
    controller = builtin.Static(builtin.Static.Options(density_g=0.3, density_d=0.3))
    d = _Ind("discriminator", build("discriminator", ndf=8))
    controller.prepare(d, stream=torch.Generator().manual_seed(0))  # type: ignore[arg-type]
    names = set(d.extra["sparse"]["masks"])
    assert names == {f"{i}.parametrizations.weight.original" for i in (0, 2, 4, 6, 8, 10, 12)} | {
        "15.parametrizations.weight.original"
    }
    assert masks.overall_density(d.extra["sparse"]["masks"]) == pytest.approx(0.3, abs=1e-4)
    for _ in range(3):  # hinge D steps, the mask enforced after each as the engine does
        d.optimizer.zero_grad()
        real, fake = torch.randn(4, 3, 32, 32), torch.randn(4, 3, 32, 32)
        (torch.relu(1 - d.network(real)).mean() + torch.relu(1 + d.network(fake)).mean()).backward()
        d.optimizer.step()
        controller.after_discriminator_step(d)  # type: ignore[arg-type]
    modules = dict(d.network.named_modules())
    for name, mask in d.extra["sparse"]["masks"].items():
        layer = modules[name.split(".")[0]]
        assert torch.all(layer.weight[~mask] == 0)  # the normalised weight the forward uses is masked too
        assert layer.weight[mask].abs().sum() > 0
    counted = flops.count_forward_flops(d.network, torch.zeros(2, 3, 32, 32), d.extra["sparse"]["masks"])
    assert set(counted.weights) == names
    state = d.network.state_dict()
    decoded, decoded_masks = wire.decode_sparse(wire.encode_sparse(state, d.extra["sparse"]["masks"]))
    assert all(torch.equal(decoded[k], state[k]) for k in state) and decoded_masks.keys() == names


def test_adapt_grows_a_spectral_norm_discriminator_by_gradient() -> None:
    controller = builtin.AdaptRelax(
        builtin.AdaptRelax.Options(density_g=0.3, density_d=0.3, br_freq=1, da_iters=2, d_interval=2)
    )
    g = _Ind("generator", build("generator", ngf=8))
    d = _Ind("discriminator", build("discriminator", ndf=8))
    controller.prepare(g, stream=torch.Generator().manual_seed(0))  # type: ignore[arg-type]
    controller.prepare(d, stream=torch.Generator().manual_seed(1))  # type: ignore[arg-type]
    d.extra["sparse"]["balance"]["window"] = [[0.9, 0.0, 1.0]] * 2  # BR 0.9: D too weak
    d.extra["sparse"]["balance"]["pending"] = True
    d.optimizer.zero_grad()
    (-d.network(torch.randn(4, 3, 32, 32)).mean()).backward()
    d.optimizer.step()
    controller.after_discriminator_step(d)  # type: ignore[arg-type]
    assert d.extra["sparse"]["density"] == pytest.approx(0.35)
    assert masks.overall_density(d.extra["sparse"]["masks"]) == pytest.approx(0.35, abs=1e-4)
    step = GeneratorStep(torch.randn(4, 128), torch.randn(4, 3, 32, 32), torch.zeros(4), 1)

    class Logits:
        @torch.no_grad()
        def discriminator_logits(self, disc: nn.Module, gen: nn.Module, z: torch.Tensor, real: torch.Tensor):  # type: ignore[no-untyped-def]
            return disc(gen(z)), disc(real)

    controller.after_generator_step(g, d, step, Logits())  # type: ignore[arg-type]
    assert len(d.extra["sparse"]["balance"]["window"]) == 2


# ------------------------------------------------------------------------------------------ a short run
class MeanPixel(Metric):
    """A stand-in for the Inception FID (its weights are not shipped): distance of mean pixel values."""

    name: ClassVar[str] = "test_mean_pixel"
    primary: ClassVar[str] = "gap"

    def prepare(self, data: Any, device: torch.device, *, generator: torch.Generator) -> None:
        self.mean = data.sample(16, generator=generator).mean()

    def score(self, samples: torch.Tensor) -> dict[str, float]:
        return {"gap": float((samples.mean() - self.mean).abs())}


class TestPlugin:
    @hookimpl
    def evogan_register_metrics(self, register: Any) -> None:
        register(MeanPixel)


def tiny_folder(path: Path, count: int = 24) -> Path:
    from PIL import Image

    path.mkdir()
    generator = torch.Generator().manual_seed(0)
    for i in range(count):
        pixels = torch.randint(0, 256, (32, 32, 3), generator=generator, dtype=torch.uint8).numpy()
        Image.fromarray(pixels).save(path / f"{i:03d}.png")
    return path


def test_cifar10_sngan_recipe_runs_one_generation_on_a_tiny_folder(tmp_path: Path) -> None:
    pm = make_plugin_manager(autoload=False, modules=GAN_PLUGINS, extra=[TestPlugin()])
    folder = tiny_folder(tmp_path / "images")
    overrides = [
        f'run.output_dir="{tmp_path / "runs"}"',
        "run.generations=1",
        'run.device="cpu"',
        "topology.rows=1",
        "topology.cols=1",
        'population.replacement="always"',  # the metrics then describe the trained offspring
        f'problem.data={{use="image_folder", root="{folder}", image_size=32, channels=3, workers=0}}',
        'problem.metric={use="test_mean_pixel"}',
        "problem.batch_size=4",
        "problem.batches_per_generation=10",  # 10 D steps, 2 G steps at critic_steps 5
        "problem.fitness_samples=8",
        "problem.score_samples=8",
        "problem.picture_samples=4",
        "problem.network.ngf=8",
        "problem.network.ndf=8",
        "problem.sparsity.br_freq=1",
        "problem.sparsity.da_iters=2",
        "problem.sparsity.d_interval=2",
    ]
    prepared = prepare(ROOT / "recipes" / "cifar10-sngan.toml", overrides=overrides, pm=pm)
    recipe = prepared.recipe.to_toml()
    assert 'use = "sngan32"' in recipe and 'use = "hinge"' in recipe and "critic_steps = 5" in recipe
    run_in_process(prepared)
    record = json.loads((prepared.run_dir.path / "metrics.jsonl").read_text().splitlines()[-1])
    sparse = record["sparsity"]
    assert sparse["density_g"] == pytest.approx(0.3, abs=1e-4)
    assert 0 < sparse.get("flops_ratio", 0) < 1 and "br" in sparse, sparse
    assert json.loads((prepared.run_dir.path / "summary.json").read_text())["generations"] == 1
