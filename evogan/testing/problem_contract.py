"""The contract check of the problem kind: what the engine relies on, checked on the problem alone."""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from functools import partial
from typing import Any

import torch

from evogan.api import Opponents, Problem, ProblemContext, Role, Variation
from evogan.individual import Individual
from evogan.plugins import make_plugin_manager
from evogan.recipe import build_nested
from evogan.registry import Registries
from evogan.rng import CellRandom
from evogan.testing.contracts import _no_global_random, check_options


def _state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def _same(a: Mapping[str, torch.Tensor], b: Mapping[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _population(problem: Problem[Any], role: Role, size: int, seed: int) -> list[Individual]:
    generator = torch.Generator().manual_seed(seed)
    made = []
    for i in range(size):
        network = problem.create(role, generator=generator)
        hyper = problem.hyper(role)
        optimizer = problem.make_optimizer(role, network, hyper.get("lr", 0.0))
        made.append(Individual(role, network, optimizer, hyper, origin=0, uid=f"0/{role[0].upper()}{i}"))
    return made


def _job(problem: Problem[Any], seed: int, size: int) -> Variation:
    first, second = problem.roles
    members = {role: _population(problem, role, size, seed + n) for n, role in enumerate(problem.roles)}
    pool = {
        role: [*members[role], *_population(problem, role, 2, seed + 10 + n)] for n, role in enumerate(problem.roles)
    }
    uniform = {role: [1.0 / len(pool[role])] * len(pool[role]) for role in problem.roles}
    opponents = {
        first: Opponents(own=members[second], neighbourhood=pool[second], weights=uniform[second]),
        second: Opponents(own=members[first], neighbourhood=pool[first], weights=uniform[first]),
    }
    return Variation(
        cell_index=0,
        generation=1,
        members=members,
        pool=pool,
        opponents=opponents,
        incumbents={},
        rnd=CellRandom.for_generation(seed, 0, 1),
    )


def check_problem(
    component: type[Problem[Any]],
    options: Mapping[str, Any] | None = None,
    *,
    size: int = 2,
    seed: int = 0,
    context: ProblemContext | None = None,
) -> dict[str, Any]:
    """A problem's contract: two distinct ``roles``; ``create`` gives the same individual for the same
    seed, with the same tensor names, shapes and dtypes per role across seeds (they travel between
    processes); ``fitness`` gives finite loss matrices of the right shapes, the same on the same stream;
    ``vary`` changes its members alone, the same on the same streams; ``evaluate`` gives numbers and
    ``objective`` one number. Games, variation and scores draw from no global random generator. Returns what it produced
    (``fitness``, ``metrics``) for further asserts of your own."""
    registries = Registries.from_plugin_manager(make_plugin_manager())
    context = context or ProblemContext(
        build=partial(build_nested, registries), device=torch.device("cpu"), seed=seed, source=registries
    )
    roles = getattr(component, "roles", None)
    assert isinstance(roles, tuple) and len(roles) == 2 and len(set(roles)) == 2, "a problem names two roles"
    problem = component(check_options(component, options), context)
    problem.setup()
    problem.prepare_scoring()
    for role in roles:
        # torch's layers draw their default initialisation from the global generator when built: what
        # counts is that the generator passed in decides, whatever the global one holds
        a = problem.create(role, generator=torch.Generator().manual_seed(seed))
        torch.rand(64)
        b = problem.create(role, generator=torch.Generator().manual_seed(seed))
        assert _same(_state(a), _state(b)), f"{component.name}: create({role!r}) differs under one seed"
        other = problem.create(role, generator=torch.Generator().manual_seed(seed + 1))
        layout = {k: (v.dtype, v.shape) for k, v in _state(a).items()}
        assert layout == {k: (v.dtype, v.shape) for k, v in _state(other).items()}, (
            f"{component.name}: create({role!r}) gives other tensor names, shapes or dtypes per seed"
        )
    job, again = _job(problem, seed, size), _job(problem, seed, size)
    with _no_global_random(component.name):
        first, second = ([ind.network for ind in job.pool[role]] for role in roles)
        data = problem.fitness_batch(generator=torch.Generator().manual_seed(seed), cell=0)
        losses = problem.fitness(first, second, data, generator=torch.Generator().manual_seed(seed), score=roles)
        repeat = problem.fitness(first, second, data, generator=torch.Generator().manual_seed(seed), score=roles)
        assert tuple(losses[0].shape) == (len(first), len(second)), f"{component.name}: first role's losses' shape"
        assert tuple(losses[1].shape) == (len(second), len(first)), f"{component.name}: second role's losses' shape"
        assert all(torch.isfinite(m).all() for m in losses), f"{component.name}: fitness gave a non-finite loss"
        assert all(torch.equal(x, y) for x, y in zip(losses, repeat, strict=True)), (
            f"{component.name}: fitness differs on the same stream"
        )

        mates = {role: [_state(ind.network) for ind in job.pool[role][size:]] for role in roles}
        for each in (job, again):
            assert not list(problem.vary(each) or ()), "vary yields only where job.exchange_due(step)"
        for role in roles:
            varied = [_state(ind.network) for ind in job.members[role]]
            assert all(
                _same(v, _state(ind.network)) for v, ind in zip(varied, again.members[role], strict=True)
            ), f"{component.name}: vary differs on the same streams"
            assert all(
                _same(m, _state(ind.network)) for m, ind in zip(mates[role], job.pool[role][size:], strict=True)
            ), f"{component.name}: vary changed an individual of its pool that is not a member"

        networks = [copy.deepcopy(ind.network) for ind in job.members[roles[0]]]
        weights = [1.0 / len(networks)] * len(networks)
        metrics = problem.evaluate(networks, weights, generator=torch.Generator().manual_seed(seed))
        assert metrics and all(isinstance(v, float | int) for v in metrics.values()), (
            f"{component.name}: evaluate must give a mapping of numbers"
        )
        objective = problem.objective(metrics)
        assert isinstance(objective, float | int) and not math.isnan(objective), (
            f"{component.name}: objective must be a number"
        )
    return {"fitness": losses, "metrics": metrics}


__all__ = ["check_problem"]
