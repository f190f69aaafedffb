"""Contract checks per component kind: what the engine relies on, checked on the component alone.

Each check builds the component from ``options`` (validated with :func:`check_options` first) and
asserts: the same seed gives the same result, the inputs come back unchanged, and no global random
generator (Python's, NumPy's, torch's) is drawn from or seeded. A failed check raises ``AssertionError``
saying which rule broke. Each returns what the component produced, for further asserts of your own.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np
import torch
from pydantic import ValidationError

from evogan.adversarial.contracts import Dataset, Faced, Loss, Mutation, Networks, Pairing
from evogan.api import ROLES, Component, ComponentOptions, Opponents, Role, Selection, Topology
from evogan.individual import Individual

ComponentT = TypeVar("ComponentT", bound=Component[Any])


# ------------------------------------------------------------------------------------------ helpers
def individuals(losses: Sequence[float], role: Role = "generator", *, cell: int = 0) -> list[Individual]:
    """Individuals with these losses as fitness (tiny linear networks, Adam), uids ``cell/G0``, ``cell/G1``..."""
    made = []
    for i, loss in enumerate(losses):
        network = torch.nn.Linear(2, 1)
        optimizer = torch.optim.Adam(network.parameters())
        uid = f"{cell}/{role[0].upper()}{i}"
        individual = Individual(role, network, optimizer, {"lr": 1e-3, "lr0": 1e-3}, origin=cell, uid=uid)
        individual.fitness.values = (float(loss),)
        made.append(individual)
    return made


def _snapshot(population: Sequence[Individual]) -> list[tuple[Any, ...]]:
    return [
        (id(ind), ind.uid, ind.origin, tuple(ind.fitness.values), dict(ind.hyper),
         {k: v.clone() for k, v in ind.network.state_dict().items()})
        for ind in population
    ]


def _unchanged(before: list[tuple[Any, ...]], population: Sequence[Individual], what: str) -> None:
    after = _snapshot(population)
    assert [b[:5] for b in before] == [a[:5] for a in after], f"{what} changed its input individuals"
    for (*_, weights_before), (*_, weights_after) in zip(before, after, strict=True):
        assert all(torch.equal(weights_before[k], weights_after[k]) for k in weights_before), (
            f"{what} changed an input individual's weights"
        )


def _global_states() -> tuple[object, tuple[bytes, int, int, float], bytes]:
    numpy = np.random.get_state(legacy=False)
    mt = (numpy["state"]["key"].tobytes(), numpy["state"]["pos"], numpy["has_gauss"], numpy["gauss"])
    return random.getstate(), mt, bytes(torch.get_rng_state().tolist())


@contextlib.contextmanager
def _no_global_random(what: str) -> Iterator[None]:
    python, numpy, torch_state = _global_states()
    yield
    now = _global_states()
    assert now[0] == python, f"{what} drew from or seeded Python's global random module"
    assert now[1] == numpy, f"{what} drew from NumPy's global generator"
    assert now[2] == torch_state, f"{what} drew from torch's global generator"


def _create(component: type[ComponentT], options: Mapping[str, Any] | None) -> ComponentT:
    return component(check_options(component, options))


# ------------------------------------------------------------------------------------------ options
def check_options(
    component: type[Component[Any]],
    valid: Mapping[str, Any] | None = None,
    invalid: Sequence[Mapping[str, Any]] = (),
) -> ComponentOptions:
    """``component`` has a name and an ``Options`` model; ``valid`` (default: none, all defaults) validates,
    is frozen and survives a round trip through its dump; an unknown key and each of ``invalid`` fail."""
    assert isinstance(getattr(component, "name", None), str) and component.name, "a component needs a name"
    assert isinstance(getattr(component, "kind", None), str), "subclass the base class of a kind (evogan.api)"
    model = component.Options
    assert issubclass(model, ComponentOptions), "Options must subclass evogan.api.ComponentOptions"
    options = model.model_validate(dict(valid or {}))
    assert model.model_validate(options.model_dump()) == options, "options do not survive a round trip"
    for bad in [{**(valid or {}), "no_such_option_xyz": 1}, *invalid]:
        try:
            model.model_validate(dict(bad))
        except ValidationError:
            continue
        raise AssertionError(f"{component.name}: options {dict(bad)!r} should be rejected")
    for field in model.model_fields:
        try:
            setattr(options, field, getattr(options, field))
        except ValidationError:
            break
        raise AssertionError(f"{component.name}: options must be frozen (model_config frozen=True)")
    return options


# ------------------------------------------------------------------------------------------ per kind
def check_selection(
    component: type[Selection[Any]],
    options: Mapping[str, Any] | None = None,
    *,
    losses: Sequence[float] = (0.5, 0.1, 0.9, 0.3, 0.7),
    k: int = 4,
    seed: int = 0,
) -> list[Individual]:
    """``k`` members of the population (the same ones for the same seed), the population untouched."""
    selection = _create(component, options)
    population = individuals(losses)
    before = _snapshot(population)
    with _no_global_random(component.name):
        first = selection.select(population, k, rng=np.random.default_rng(seed))
        again = selection.select(population, k, rng=np.random.default_rng(seed))
    assert len(first) == k, f"{component.name} picked {len(first)} individuals, not k={k}"
    assert all(any(pick is member for member in population) for pick in first), "picks must be population members"
    assert [id(p) for p in first] == [id(p) for p in again], f"{component.name} is not deterministic under a seed"
    _unchanged(before, population, component.name)
    return first


def check_mutation(
    component: type[Mutation[Any]],
    options: Mapping[str, Any] | None = None,
    *,
    hyper: Mapping[str, float] | None = None,
    steps: int = 50,
    seed: int = 0,
) -> list[dict[str, float]]:
    """``steps`` mutations from one seeded stream: the same for the same seed, a new mapping each time,
    the input unchanged, learning rates finite and not negative."""
    mutation = _create(component, options)
    given = dict(hyper or {"lr": 2e-4, "lr0": 2e-4})
    original = dict(given)

    def run() -> list[dict[str, float]]:
        rng = np.random.default_rng(seed)
        return [mutation.mutate(given, rng=rng) for _ in range(steps)]

    with _no_global_random(component.name):
        first = run()
        assert given == original, f"{component.name} changed its input mapping"
        again = run()
    assert first == again, f"{component.name} is not deterministic under a seed"
    assert all(out is not given for out in first), "mutate must return a new mapping"
    assert all(np.isfinite(out["lr"]) and out["lr"] >= 0 for out in first), "learning rates must stay finite, >= 0"
    return first


def check_topology(component: type[Topology[Any]], options: Mapping[str, Any] | None = None) -> list[tuple[int, ...]]:
    """Every cell's neighbours: distinct, sorted, in range, never the cell itself, the same when asked twice."""
    topology = _create(component, options)
    cells = topology.cells
    assert cells >= 1, "a topology needs at least one cell"
    found = []
    for cell in range(cells):
        neighbours = topology.neighbours(cell)
        assert neighbours == tuple(sorted(set(neighbours))), f"neighbours({cell}) must be distinct and sorted"
        assert cell not in neighbours, f"neighbours({cell}) must not include the cell itself"
        assert all(0 <= n < cells for n in neighbours), f"neighbours({cell}) out of range"
        assert topology.neighbours(cell) == neighbours, f"neighbours({cell}) changed between calls"
        found.append(neighbours)
    assert isinstance(topology.describe(), str) and topology.describe(), "describe() must name the topology"
    return found


def check_pairing(
    component: type[Pairing[Any]], options: Mapping[str, Any] | None = None, *, steps: int = 20, seed: int = 0
) -> list[Faced]:
    """Opponents drawn from the neighbourhood (weights summing to one), the same for the same seed, the
    opponents left alone."""
    pairing = _create(component, options)
    teams: dict[Role, Opponents] = {}
    for role in ROLES:
        own = individuals([0.4, 0.6], role)
        foreign = individuals([0.5, 0.3], role, cell=1)
        teams[role] = Opponents(own=own, neighbourhood=[*own, *foreign], weights=[0.25] * 4)
    before = {role: _snapshot(team.neighbourhood) for role, team in teams.items()}

    def run() -> tuple[list[Faced], list[Individual]]:
        rng = np.random.default_rng(seed)
        faced = [pairing.generator_opponents(teams["discriminator"], rng=rng) for _ in range(steps)]
        return faced, [pairing.discriminator_opponent(teams["generator"], rng=rng) for _ in range(steps)]

    with _no_global_random(component.name):
        (faced, defenders), (faced_again, defenders_again) = run(), run()
    ids = [[(id(d), w) for d, w in step] for step in faced]
    assert ids == [[(id(d), w) for d, w in step] for step in faced_again], f"{component.name} is not deterministic"
    assert [id(d) for d in defenders] == [id(d) for d in defenders_again], f"{component.name} is not deterministic"
    pools = {role: {id(m) for m in [*team.own, *team.neighbourhood]} for role, team in teams.items()}
    for step in faced:
        assert step and all(id(d) in pools["discriminator"] for d, _ in step), "faced a stranger"
        assert abs(sum(w for _, w in step) - 1.0) < 1e-9, "a generator step's weights must sum to one"
    assert all(id(d) in pools["generator"] for d in defenders), "faced a stranger"
    for role, team in teams.items():
        _unchanged(before[role], team.neighbourhood, component.name)
    return faced


def check_loss(
    component: type[Loss[Any]], options: Mapping[str, Any] | None = None, *, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Finite scalar losses, the same for the same stream, the logits left alone."""
    loss = _create(component, options)
    noise = torch.Generator().manual_seed(seed)
    fake, real = torch.randn(64, generator=noise), torch.randn(64, generator=noise)
    fake_before, real_before = fake.clone(), real.clone()
    with _no_global_random(component.name):
        g = loss.generator_loss(fake, stream=torch.Generator().manual_seed(seed))
        g_again = loss.generator_loss(fake, stream=torch.Generator().manual_seed(seed))
        fitness = (loss.generator_loss(fake), loss.generator_loss(fake))
        d, d_again = loss.discriminator_loss(real, fake), loss.discriminator_loss(real, fake)
    assert torch.equal(g, g_again), f"{component.name} is not deterministic under a seed"
    assert torch.equal(*fitness), "the loss without a stream (fitness) must not vary"
    assert torch.equal(d, d_again), "the discriminator loss must not vary"
    for value in (g, d):
        assert value.dim() == 0 and bool(torch.isfinite(value)), "losses must be finite scalars"
    assert torch.equal(fake, fake_before) and torch.equal(real, real_before), f"{component.name} changed its logits"
    return g, d


def check_dataset(
    component: type[Dataset[Any]], options: Mapping[str, Any] | None = None, *, seed: int = 0, n: int = 8
) -> torch.Tensor:
    """Two loads hold the same samples; draws from the same seed are equal."""
    dataset = _create(component, options)
    cpu = torch.device("cpu")
    with _no_global_random(component.name):
        first, second = dataset.load(cpu), dataset.load(cpu)
        a = first.sample(n, generator=torch.Generator().manual_seed(seed))
        b = second.sample(n, generator=torch.Generator().manual_seed(seed))
    assert len(first) == len(second) >= 1, "a dataset must load the same, non-empty data each time"
    assert torch.equal(a, b), f"{component.name}: the same seed must draw the same samples"
    assert tuple(a.shape[1:]) == tuple(first.sample_shape), "samples must have the source's sample_shape"
    return a


def check_networks(
    component: type[Networks[Any]],
    options: Mapping[str, Any] | None = None,
    *,
    sample_shape: tuple[int, ...] = (2,),
    seed: int = 0,
    batch: int = 4,
) -> dict[Role, torch.nn.Module]:
    """Networks built from the same generator are equal, whatever torch's global generator holds; G maps
    noise to samples, D samples to (N,) logits.

    torch's layers draw their default initialisation from the global generator when constructed; what
    counts is that the generator passed in overwrites it, so the global state is moved between the two
    builds (and put back afterwards) rather than required untouched.
    """
    networks = _create(component, options)
    networks.check(sample_shape)
    built: dict[Role, torch.nn.Module] = {}
    saved = torch.get_rng_state()
    try:
        for role in ROLES:
            one = networks.build(role, sample_shape, generator=torch.Generator().manual_seed(seed))
            torch.rand(64)  # move the global generator: the weights must not follow it
            two = networks.build(role, sample_shape, generator=torch.Generator().manual_seed(seed))
            state, other = one.state_dict(), two.state_dict()
            assert all(torch.equal(state[k], other[k]) for k in state), (
                f"{component.name}: {role} weights depend on more than the generator passed in"
            )
            built[role] = one
    finally:
        torch.set_rng_state(saved)
    z = torch.randn(batch, *networks.latent_shape(), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        samples = built["generator"](z)
        assert tuple(samples.shape) == (batch, *sample_shape), "the generator must return (N, *sample_shape)"
        assert tuple(built["discriminator"](samples).shape) == (batch,), "the discriminator must return (N,) logits"
    return built


__all__ = [
    "check_dataset",
    "check_loss",
    "check_mutation",
    "check_networks",
    "check_options",
    "check_pairing",
    "check_selection",
    "check_topology",
    "individuals",
]
