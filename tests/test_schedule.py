"""WGAN (Lipizzaner's ``lipizzaner_wgan``): the critic schedule over the run, weight clipping, RMSprop."""

from __future__ import annotations

import itertools
from typing import ClassVar

import pytest
import torch
from evogan_gan.schedule import CriticSchedule

from evogan.adversarial.contracts import GeneratorStep, SparsityController
from evogan.api import ComponentOptions, Problem
from evogan.errors import RecipeError
from evogan.hookspecs import Register, hookimpl
from evogan.individual import Individual
from evogan.plugins import make_plugin_manager
from evogan.recipe import load
from evogan.registry import Registries
from evogan.testing import run_tiny

WGAN = [
    'problem.loss.use="wasserstein"',
    'problem.optimizer="rmsprop"',
    "problem.clip_weights=0.01",
    "problem.critic_steps=2",
    "problem.critic_burst=5",
    "problem.critic_burst_first=2",
    "problem.critic_burst_every=4",
    "problem.batches_per_generation=6",
]


def gaps(trains_at: list[bool]) -> list[int]:
    """Critic steps (one per batch) before each generator step."""
    steps = [b for b, trains in enumerate(trains_at) if trains]
    return [b - a for a, b in itertools.pairwise([0, *steps])]


def rule(g: int, steps: int = 5, burst: int = 100, first: int = 25, every: int = 500) -> int:
    return burst if g < first or g % every == 0 else steps


def test_the_reference_schedule_counts() -> None:
    schedule = CriticSchedule()  # the reference's 5 / 100 / 25 / 500
    counts = gaps([schedule.generator_trains_at(b) for b in range(40_000)])
    assert counts[:25] == [100] * 25 and counts[25:30] == [5] * 5
    assert counts == [rule(g) for g in range(len(counts))]
    assert counts[500] == counts[1000] == 100 and counts[499] == counts[501] == 5
    assert sum(counts) < 40_000 <= sum(counts) + rule(len(counts)) and len(counts) > 1000  # none skipped


@pytest.mark.parametrize(("steps", "burst", "first", "every"), [(2, 5, 2, 4), (5, 1, 3, 0), (3, 3, 0, 7)])
def test_other_schedules_follow_the_rule(steps: int, burst: int, first: int, every: int) -> None:
    schedule = CriticSchedule(steps, burst, first, every)
    counts = gaps([schedule.generator_trains_at(b) for b in range(500)])
    expected = [burst if g < first or (every and g % every == 0) else steps for g in range(len(counts))]
    assert counts == expected


def problem_of(tiny_recipe, *overrides: str) -> Problem:
    from evogan.engine.run import build_settings

    registries = Registries.from_plugin_manager(make_plugin_manager())
    recipe = load(tiny_recipe(), registries, overrides)
    return build_settings(recipe, registries, None, torch.device("cpu")).problem


def test_the_schedule_runs_on_across_generations(tiny_recipe) -> None:
    """Generations of 7 batches: the schedule counts batches over the run, not within a generation."""
    problem = problem_of(tiny_recipe, *WGAN, "problem.batches_per_generation=7")
    trains = [problem.train_generator_at(s, cell=1, generation=g) for g in range(1, 12) for s in range(7)]
    counts = gaps(trains)
    assert counts == [rule(g, 2, 5, 2, 4) for g in range(len(counts))]


class Recorder(SparsityController[ComponentOptions]):
    """Not sparse at all: it hears every training step of a cell, in order."""

    name: ClassVar[str] = "step_recorder"
    events: ClassVar[list[str]] = []
    bounds: ClassVar[list[float]] = []
    optimizers: ClassVar[set[str]] = set()

    def after_discriminator_step(self, discriminator: Individual) -> None:
        self.events.append("D")
        self.bounds.append(max(p.abs().max().item() for p in discriminator.network.parameters()))
        self.note_optimizer(discriminator)

    def after_generator_step(
        self, generator: Individual, discriminator: Individual, step: GeneratorStep, problem: Problem
    ) -> None:
        self.events.append("G")
        self.note_optimizer(generator)

    def note_optimizer(self, individual: Individual) -> None:
        """Its class, and whether it steps at the individual's (mutated) learning rate."""
        optimizer = individual.optimizer
        self.optimizers.add(f"{type(optimizer).__name__} {optimizer.param_groups[0]['lr'] == individual.hyper['lr']}")


class RecorderPlugin:
    @hookimpl
    def evogan_register_sparsity_controllers(self, register: Register) -> None:
        register(Recorder)


def test_a_wgan_run_clips_after_every_critic_step_and_follows_the_schedule(tiny_recipe) -> None:
    Recorder.events.clear(), Recorder.bounds.clear(), Recorder.optimizers.clear()
    recipe = tiny_recipe(generations=4, rows=1, cols=1)
    run_tiny(recipe, RecorderPlugin(), overrides=[*WGAN, 'problem.sparsity.use="step_recorder"'])
    assert len(Recorder.bounds) == Recorder.events.count("D") == 24  # one critic step per batch
    assert max(Recorder.bounds) <= 0.01 and max(Recorder.bounds) > 0.005  # the bound is reached, and holds
    counts = [len(run) for run in "".join(Recorder.events).split("G")[:-1]]
    assert counts == [rule(g, 2, 5, 2, 4) for g in range(len(counts))] and len(counts) == 7
    assert Recorder.optimizers == {"RMSprop True"}


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ('problem.optimizer="sgd"', r"problem\.optimizer: must be 'adam' or 'rmsprop'"),
        ("problem.clip_weights=-1", r"problem\.clip_weights: must be >= 0"),
        ("problem.critic_burst=-1", r"problem\.critic_burst: must be >= 0"),
        ("problem.critic_burst_every=-5", r"problem\.critic_burst_every: must be >= 0"),
        ("problem.critic_burst_first=-5", r"problem\.critic_burst_first: must be >= 0"),
    ],
)
def test_bad_wgan_keys_are_one_line_recipe_errors(tiny_recipe, override: str, message: str) -> None:
    with pytest.raises(RecipeError, match=message) as caught:
        load(tiny_recipe(), Registries.from_plugin_manager(make_plugin_manager()), [override])
    assert len(caught.value.lines) == 1


def test_a_burst_with_a_d_skip_is_refused(tiny_recipe) -> None:
    registries = Registries.from_plugin_manager(make_plugin_manager())
    with pytest.raises(RecipeError, match=r"problem: critic_burst counts a D step per batch: it needs d_skip = 0"):
        load(tiny_recipe(), registries, ["problem.critic_burst=10", "problem.d_skip=1"])
