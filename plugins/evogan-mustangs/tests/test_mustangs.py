"""The evogan-mustangs plugin's own tests: found through its entry point, keeps the loss contract
(evogan.testing), usable from a recipe, reproducible draws."""

from __future__ import annotations

import json
import tomllib
from collections import Counter
from pathlib import Path

import pydantic
import pytest
import torch
from click.testing import CliRunner

from evogan.cli import _attach_commands, cli
from evogan.plugins import make_plugin_manager
from evogan.registry import Registries
from evogan.testing import check_loss, check_options, run_tiny, write_tiny_recipe

evogan_mustangs = pytest.importorskip(
    "evogan_mustangs", reason="install it: pip install --no-deps -e plugins/evogan-mustangs"
)
Mustangs = evogan_mustangs.Mustangs

_attach_commands()


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def logits(seed: int = 0) -> torch.Tensor:
    return torch.randn(64, generator=torch.Generator().manual_seed(seed))


def test_discovered_through_its_entry_point() -> None:
    plugins = json.loads(invoke("plugins", "--json").output)
    (entry,) = [p for p in plugins if p["distribution"] == "evogan-mustangs"]
    assert entry["name"] == "mustangs" and entry["hooks"] == ["evogan_register_losses"]
    registries = Registries.from_plugin_manager(make_plugin_manager())
    assert registries["loss"].get("mustangs", key="problem.loss.use") is Mustangs


def test_options_default_to_all_three_and_reject_bad_lists() -> None:
    assert Mustangs.Options().losses == ("bce", "mse", "heuristic")
    assert Mustangs.Options(losses=["mse", "bce"]).losses == ("mse", "bce")
    for bad in ([], ["bce", "bce"], ["wgan"]):
        with pytest.raises(pydantic.ValidationError):
            Mustangs.Options(losses=bad)
    check_options(Mustangs, {"losses": ["mse", "bce"]}, invalid=[{"losses": []}, {"losses": ["wgan"]}])


def test_keeps_the_loss_contract() -> None:
    # Seeded draws, finite scalars, logits untouched, no global generator; BCE without a stream (fitness).
    generator_loss, _ = check_loss(Mustangs, {"losses": ["mse", "heuristic"]}, seed=5)
    assert torch.isfinite(generator_loss)


def test_draws_are_uniform_reproducible_and_cover_all_three() -> None:
    loss = Mustangs(Mustangs.Options())
    def draws(seed: int) -> list[str]:
        stream = torch.Generator().manual_seed(seed)
        return [loss.choose(stream) for _ in range(300)]

    first, again = draws(7), draws(7)
    assert first == again
    counts = Counter(first)
    assert set(counts) == {"bce", "mse", "heuristic"}
    assert all(70 <= n <= 130 for n in counts.values()), counts  # about 100 each
    assert draws(8) != first


def test_each_draw_computes_the_named_loss_without_keeping_state() -> None:
    loss = Mustangs(Mustangs.Options())
    before = dict(vars(loss))
    x = logits()
    expected = {name: function(x) for name, function in evogan_mustangs.GENERATOR_LOSSES.items()}
    assert torch.allclose(expected["heuristic"], 0.5 * expected["bce"])  # Lipizzaner's heuristic = BCE / 2
    assert torch.allclose(expected["mse"], (torch.sigmoid(x) - 1).square().mean())
    drawing, replay = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    for _ in range(30):
        value = loss.generator_loss(x, stream=drawing)
        assert torch.equal(value, expected[loss.choose(replay)])
    assert vars(loss) == before  # nothing remembered between calls
    # Fitness evaluation passes no stream: always the non-saturating BCE, so fitness stays comparable.
    assert all(torch.equal(loss.generator_loss(x), expected["bce"]) for _ in range(5))
    real, fake = logits(1), logits(2)
    bce_d = torch.nn.functional.binary_cross_entropy_with_logits
    assert torch.allclose(
        loss.discriminator_loss(real, fake), bce_d(real, torch.ones(64)) + bce_d(fake, torch.zeros(64))
    )


def test_a_subset_only_draws_from_the_subset() -> None:
    loss = Mustangs(Mustangs.Options(losses=["mse"]))
    stream = torch.Generator().manual_seed(0)
    assert {loss.choose(stream) for _ in range(20)} == {"mse"}


def test_every_loss_gives_finite_generator_gradients() -> None:
    for name, function in evogan_mustangs.GENERATOR_LOSSES.items():
        x = logits().requires_grad_(True)
        function(x).backward()
        assert x.grad is not None and bool(torch.isfinite(x.grad).all()) and float(x.grad.abs().sum()) > 0, name


def test_usable_from_a_recipe_in_a_tiny_run(tmp_path: Path) -> None:
    extra = '\n[problem.loss]\nuse = "mustangs"\nlosses = ["bce", "mse", "heuristic"]\n'
    path = write_tiny_recipe(tmp_path, generations=2, rows=1, cols=1, extra=extra)
    runs = [run_tiny(path), run_tiny(path)]
    assert tomllib.loads((runs[0] / "recipe.toml").read_text())["problem"]["loss"]["use"] == "mustangs"
    summary = json.loads((runs[0] / "summary.json").read_text())
    assert summary["generations"] == 2 and set(summary["cells"]) == {"0"}
    assert (runs[0] / "metrics.jsonl").read_bytes() == (runs[1] / "metrics.jsonl").read_bytes()
