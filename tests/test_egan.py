"""E-GAN's variation of the generator ([problem.egan]): the fittest child, by a fitness computed here on
its own, replaces the parent with its optimizer state; one loss is the plain step; runs stay reproducible;
bad uses are one-line errors."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from evogan_gan.egan import WINS
from evogan_gan.losses import LOSSES
from evogan_gan.problem import GanProblem
from test_run import metrics, one_line_error, run  # pytest puts tests/ on sys.path (rootdir conftest, prepend mode)
from torch import nn

from evogan import recipe as recipes
from evogan.adversarial.contracts import Loss
from evogan.engine.run import build_settings
from evogan.individual import Individual
from evogan.plugins import make_plugin_manager
from evogan.registry import Registries
from evogan.runtime.single import prepare, run_in_process

BY_NAME = {loss.name: loss for loss in LOSSES}


def loss(name: str) -> Loss:
    return BY_NAME[name](BY_NAME[name].Options())


def gan(path: Path, *overrides: str) -> GanProblem:
    registries = Registries.from_plugin_manager(make_plugin_manager())
    recipe = recipes.load(path, registries, list(overrides))
    problem = build_settings(recipe, registries, None, torch.device("cpu"), scoring=False).problem
    assert isinstance(problem, GanProblem)
    return problem


def pair(problem: GanProblem, seed: int = 0, steps: int = 10) -> tuple[Individual, Individual]:
    """A generator and a discriminator, ``steps`` plain steps each into training (Adam's state is not empty)."""
    draw = torch.Generator().manual_seed(seed)
    made = []
    for role in ("generator", "discriminator"):
        network = problem.create(role, generator=draw)
        optimizer = problem.make_optimizer(role, network, 5e-3)
        made.append(Individual(role, network, optimizer, {"lr": 5e-3}, 0, role))
    g, d = made
    for _ in range(steps):
        real, z = problem.source.sample(32, generator=draw), problem.noise(32, draw)
        problem._generator_update(g, [(d.network, 1.0)], [None], z, loss("bce"), single=True, stream=draw)
        problem.discriminator_step(d, g.network, real, stream=draw)
    return g, d


def child(parent: Individual, d: nn.Module, loss_name: str, z: torch.Tensor) -> Individual:
    """One Adam step of a copy of ``parent`` with ``loss_name``'s generator loss, written out here."""
    copied = copy.deepcopy(parent)  # network and optimizer together: the optimizer keeps the copy's parameters
    d.requires_grad_(False)
    copied.trainer.zero_grad(set_to_none=True)
    loss(loss_name).generator_loss(d(copied.network(z))).backward()
    copied.trainer.step()
    d.requires_grad_(True)
    return copied


def fitness(g: nn.Module, d: nn.Module, real: torch.Tensor, z: torch.Tensor, gamma: float) -> float:
    """E-GAN's F = F_q + gamma F_d, by the paper's formulas on a copy of D."""
    d = copy.deepcopy(d)
    with torch.no_grad():
        fake = g(z)
    fake_logits, real_logits = d(fake), d(real)
    quality = torch.sigmoid(fake_logits).mean().item()
    bce = -F.logsigmoid(real_logits).mean() - torch.log1p(-torch.sigmoid(fake_logits)).mean()
    bce.backward()
    norm = torch.sqrt(sum(p.grad.pow(2).sum() for p in d.parameters() if p.grad is not None))
    return quality + gamma * -math.log(norm.item())


@pytest.mark.parametrize("gamma", [0.0, 0.5])
@pytest.mark.parametrize("losses", [("minimax", "heuristic", "mse"), ("mse", "heuristic", "minimax")])
def test_the_fittest_child_replaces_the_parent_with_its_optimizer_state(
    tiny_recipe, losses: tuple[str, ...], gamma: float
) -> None:
    names = ", ".join(f'"{name}"' for name in losses)
    problem = gan(tiny_recipe(), f"problem.egan={{losses=[{names}], gamma={gamma}}}")
    g, d = pair(problem)
    real = problem.source.sample(32, generator=torch.Generator().manual_seed(1))
    draw = torch.Generator().manual_seed(2)
    z, z_fit = problem.noise(32, draw), problem.noise(32, draw)  # the step's noise, then the fitness noise
    children = {name: child(g, d.network, name, z) for name in losses}
    scores = {name: fitness(c.network, d.network, real, z_fit, gamma) for name, c in children.items()}
    top, second = sorted(scores.values(), reverse=True)[:2]
    assert top - second > 1e-5  # clear of rounding: the argmax is one child (minimax at gamma 0, mse at 0.5)
    winner = max(scores, key=lambda name: scores[name])

    problem.generator_step(g, d.network, real, stream=torch.Generator().manual_seed(2))

    expected = children[winner]
    for got, want in zip(g.network.parameters(), expected.network.parameters(), strict=True):
        assert torch.allclose(got, want, rtol=1e-5, atol=1e-7)
    state, want_state = g.trainer.state_dict()["state"], expected.trainer.state_dict()["state"]
    assert state.keys() == want_state.keys()
    for index, moments in state.items():
        for key, value in moments.items():
            assert torch.allclose(value, want_state[index][key], rtol=1e-5, atol=1e-9), (index, key)
    assert g.extra[WINS].tolist() == [int(name == winner) for name in losses]
    assert problem.individual_metrics(g) == {f"egan_{name}": float(name == winner) for name in losses}


def test_one_loss_is_the_plain_step_with_that_loss(tiny_recipe) -> None:
    egan, plain = gan(tiny_recipe(), 'problem.egan={losses=["mse"]}'), gan(tiny_recipe(), 'problem.loss={use="mse"}')
    (g1, d1), (g2, d2) = pair(egan, steps=0), pair(plain, steps=0)  # D steps would use each problem.loss
    real = egan.source.sample(32, generator=torch.Generator().manual_seed(1))
    s1, s2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    for _ in range(2):  # the second from the first's Adam state
        egan.generator_step(g1, d1.network, real, stream=s1)
        plain.generator_step(g2, d2.network, real, stream=s2)
    for a, b in zip(g1.network.parameters(), g2.network.parameters(), strict=True):
        assert torch.equal(a, b)
    assert torch.equal(s1.get_state(), s2.get_state())  # nothing more drawn


def test_several_defenders_are_weighted(tiny_recipe) -> None:
    """Against two weighted discriminators the step runs, keeps one child and leaves both discriminators as
    they were (their parameters, and no gradients left on them)."""
    problem = gan(tiny_recipe(), "problem.egan={gamma=1.0}")
    g, d = pair(problem)
    _, other = pair(problem, seed=5)
    parameters = [p for net in (d.network, other.network) for p in net.parameters()]
    before = [(p.detach().clone(), p.grad.clone()) for p in parameters]  # their last D step's gradients
    real = problem.source.sample(32, generator=torch.Generator().manual_seed(1))
    problem.generator_step(g, [(d.network, 0.25), (other.network, 0.75)], real, stream=torch.Generator())
    for p, (value, grad) in zip(parameters, before, strict=True):
        assert torch.equal(p, value) and p.grad is not None and torch.equal(p.grad, grad) and p.requires_grad
    assert int(g.extra[WINS].sum()) == 1


def test_a_run_is_reproducible_and_records_the_mix_of_winners(tiny_recipe) -> None:
    path = tiny_recipe(generations=2, rows=1, cols=2)
    on = "problem.egan={gamma=0.1}"
    first, second = metrics(run(path, on)), metrics(run(path, on))
    assert first == second
    plain = metrics(run(path))
    assert [r["g_loss"] for r in first] != [r["g_loss"] for r in plain]
    for record in first:
        shares = record["individual_metrics"]
        assert set(shares) == {"g_egan_minimax", "g_egan_heuristic", "g_egan_mse"}
        assert math.isclose(sum(shares.values()), 1.0)  # one generation's steps, every one won by someone


def test_resume_is_exact(tiny_recipe) -> None:
    path = tiny_recipe(seed=4, generations=2, rows=1, cols=2)
    on = "problem.egan={gamma=0.1}"
    straight = run(path, on)
    stopped = run(path, on, "run.checkpoint_every=1", stop_after=1)
    run_in_process(prepare(None, resume_dir=stopped))
    assert metrics(stopped) == metrics(straight)


def test_off_adds_nothing_and_one_loss_equal_to_problem_loss_trains_the_same(tiny_recipe) -> None:
    path = tiny_recipe(generations=2, rows=1, cols=2)
    plain = metrics(run(path))
    assert all("individual_metrics" not in record for record in plain)
    same = metrics(run(path, 'problem.egan={losses=["bce"]}'))
    assert [r.pop("individual_metrics") for r in same] == [{"g_egan_bce": 1.0}] * len(same)
    assert same == plain


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (('problem.egan={losses=["nope"]}',), "problem.egan.losses: unknown loss 'nope'"),
        (("problem.egan={losses=[]}",), "problem.egan.losses: "),
        (('problem.egan={losses=["mse", "mse"]}',), "problem.egan.losses: each loss at most once (mse twice)"),
        (("problem.egan={gamma=-1}",), "problem.egan.gamma: must be >= 0"),
        (("problem.egan={}", "run.vectorize=true"), "run.vectorize: true, but problem.egan: "),
        (("problem.egan={}", 'problem.sparsity={use="static"}'), "problem.egan: sparsity static masks one generator"),
    ],
)
def test_bad_uses_are_one_line_errors(tiny_recipe, sets: tuple[str, ...], message: str) -> None:
    assert message in one_line_error(tiny_recipe(generations=1), *sets)


def test_validate_names_an_unknown_loss_without_building_anything(tiny_recipe) -> None:
    from click.testing import CliRunner

    from evogan.cli import cli

    path = tiny_recipe(generations=1)
    result = CliRunner().invoke(cli, ["validate", str(path), "--set", 'problem.egan={losses=["mse", "nope"]}'])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert f"{path}: problem.egan.losses: unknown loss 'nope'" in result.output


def test_one_loss_does_not_conflict_with_sparsity(tiny_recipe) -> None:
    # one child is the plain step: the masks follow it as they do any step
    sets = ('problem.egan={losses=["bce"]}', 'problem.sparsity={use="static"}')
    records = metrics(run(tiny_recipe(generations=1), *sets))
    assert records and all(r["individual_metrics"]["g_egan_bce"] == 1.0 for r in records)
