"""Sparse library and the built-in sparsity controllers (adapt.md section 9)."""

from __future__ import annotations

import copy
import io
import math
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch
from evogan_gan import sparsity as builtin
from evogan_gan.sparse import balance, dst, flops, masks, wire
from evogan_gan.sparse.state import validate_sparse_state
from pydantic import ValidationError
from torch import nn

from evogan.adversarial.contracts import GeneratorStep
from evogan.errors import MessageRejected, UserError
from evogan.individual import SPARSE
from evogan.transport import envelope

torch.set_num_threads(1)


@dataclass
class FakeIndividual:
    role: str
    network: nn.Module
    optimizer: torch.optim.Optimizer
    hyper: dict[str, float] = field(default_factory=lambda: {"lr": 1e-2})
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def trainer(self) -> torch.optim.Optimizer:
        return self.optimizer

    @property
    def sparse(self) -> dict[str, Any]:
        """The controller's state, ``extra[SPARSE]`` (a test's shorthand; Individual's warns)."""
        state: dict[str, Any] = self.extra.setdefault(SPARSE, {})
        return state

    @sparse.setter
    def sparse(self, state: dict[str, Any]) -> None:
        self.extra[SPARSE] = state


class FakeProblem:
    """``discriminator_logits`` as the GAN problem does it: no-grad D(G(z)), D(real)."""

    @torch.no_grad()
    def discriminator_logits(
        self, discriminator: nn.Module, generator_net: nn.Module, z: torch.Tensor, real: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return discriminator(generator_net(z)).reshape(-1), discriminator(real).reshape(-1)


def individual(role: str, network: nn.Module) -> FakeIndividual:
    return FakeIndividual(role, network, torch.optim.Adam(network.parameters(), lr=1e-2, betas=(0.0, 0.9)))


def pair(seed: int = 0, hidden: int = 32) -> tuple[FakeIndividual, FakeIndividual]:
    torch.manual_seed(seed)
    g = nn.Sequential(nn.Linear(4, hidden), nn.ReLU(), nn.Linear(hidden, 2))
    d = nn.Sequential(nn.Linear(2, hidden), nn.ReLU(), nn.Linear(hidden, 1))
    return individual("generator", g), individual("discriminator", d)


def make(cls: type, **options: Any) -> Any:
    return cls(cls.Options(**options))


def rng(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def train(controller: Any, g: FakeIndividual, d: FakeIndividual, steps: int, batch: int = 8) -> None:
    """A tiny hinge-loss GAN loop calling the controller where the engine does."""
    problem = FakeProblem()
    gen = rng(1)
    for i in range(steps):
        z = torch.randn(batch, 4, generator=gen)
        real = torch.randn(batch, 2, generator=gen) + 2
        g.optimizer.zero_grad()
        fake_logits = d.network(g.network(z)).reshape(-1)
        (-fake_logits.mean()).backward()
        g.optimizer.step()
        step = GeneratorStep(z=z, real=real, fake_logits_pre=fake_logits.detach(), step=i + 1)
        controller.after_generator_step(g, d, step, problem)
        d.optimizer.zero_grad()
        loss = (
            torch.relu(1 - d.network(real)).mean() + torch.relu(1 + d.network(g.network(z).detach())).mean()
        )
        loss.backward()
        d.optimizer.step()
        controller.after_discriminator_step(d)


# ------------------------------------------------------------------------------------------ densities
SHAPES = {
    "conv1": (64, 3, 3, 3),
    "conv2": (128, 64, 3, 3),
    "convt": (128, 64, 4, 4),
    "fc": (512, 2048),
    "head": (1, 128),
}


@pytest.mark.parametrize("distribution", ["erk", "uniform"])
@pytest.mark.parametrize("density", [0.01, 0.05, 0.1, 0.3, 0.5, 0.9, 1.0])
def test_layer_counts_hit_the_target_exactly(distribution: str, density: float) -> None:
    counts = masks.layer_counts(SHAPES, density, distribution)  # type: ignore[arg-type]
    sizes = {name: math.prod(shape) for name, shape in SHAPES.items()}
    assert sum(counts.values()) == round(density * sum(sizes.values()))
    assert all(0 <= counts[n] <= sizes[n] for n in sizes)
    if distribution == "uniform":
        assert all(abs(counts[n] / sizes[n] - density) <= 1 / sizes[n] + 1e-12 for n in sizes)


def test_erk_densifies_small_layers_and_keeps_erk_proportions() -> None:
    counts = masks.layer_counts(SHAPES, 0.1, "erk")
    sizes = {name: math.prod(shape) for name, shape in SHAPES.items()}
    dens = {n: counts[n] / sizes[n] for n in sizes}
    assert dens["head"] == 1.0 and dens["conv1"] == 1.0  # capacity check: would exceed 1
    raw = {n: sum(SHAPES[n]) / sizes[n] for n in ("conv2", "fc")}
    assert dens["conv2"] / dens["fc"] == pytest.approx(raw["conv2"] / raw["fc"], rel=1e-3)


def test_random_masks_have_exact_counts_and_follow_the_generator() -> None:
    params = {n: torch.empty(s) for n, s in SHAPES.items()}
    counts = masks.layer_counts(SHAPES, 0.2, "erk")
    first = masks.random_masks(params, counts, generator=rng(3))
    again = masks.random_masks(params, counts, generator=rng(3))
    assert {n: int(m.sum()) for n, m in first.items()} == counts
    assert all(torch.equal(first[n], again[n]) for n in first)
    assert masks.active_count(first) == round(0.2 * masks.total_count(first))


def test_maskable_parameters_skip_biases_norms_embeddings_and_keep_dense_names() -> None:
    net = nn.Module()
    net.fc = nn.Linear(4, 4)
    net.conv = nn.Conv2d(1, 2, 3)
    net.up = nn.ConvTranspose2d(2, 1, 3)
    net.bn = nn.BatchNorm2d(2)
    net.emb = nn.Embedding(10, 4)
    net.sn = nn.utils.spectral_norm(nn.Linear(4, 4))
    net.psn = nn.utils.parametrizations.spectral_norm(nn.Linear(4, 4))
    net.classifier = nn.Linear(4, 1)
    names = set(masks.maskable_parameters(net))
    assert names == {
        "fc.weight",
        "conv.weight",
        "up.weight",
        "sn.weight_orig",
        "psn.parametrizations.weight.original",
    }


# ------------------------------------------------------------------------------------------ DST
def random_state(seed: int = 0) -> tuple[dict[str, nn.Parameter], dict[str, torch.Tensor]]:
    torch.manual_seed(seed)
    params = {"a": nn.Parameter(torch.randn(20, 30)), "b": nn.Parameter(torch.randn(50, 10))}
    counts = masks.layer_counts({n: p.shape for n, p in params.items()}, 0.3, "erk")
    m = masks.random_masks(params, counts, generator=rng(seed))
    masks.apply_masks(params, m)
    for p in params.values():
        p.grad = torch.randn_like(p)
    return params, m


@pytest.mark.parametrize("growth", ["random", "gradient"])
def test_prune_and_grow_keeps_the_active_count_exact(growth: str) -> None:
    params, m = random_state()
    before = masks.active_count(m)
    new, replaced = dst.prune_and_grow(params, m, 0.3, growth=growth, generator=rng(1))  # type: ignore[arg-type]
    assert replaced == round(0.3 * before)
    assert masks.active_count(new) == before
    changed = sum(int((new[n] & ~m[n]).sum()) for n in m)
    assert 0 < changed <= replaced
    for n in m:
        assert torch.all(params[n][~new[n]] == 0)
        assert torch.all(params[n][new[n] & ~m[n]] == 0)  # grown weights start at 0


def test_gradient_growth_picks_the_largest_inactive_gradient() -> None:
    params, m = random_state()
    inactive = (~m["b"]).nonzero()[0]
    params["b"].grad[tuple(inactive)] = 1e6
    _, grown = dst.grow(params, m, 1, growth="gradient", generator=rng())
    assert bool(grown["b"][tuple(inactive)]) and masks.active_count(grown) == 1


def test_resize_reaches_the_target_both_ways() -> None:
    params, m = random_state()
    total = masks.total_count(m)
    up = dst.resize(params, m, round(0.5 * total), growth="gradient", generator=rng())
    down = dst.resize(params, up, round(0.1 * total), growth="gradient", generator=rng())
    assert masks.active_count(up) == round(0.5 * total) and masks.active_count(down) == round(0.1 * total)
    kept = torch.cat([params[n].detach().abs()[down[n]] for n in m])
    dropped = torch.cat([params[n].detach().abs()[up[n] & ~down[n]] for n in m])
    assert kept.min() >= dropped.max()  # global magnitude pruning


def test_cosine_drop_fraction() -> None:
    assert dst.cosine_fraction(0, 100) == pytest.approx(0.5)
    assert dst.cosine_fraction(50, 100) == pytest.approx((0.5 + 0.005) / 2)
    assert dst.cosine_fraction(100, 100) == pytest.approx(0.005)
    assert dst.cosine_fraction(1000, 100) == pytest.approx(0.005)


# ------------------------------------------------------------------------------------------ masking + Adam
def test_pruned_weights_and_adam_moments_stay_zero() -> None:
    controller = make(builtin.Static, density_g=0.2, density_d=0.2)
    g, d = pair()
    controller.prepare(g, stream=rng(0))
    controller.prepare(d, stream=rng(1))
    train(controller, g, d, steps=30)
    for ind in (g, d):
        params = dict(ind.network.named_parameters())
        for name, mask in ind.sparse["masks"].items():
            assert torch.all(params[name][~mask] == 0)
            state = ind.optimizer.state[params[name]]
            assert torch.all(state["exp_avg"][~mask] == 0) and torch.all(state["exp_avg_sq"][~mask] == 0)
            assert state["exp_avg_sq"][mask].abs().sum() > 0
        assert masks.overall_density(ind.sparse["masks"]) == pytest.approx(0.2, abs=1 / 64)


def test_fan_in_init_rescales_each_unit_by_its_active_share() -> None:
    # Unit 0 keeps 4 of 16 inputs (x2), unit 1 all 16 (x1), unit 2 none (stays 0 once masked).
    net = nn.Linear(16, 3)
    before = net.weight.detach().clone()
    mask = torch.zeros(3, 16, dtype=torch.bool)
    mask[0, :4] = True
    mask[1] = True
    masks.scale_to_active_fan_in(net, {"weight": mask})
    assert torch.allclose(net.weight[0], 2 * before[0]) and torch.equal(net.weight[1], before[1])
    # A transposed convolution's output channels are its weight's dim 1: (in, out, k, k).
    convt = nn.ConvTranspose2d(4, 2, 2)
    before = convt.weight.detach().clone()
    mask = torch.ones(4, 2, 2, 2, dtype=torch.bool)
    mask[:, 0, 0] = False  # output channel 0 keeps 8 of its 16 inputs
    masks.scale_to_active_fan_in(convt, {"weight": mask})
    assert torch.allclose(convt.weight[:, 0], math.sqrt(2) * before[:, 0])
    assert torch.equal(convt.weight[:, 1], before[:, 1])


@pytest.mark.parametrize(("init", "scaled"), [("fan_in", True), ("unscaled", False)])
def test_controller_init_option_chooses_the_initial_scale(init: str, scaled: bool) -> None:
    g, _ = pair()
    before = dict((n, p.detach().clone()) for n, p in g.network.named_parameters())
    make(builtin.Static, density_g=0.25, init=init).prepare(g, stream=rng(0))
    for name, mask in g.sparse["masks"].items():
        weight = dict(g.network.named_parameters())[name]
        active = mask.sum(dim=1, keepdim=True).clamp(min=1)
        expected = torch.sqrt(mask.shape[1] / active).expand_as(mask) if scaled else torch.ones(mask.shape)
        assert torch.allclose(weight[mask] / before[name][mask], expected[mask])
        assert torch.all(weight[~mask] == 0)
    assert not scaled or masks.overall_density(g.sparse["masks"]) < 1  # something was rescaled


def test_masked_spectral_norm_critic_forwards_as_its_masked_weights_after_training() -> None:
    # The base configuration of the sparse benchmark: a spectral-norm D whose masks sit on the tensor
    # Adam trains. After steps, pruned positions and their moments are exactly zero, and the forward is
    # the same as the forward of weights masked by hand (nothing leaks through the parametrization).
    from evogan_gan.image_networks import MnistMlp

    networks = MnistMlp(MnistMlp.Options(hidden=16, latent_size=4, spectral_norm=True))
    g = individual("generator", networks.build("generator", (1, 28, 28), generator=rng(0)))
    d = individual("discriminator", networks.build("discriminator", (1, 28, 28), generator=rng(1)))
    controller = make(builtin.Static, density_g=0.3, density_d=0.3)
    controller.prepare(g, stream=rng(2))
    controller.prepare(d, stream=rng(3))
    gen = rng(4)
    for _ in range(5):
        real = torch.rand(8, 1, 28, 28, generator=gen) * 2 - 1
        fake = g.network(torch.randn(8, 4, generator=gen))
        d.optimizer.zero_grad()
        (torch.relu(1 - d.network(real)).mean() + torch.relu(1 + d.network(fake.detach())).mean()).backward()
        d.optimizer.step()
        controller.after_discriminator_step(d)
    params = dict(d.network.named_parameters())
    assert d.sparse["masks"] and all("parametrizations" in name for name in d.sparse["masks"])
    for name, mask in d.sparse["masks"].items():
        state = d.optimizer.state[params[name]]
        assert torch.all(params[name][~mask] == 0) and torch.all(state["exp_avg"][~mask] == 0)
    d.network.eval()  # no power iteration: the forward is a function of the weights alone
    probe = torch.rand(4, 1, 28, 28, generator=gen)
    with torch.no_grad():
        before = d.network(probe)
        for name, mask in d.sparse["masks"].items():
            params[name].copy_(torch.where(mask, params[name], torch.zeros(())))
        assert torch.equal(d.network(probe), before)


@pytest.mark.parametrize("moments", ["layer", "zero"])
def test_grown_weights_start_at_zero_with_their_layers_second_moment(moments: str) -> None:
    net = nn.Linear(8, 8)
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    for _ in range(3):
        opt.zero_grad()
        net(torch.randn(4, 8, generator=rng(5))).pow(2).sum().backward()
        opt.step()
    params = {"weight": net.weight}
    mask = torch.rand(8, 8, generator=rng(0)) < 0.5
    masks.apply_masks(params, {"weight": mask}, opt)
    state = opt.state[net.weight]
    expected = float(state["exp_avg_sq"][mask].mean())
    new, replaced = dst.prune_and_grow(
        params, {"weight": mask}, 0.25, growth="gradient", generator=rng(1), optimizer=opt, moments=moments
    )
    grown = new["weight"] & ~mask
    assert replaced > 0 and bool(grown.any())
    assert torch.all(net.weight[grown] == 0) and torch.all(state["exp_avg"][grown] == 0)
    kept = new["weight"] & mask
    # the mean is taken over the layer's active weights that were not grown (here: after pruning)
    seeded = float(state["exp_avg_sq"][kept].mean()) if moments == "layer" else 0.0
    assert torch.allclose(state["exp_avg_sq"][grown], torch.full((int(grown.sum()),), seeded))
    assert torch.all(state["exp_avg_sq"][~new["weight"]] == 0)
    assert expected > 0


def test_apply_masks_follows_replaced_and_edited_masks() -> None:
    # apply_masks caches a 0/1 multiplier per mask: a new mask, or one edited in place, must take effect.
    net = nn.Linear(8, 8)
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    net(torch.randn(2, 8)).sum().backward()
    opt.step()
    params = {"weight": net.weight}
    first = {"weight": torch.rand(8, 8, generator=rng(0)) < 0.5}
    masks.apply_masks(params, first, opt)
    assert torch.all(net.weight[~first["weight"]] == 0) and torch.all(net.weight[first["weight"]] != 0)
    assert torch.all(opt.state[net.weight]["exp_avg"][~first["weight"]] == 0)
    with torch.no_grad():
        net.weight.fill_(1.0)
    first["weight"][:4] = False  # edited in place
    masks.apply_masks(params, first, opt)
    assert torch.all(net.weight[:4] == 0) and torch.equal(net.weight[4:] != 0, first["weight"][4:])
    with torch.no_grad():
        net.weight.fill_(1.0)
    masks.apply_masks(params, {"weight": torch.ones(8, 8, dtype=torch.bool)}, opt)  # a new mask
    assert torch.all(net.weight == 1.0)


@pytest.mark.parametrize("cls", [builtin.Set, builtin.RigL])
def test_dynamic_generator_mask_changes_at_the_interval(cls: type) -> None:
    controller = make(cls, density_g=0.3, g_interval=5, total_steps=20)
    g, d = pair()
    controller.prepare(g, stream=rng(0))
    controller.prepare(d, stream=rng(1))
    g0 = {n: m.clone() for n, m in g.sparse["masks"].items()}
    d0 = {n: m.clone() for n, m in d.sparse["masks"].items()}
    active = masks.active_count(g0)
    train(controller, g, d, steps=10)
    assert g.sparse["mask_updates"] == 2 and g.sparse["steps"] == 10
    assert masks.active_count(g.sparse["masks"]) == active
    assert any(not torch.equal(g0[n], g.sparse["masks"][n]) for n in g0)
    assert all(torch.equal(d0[n], d.sparse["masks"][n]) for n in d0)


def test_adapt_with_a_static_generator_mask_never_changes_g() -> None:
    # g_mask = "static": ADAPT's D controller without G's prune-and-grow; "dynamic" (the paper) does it.
    for g_mask, updates in (("static", 0), ("dynamic", 2)):
        controller = make(builtin.AdaptRelax, density_g=0.3, g_interval=5, total_steps=20, g_mask=g_mask)
        g, d = pair()
        controller.prepare(g, stream=rng(0))
        controller.prepare(d, stream=rng(1))
        g0 = {n: m.clone() for n, m in g.sparse["masks"].items()}
        train(controller, g, d, steps=10)
        assert g.sparse["mask_updates"] == updates and g.sparse["steps"] == 10
        assert all(torch.equal(g0[n], g.sparse["masks"][n]) for n in g0) == (g_mask == "static")


# ------------------------------------------------------------------------------------------ balance ratio
def linear_pair(g_out: float) -> tuple[nn.Module, nn.Module]:
    """G(z) = (g_out, 0) for z = 0; D(x) = x_0."""
    g, d = nn.Linear(1, 2), nn.Linear(2, 1)
    with torch.no_grad():
        g.weight.zero_()
        g.bias.copy_(torch.tensor([g_out, 0.0]))
        d.weight.copy_(torch.tensor([[1.0, 0.0]]))
        d.bias.zero_()
    return g, d


@pytest.mark.parametrize(("g_post", "expected"), [(1.0, 0.0), (3.0, 1.0), (2.0, 0.5), (0.0, -0.5)])
def test_balance_ratio_hand_computed(g_post: float, expected: float) -> None:
    # fD = D(G_pre(z)) = 1, r = D(real) = 3, fG = D(G_post(z)) = g_post: BR = (g_post - 1) / 2
    g, d = linear_pair(g_post)
    z, real = torch.zeros(4, 1), torch.tensor([[3.0, 5.0]] * 4)
    step = GeneratorStep(z=z, real=real, fake_logits_pre=torch.ones(4), step=10)
    sample = balance.measure(FakeProblem(), d, g, step)  # type: ignore[arg-type]
    assert sample == [g_post, 1.0, 3.0]
    assert balance.balance_ratio([sample] * 3) == pytest.approx(expected)


def test_balance_ratio_is_a_mean_of_ratios_and_guarded() -> None:
    window = [[2.0, 1.0, 3.0], [1.5, 1.0, 2.0]]  # 0.5 and 0.5; ratio of means would also be 0.5
    assert balance.balance_ratio(window) == pytest.approx(0.5)
    assert balance.balance_ratio([[1.0, 0.0, 4.0], [3.0, 0.0, 1.0]]) == pytest.approx((0.25 + 3.0) / 2)
    assert balance.sample_ratio(1.0, 0.0, 0.0) == balance.DEFAULT_CLIP  # zero gap: +eps, then clipped
    assert balance.sample_ratio(-1.0, 0.0, 1e-9, clip=5.0) == -5.0
    window2: list[list[float]] = []
    for i in range(5):
        balance.push(window2, [i, 0, 1], 3)
    assert window2 == [[2.0, 0.0, 1.0], [3.0, 0.0, 1.0], [4.0, 0.0, 1.0]]


# ------------------------------------------------------------------------------------------ ADAPT rule
def adapt_pair(cls: type, density_d: float, **options: Any) -> tuple[Any, FakeIndividual, FakeIndividual]:
    base = dict(density_g=0.3, density_d=density_d, br_freq=1, da_iters=4, d_interval=4, g_interval=1000)
    controller = make(cls, **{**base, **options})
    g, d = pair()
    controller.prepare(g, stream=rng(0))
    controller.prepare(d, stream=rng(1))
    return controller, g, d


def decide(controller: Any, d: FakeIndividual, br: float) -> None:
    """Force one decision with a full window whose BR is ``br`` (fD = 0, r = 1, fG = br)."""
    d.sparse["balance"]["window"] = [[br, 0.0, 1.0]] * 4
    d.sparse["balance"]["pending"] = True
    controller.after_discriminator_step(d)


def d_density(d: FakeIndividual) -> float:
    return masks.overall_density(d.sparse["masks"])


def test_adapt_raises_lowers_and_respects_floor_and_cap() -> None:
    controller, _, d = adapt_pair(builtin.AdaptRelax, 0.3)
    total = masks.total_count(d.sparse["masks"])
    decide(controller, d, 0.6)
    assert d.sparse["density"] == pytest.approx(0.35) and masks.active_count(d.sparse["masks"]) == round(
        0.35 * total
    )
    decide(controller, d, 0.55)  # at the upper bound counts as too weak
    assert d.sparse["density"] == pytest.approx(0.4)
    decide(controller, d, 0.5)  # inside the band: nothing
    assert d.sparse["density"] == pytest.approx(0.4) and d.sparse["balance"]["br"] == pytest.approx(0.5)
    decide(controller, d, 0.45)
    assert d.sparse["density"] == pytest.approx(0.35) and d_density(d) == pytest.approx(0.35, abs=1 / total)
    for _ in range(10):
        decide(controller, d, 0.0)
    assert d.sparse["density"] == pytest.approx(0.05) and masks.active_count(d.sparse["masks"]) == round(
        0.05 * total
    )
    controller, _, d = adapt_pair(builtin.AdaptRelax, 0.9)
    for _ in range(5):
        decide(controller, d, 5.0)
    assert d.sparse["density"] == 1.0 and d_density(d) == 1.0
    params = dict(d.network.named_parameters())
    assert all(bool(params[n].ne(0).any()) for n in d.sparse["masks"])


def test_adapt_strict_does_dst_at_the_cap() -> None:
    controller, _, d = adapt_pair(builtin.AdaptStrict, 0.45)
    decide(controller, d, 0.9)
    assert d.sparse["density"] == pytest.approx(0.5)
    before = {n: m.clone() for n, m in d.sparse["masks"].items()}
    updates = d.sparse["mask_updates"]
    decide(controller, d, 0.9)
    assert d.sparse["density"] == pytest.approx(0.5) and d.sparse["mask_updates"] == updates + 1
    assert masks.active_count(d.sparse["masks"]) == masks.active_count(before)
    assert any(not torch.equal(before[n], d.sparse["masks"][n]) for n in before)
    relax, _, d2 = adapt_pair(builtin.AdaptRelax, 0.5, density_max=0.5)
    decide(relax, d2, 0.9)
    assert d2.sparse["mask_updates"] == 0  # relax at its cap: nothing


def test_adapt_strict_d_schedule_counts_generator_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    # n_critic 5: D has taken 5x the G steps; the D drop fraction must follow the run's G-step horizon.
    controller, _, d = adapt_pair(builtin.AdaptStrict, 0.5, total_steps=1000, d_drop_fraction=0.4)
    d.sparse["steps"] = 5000
    d.sparse["balance"]["clock"] = 500
    seen: list[tuple[int, int]] = []
    real = dst.cosine_fraction

    def spy(step: int, total: int, start: float = 0.5, end: float = 0.005) -> float:
        seen.append((step, total))
        return real(step, total, start, end)

    monkeypatch.setattr(dst, "cosine_fraction", spy)
    decide(controller, d, 0.9)  # at the cap and too weak: one D DST step
    assert seen == [(500, 1000)] and d.sparse["mask_updates"] == 1


def test_adapt_end_to_end_flags_and_decides_on_the_d_step() -> None:
    controller, g, d = adapt_pair(builtin.AdaptRelax, 0.3)
    train(controller, g, d, steps=8)
    state = d.sparse["balance"]
    assert state["clock"] == 8 and len(state["window"]) == 4 and state["due"] == 0
    assert "br" in state and state["pending"] is False and state["decisions"] == 2
    metrics = controller.metrics(g, d)
    assert set(metrics) == {
        "br",
        "br_lower",
        "br_upper",
        "density_g",
        "density_d",
        "flops_train",
        "flops_dense",
        "flops_ratio",
        "flops_br",
        "adapt_decisions",
        "adapt_raises",
        "adapt_lowerings",
        "adapt_undos",
        "adapt_blocked",
        "adapt_static",
        "br_in_band",
    }
    assert metrics["adapt_decisions"] == 2 and metrics["adapt_static"] == 0
    assert all(isinstance(v, float) and math.isfinite(v) for v in metrics.values())
    assert metrics["flops_br"] > 0 and 0 < metrics["flops_ratio"] < 1


# ------------------------------------------------------------------------------------------ FLOPs
def test_flops_of_a_toy_linear_network_match_a_hand_count() -> None:
    net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    counted = flops.count_forward_flops(net, torch.zeros(3, 4), {"0.weight": None, "2.weight": None})
    assert counted.weights == {"0.weight": 32.0, "2.weight": 16.0} and counted.dense == 8 + 2
    assert counted.forward() == 58.0
    assert counted.forward({"0.weight": 0.5, "2.weight": 0.25}) == 16 + 4 + 10
    assert flops.training_step_cost(58.0, 10.0, batch=4) == 4 * (3 * 58 + 10)
    assert flops.generator_step_cost(58.0, 10.0, batch=4) == 4 * (3 * 58 + 2 * 10)  # grads pass through D
    assert flops.discriminator_step_cost(10.0, 58.0, batch=4) == 4 * (2 * 3 * 10 + 58)  # real + fake


def test_flops_of_conv_and_conv_transpose() -> None:
    conv = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ConvTranspose2d(2, 1, 3), nn.BatchNorm2d(1))
    counted = flops.count_forward_flops(conv, torch.zeros(2, 1, 5, 5), {"0.weight": None, "1.weight": None})
    assert counted.weights == {"0.weight": 2 * 9 * 9.0, "1.weight": 18 * 9.0}
    assert counted.dense == 2 * 9 + 25 + 2 * 25
    assert conv.training and conv[2].num_batches_tracked == 0  # probe in eval mode, mode restored


def test_flops_fraction_equals_density_for_a_single_linear_layer() -> None:
    controller = make(builtin.Static, density_g=0.3, density_d=0.3, distribution="uniform")
    g = individual("generator", nn.Linear(10, 10, bias=False))
    d = individual("discriminator", nn.Sequential(nn.Linear(10, 10, bias=False), nn.Flatten(0)))
    controller.prepare(g, stream=rng(0))
    controller.prepare(d, stream=rng(1))
    problem = FakeProblem()
    for i in range(3):
        z = torch.randn(5, 10)
        step = GeneratorStep(z=z, real=torch.randn(5, 10), fake_logits_pre=torch.zeros(50), step=i)
        controller.after_generator_step(g, d, step, problem)
        controller.after_discriminator_step(d)
    metrics = controller.metrics(g, d)
    assert metrics["flops_ratio"] == pytest.approx(0.3)
    # per iteration: G step 5 x (3 x 100 + 2 x 100), D step 5 x (6 x 100 + 100) (real and fake batches)
    assert metrics["flops_dense"] == pytest.approx(3 * 5 * ((3 * 100 + 2 * 100) + (6 * 100 + 100)))
    assert metrics["flops_br"] == 0.0 and "br" not in metrics


# ------------------------------------------------------------------------------------------ state
def test_controller_state_round_trips_through_save_and_deepcopy() -> None:
    controller, g, d = adapt_pair(builtin.AdaptStrict, 0.3, g_interval=3)
    train(controller, g, d, steps=8)
    buffer = io.BytesIO()
    torch.save({"g": g.sparse, "d": d.sparse}, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=True)
    for original, restored in (
        (g.sparse, loaded["g"]),
        (d.sparse, loaded["d"]),
        (d.sparse, copy.deepcopy(d.sparse)),
    ):
        assert set(original) == set(restored)
        for key, value in original.items():
            if key == "masks":
                assert all(torch.equal(value[n], restored[key][n]) for n in value)
            else:
                assert restored[key] == value, key
    g2 = copy.deepcopy(g)
    g2.sparse = loaded["g"]
    validate_sparse_state(g2, controller="adapt-strict")
    controller.after_generator_step(
        g2, d, GeneratorStep(torch.randn(2, 4), torch.randn(2, 2), torch.zeros(2), 9), FakeProblem()
    )


def test_validate_sparse_state_rejects_masks_that_do_not_fit() -> None:
    controller = make(builtin.Static)
    g, _ = pair(hidden=32)
    controller.prepare(g, stream=rng(0))
    validate_sparse_state(g, controller="static")
    with pytest.raises(UserError, match="recipe uses 'rigl'"):
        validate_sparse_state(g, controller="rigl")
    other, _ = pair(hidden=16)
    other.sparse = copy.deepcopy(g.sparse)
    with pytest.raises(UserError, match="shape"):
        validate_sparse_state(other)
    wrong = copy.deepcopy(g)
    wrong.sparse["masks"]["extra.weight"] = wrong.sparse["masks"].pop("0.weight")
    with pytest.raises(UserError, match="names no parameter"):
        validate_sparse_state(wrong)
    stale = copy.deepcopy(g)
    with torch.no_grad():
        stale.network[0].weight.fill_(1.0)
    with pytest.raises(UserError, match="non-zero"):
        validate_sparse_state(stale)
    dense, _ = pair()
    validate_sparse_state(dense, controller="dense", masked=False)  # a controller without masks
    with pytest.raises(UserError, match="no sparse state"):
        validate_sparse_state(dense, controller="static")
    with pytest.raises(UserError, match="no sparsity masks"):
        controller.after_discriminator_step(dense)


# ------------------------------------------------------------------------------------------ wire
def test_sparse_wire_round_trips_exactly_and_shrinks() -> None:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(100, 203), nn.Linear(203, 7))
    params = masks.maskable_parameters(net)
    m = masks.random_masks(
        params, masks.layer_counts({n: p.shape for n, p in params.items()}, 0.1), generator=rng()
    )
    masks.apply_masks(params, m)
    state = net.state_dict()
    encoded = wire.encode_sparse(state, m)
    assert encoded["0.weight.__bitmap__"].numel() == math.ceil(203 * 100 / 8)
    assert wire.encoded_bytes(encoded) < 0.2 * wire.encoded_bytes(state)
    frames = envelope.encode(encoded, run="r", cell=0, generation=1)
    received = envelope.decode(frames, max_bytes=1 << 24).tensors
    local = {n: (t.dtype, tuple(t.shape)) for n, t in state.items()}
    decoded, decoded_masks = wire.decode_sparse(received, expected=local)
    assert set(decoded) == set(state)
    assert all(torch.equal(decoded[n], state[n]) and decoded[n].dtype == state[n].dtype for n in state)
    assert all(torch.equal(decoded_masks[n], m[n]) for n in m)
    bad = dict(encoded)
    bad["0.weight.__values__"] = encoded["0.weight.__values__"][:-1]
    with pytest.raises(MessageRejected, match="values"):
        wire.decode_sparse(bad)
    bad = dict(encoded)
    del bad["0.weight.__shape__"]
    with pytest.raises(MessageRejected):
        wire.decode_sparse(bad)
    bad = dict(encoded)
    bad["0.weight.__shape__"] = torch.tensor([100, 203])
    with pytest.raises(MessageRejected, match="local model"):
        wire.decode_sparse(bad, expected=local)
    with pytest.raises(MessageRejected, match="names differ"):
        wire.decode_sparse(encoded, expected={**local, "2.weight": local["0.weight"]})


def test_sparse_state_travels_as_meta_plus_masks() -> None:
    controller, g, d = adapt_pair(builtin.AdaptRelax, 0.3)
    train(controller, g, d, steps=8)
    meta = wire.sparse_meta(d.sparse)
    envelope.encode({}, run="r", cell=0, generation=1, meta={"sparse": meta})  # JSON-safe
    rebuilt = wire.sparse_state(meta, d.sparse["masks"])
    assert {k: v for k, v in rebuilt.items() if k != "masks"} == {
        k: v for k, v in d.sparse.items() if k != "masks"
    }


def test_bit_packing_handles_ragged_lengths() -> None:
    for n in (1, 7, 8, 9, 17):
        mask = torch.rand(n, generator=rng(n)) > 0.5
        packed = wire.pack_bits(mask)
        assert packed.dtype == torch.uint8 and packed.numel() == math.ceil(n / 8)
        assert torch.equal(wire.unpack_bits(packed, n), mask)


# ------------------------------------------------------------------------------------------ options
def test_registration_names() -> None:
    registered: list[type] = []
    builtin.evogan_register_sparsity_controllers(register=registered.append)
    assert [c.name for c in registered] == ["dense", "static", "set", "rigl", "adapt-relax", "adapt-strict"]
    assert (
        builtin.AdaptStrict.Options().density_max == 0.5 and builtin.AdaptRelax.Options().density_max == 1.0
    )
    dense = builtin.Dense(builtin.Dense.Options())
    g, d = pair()
    dense.prepare(g, stream=rng())
    assert g.sparse == {} and dense.metrics(g, d) == {}


@pytest.mark.parametrize(
    ("cls", "options", "match"),
    [
        (builtin.Static, {"density_g": 0}, "density_g"),
        (builtin.Static, {"density_d": 1.5}, "density_d"),
        (builtin.Static, {"density_g": "dense"}, "density_g"),
        (builtin.Static, {"distribution": "gaussian"}, "distribution"),
        (builtin.Static, {"bogus": 1}, "bogus"),
        (builtin.RigL, {"g_interval": 0}, "g_interval"),
        (builtin.AdaptRelax, {"br_lower": 0.6, "br_upper": 0.6}, "br_lower"),
        (builtin.AdaptRelax, {"br_lower": 0.7}, "br_upper"),
        (builtin.AdaptRelax, {"g_mask": "frozen"}, "g_mask"),
        (builtin.Static, {"init": "xavier"}, "init"),
        (builtin.AdaptStrict, {"density_d": 0.8}, "density_max"),
        (builtin.AdaptRelax, {"br_freq": 20, "da_iters": 10}, "da_iters"),
    ],
)
def test_bad_options_are_rejected(cls: type, options: dict[str, Any], match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        cls.Options(**options)


def test_grown_moments_lost_its_benchmark_and_warns_but_still_works() -> None:
    with pytest.warns(FutureWarning, match="sparsity.grown_moments is deprecated"):
        assert builtin.RigL.Options(grown_moments="zero").grown_moments == "zero"
    with pytest.raises(ValidationError, match="grown_moments"):
        builtin.RigL.Options(grown_moments="adam")
    assert builtin.RigL.Options(grown_moments="layer").model_dump()["grown_moments"] == "layer"  # no warning
