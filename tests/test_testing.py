"""The plugin test kit: every built-in passes its kind's contract, and the checks catch what they promise."""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
import torch
from evogan_gan.image_metrics import INCEPTION_FILE
from evogan_gan.image_networks import MnistMlp
from evogan_gan.toy import GaussianGrid, GaussianRing, Mlp2d
from pydantic import ConfigDict

from evogan import hookimpl
from evogan.adversarial.contracts import Loss, Mutation, Networks
from evogan.api import ComponentOptions, Role, Selection, Topology
from evogan.hookspecs import Register
from evogan.individual import Individual
from evogan.plugins import distribution_modules, make_plugin_manager
from evogan.registry import KIND_HOOKS, Registries
from evogan.testing import (
    check_dataset,
    check_loss,
    check_mutation,
    check_networks,
    check_options,
    check_pairing,
    check_selection,
    check_topology,
    registered,
    run_tiny,
    write_tiny_recipe,
)

GAN_PLUGINS = distribution_modules("evogan-gan")  # the GAN problem's plugins, for autoload off

BUILTINS = Registries.from_plugin_manager(make_plugin_manager(autoload=False, modules=GAN_PLUGINS))
# Options a component cannot do without (everything else validates with its defaults).
REQUIRED: dict[str, dict[str, Any]] = {"deap": {"operator": "selTournament", "tournsize": 2}}
CHECKS = {
    "selection": check_selection,
    "mutation": check_mutation,
    "topology": check_topology,
    "pairing": check_pairing,
    "loss": check_loss,
}


def entries(*kinds: str) -> list[Any]:
    return [pytest.param(e.component, id=f"{kind}:{e.name}") for kind in kinds for e in BUILTINS[kind]]


@pytest.mark.parametrize("component", entries(*KIND_HOOKS))
def test_every_builtin_has_valid_frozen_options(component: Any, tmp_path: Path) -> None:
    options = REQUIRED.get(component.name)
    if component.name == "inception":  # its weights file must exist; never downloaded
        (weights := tmp_path / INCEPTION_FILE).write_bytes(b"")
        options = {"weights": weights}
    check_options(component, options)


@pytest.mark.parametrize("component", entries(*CHECKS))
def test_every_builtin_keeps_its_kinds_contract(component: Any) -> None:
    CHECKS[component.kind](component, REQUIRED.get(component.name))


def test_toy_data_and_networks_keep_their_contracts() -> None:
    for dataset in (GaussianRing, GaussianGrid):
        assert check_dataset(dataset, {"samples": 256}).shape == (8, 2)
    check_networks(Mlp2d, {"latent_size": 8, "hidden": 16})
    check_networks(MnistMlp, {"hidden": 16}, sample_shape=(1, 28, 28))


def test_option_checks_reject_what_they_should() -> None:
    with pytest.raises(AssertionError, match="should be rejected"):
        check_options(GaussianRing, {}, invalid=[{"modes": 3}])  # a valid value given as invalid

    class Thawed(Topology["Thawed.Options"]):
        name: ClassVar[str] = "thawed"

        class Options(ComponentOptions):
            model_config = ConfigDict(extra="forbid", frozen=False)
            cells: int = 2

    with pytest.raises(AssertionError, match="must be frozen"):
        check_options(Thawed)


class GlobalDraw(Selection[ComponentOptions]):
    name: ClassVar[str] = "global_draw"

    def select(self, population: Sequence[Individual], k: int, *, rng: np.random.Generator) -> list[Individual]:
        return [random.choice(list(population)) for _ in range(k)]


class Sorting(Selection[ComponentOptions]):
    name: ClassVar[str] = "sorting"

    def select(self, population: Sequence[Individual], k: int, *, rng: np.random.Generator) -> list[Individual]:
        assert isinstance(population, list)
        population.sort(key=lambda ind: ind.fitness.loss)  # edits the caller's list
        return population[:k]


class InPlace(Mutation[ComponentOptions]):
    name: ClassVar[str] = "in_place"

    def mutate(self, hyper: Mapping[str, float], *, rng: np.random.Generator) -> dict[str, float]:
        assert isinstance(hyper, dict)
        hyper["lr"] *= 1.01
        return dict(hyper)


class Noisy(Loss[ComponentOptions]):
    name: ClassVar[str] = "noisy"

    def generator_loss(self, fake_logits: torch.Tensor, *, stream: torch.Generator | None = None) -> torch.Tensor:
        return fake_logits.mean() + torch.rand(())  # torch's global generator

    def discriminator_loss(self, real_logits: torch.Tensor, fake_logits: torch.Tensor) -> torch.Tensor:
        return real_logits.mean() - fake_logits.mean()


class SelfLoop(Topology[ComponentOptions]):
    name: ClassVar[str] = "self_loop"

    @property
    def cells(self) -> int:
        return 2

    def neighbours(self, cell: int) -> tuple[int, ...]:
        return (0, 1)


class Unseeded(Networks[ComponentOptions]):
    name: ClassVar[str] = "unseeded"

    def latent_shape(self) -> tuple[int, ...]:
        return (4,)

    def build(self, role: Role, sample_shape: tuple[int, ...], *, generator: torch.Generator) -> torch.nn.Module:
        if role == "generator":  # torch's default initialisation, from the global generator
            return torch.nn.Linear(4, sample_shape[0])
        return torch.nn.Sequential(torch.nn.Linear(sample_shape[0], 1), torch.nn.Flatten(0))


@pytest.mark.parametrize(
    ("check", "component", "message"),
    [
        (check_selection, GlobalDraw, "Python's global random"),
        (check_selection, Sorting, "changed its input"),
        (check_mutation, InPlace, "changed its input mapping"),
        (check_loss, Noisy, "torch's global generator"),
        (check_topology, SelfLoop, "must not include the cell itself"),
        (check_networks, Unseeded, "weights depend on more than the generator"),
    ],
)
def test_contract_checks_catch_broken_components(check: Any, component: Any, message: str) -> None:
    with pytest.raises(AssertionError, match=message):
        check(component)


class Plugin:
    """A plugin object registering one selection, for one run."""

    @hookimpl
    def evogan_register_selections(self, register: Register) -> None:
        register(Worst)


class Worst(Selection[ComponentOptions]):
    name: ClassVar[str] = "worst_first"

    def select(self, population: Sequence[Individual], k: int, *, rng: np.random.Generator) -> list[Individual]:
        ranked = sorted(population, key=lambda ind: -ind.fitness.loss)
        return [ranked[i % len(ranked)] for i in range(k)]


def test_a_plugin_object_is_registered_for_one_run_only(tmp_path: Path) -> None:
    recipe = write_tiny_recipe(tmp_path, generations=1, rows=1, cols=2, overrides=['selection.use="worst_first"'])
    assert 'use = "worst_first"' in recipe.read_text()
    run_dir = run_tiny(recipe, Plugin())
    assert len((run_dir / "metrics.jsonl").read_text().splitlines()) == 2
    assert "worst_first" not in Registries.from_plugin_manager(make_plugin_manager())["selection"]
    with registered(Plugin()):
        assert "worst_first" in Registries.from_plugin_manager(make_plugin_manager())["selection"]
        json.loads((run_tiny(recipe) / "summary.json").read_text())
    assert "worst_first" not in Registries.from_plugin_manager(make_plugin_manager())["selection"]


def test_the_varied_tiny_recipe_makes_real_choices(tmp_path: Path) -> None:
    """Its mixture ES accepts steps and its best cell is picked among different scores (the plain tiny
    recipe's are all TVD 1.0), so equality tests built on it see those choices."""
    from test_vectorized import assert_real_choices

    run_dir = run_tiny(write_tiny_recipe(tmp_path, seed=1, generations=3, varied=True))
    assert_real_choices(run_dir)
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert 0 < min(r["mixture_metrics"]["hq_fraction"] for r in records) < 1  # neither junk nor saturated
