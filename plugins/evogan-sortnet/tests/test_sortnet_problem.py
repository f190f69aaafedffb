"""The problem component: genomes, the fitness matrix, variation in place, metrics, setup errors."""

from __future__ import annotations

import random
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from evogan_sortnet import SortingNetworks
from evogan_sortnet.networks import Host, Parasite, with_mirrors
from pydantic import ValidationError
from sortnet_helpers import odd_even_merge, sorts
from torch import nn

from evogan import recipe as recipes
from evogan.api import ProblemContext
from evogan.errors import RecipeError
from evogan.individual import Individual
from evogan.plugins import make_plugin_manager
from evogan.recipe import build_nested
from evogan.registry import Registries
from evogan.rng import CellRandom


@pytest.fixture(scope="module")
def registries() -> Registries:
    return Registries.from_plugin_manager(make_plugin_manager())


def problem(registries: Registries, **settings: Any) -> SortingNetworks:
    context = ProblemContext(partial(build_nested, registries), torch.device("cpu"))
    made = SortingNetworks(SortingNetworks.Options.model_validate(settings), context)
    made.setup()
    return made


def population(made: SortingNetworks, role: str, size: int, seed: int) -> list[nn.Module]:
    draw = torch.Generator().manual_seed(seed)
    return [made.create(role, generator=draw) for _ in range(size)]


def test_the_entry_point_registers_the_problem(registries: Registries) -> None:
    entry = registries["problem"].get("sortnet")
    assert entry is SortingNetworks
    assert SortingNetworks.roles == ("host", "parasite") and SortingNetworks.keys() == ("host", "parasite")


def test_create_gives_fixed_shapes_and_dtypes_and_the_same_genome_for_the_same_seed(registries) -> None:
    made = problem(registries, inputs=8, comparators=30, vectors=12)
    expected = (("host", "comparators", (30, 2), torch.int64), ("parasite", "vectors", (12, 8), torch.bool))
    for role, name, shape, dtype in expected:
        first, again = population(made, role, 3, seed=4), population(made, role, 3, seed=4)
        for a, b in zip(first, again, strict=True):
            state = a.state_dict()
            assert list(state) == [name] and state[name].shape == shape and state[name].dtype == dtype
            assert torch.equal(state[name], b.state_dict()[name])
        assert not torch.equal(first[0].state_dict()[name], first[1].state_dict()[name])
    host = population(made, "host", 1, seed=0)[0]
    assert isinstance(host, Host) and int(host.comparators.max()) < 8 and int(host.comparators.min()) >= 0
    with pytest.raises(ValueError, match="no role 'generator'"):
        made.create("generator", generator=torch.Generator())


def test_fitness_is_the_share_sorted_against_a_pure_python_reference(registries) -> None:
    made = problem(registries, inputs=6, comparators=14, vectors=9)
    hosts, parasites = population(made, "host", 4, seed=1), population(made, "parasite", 3, seed=2)
    host_loss, parasite_loss = made.fitness(hosts, parasites, None, generator=torch.Generator())
    assert host_loss.shape == (4, 3) and parasite_loss.shape == (3, 4) and host_loss.dtype == torch.float32
    for h, host in enumerate(hosts):
        network = host.comparators.tolist()  # type: ignore[operator]
        for p, parasite in enumerate(parasites):
            share = sum(sorts(network, v) for v in parasite.vectors.int().tolist()) / 9  # type: ignore[operator]
            assert host_loss[h, p].item() == pytest.approx(1 - share)
            assert parasite_loss[p, h].item() == pytest.approx(share)
    assert made.evaluations == 4 * 3 * 9


def test_the_memo_reuses_pairs_by_parasite_content_and_counts_only_new_tests(registries) -> None:
    made = problem(registries, inputs=6, comparators=14, vectors=9)
    hosts, parasites = population(made, "host", 3, seed=1), population(made, "parasite", 2, seed=2)
    memo: dict[nn.Module, Any] = {}
    first = made.fitness(hosts, parasites, None, generator=torch.Generator(), memo=memo)
    assert made.evaluations == 3 * 2 * 9
    newcomer = population(made, "parasite", 1, seed=3)[0]
    again = made.fitness(hosts, [*parasites, newcomer], None, generator=torch.Generator(), memo=memo)
    assert made.evaluations == 3 * 2 * 9 + 3 * 1 * 9  # only the new parasite's column was tested
    assert torch.equal(again[0][:, :2], first[0])
    parasites[0].vectors.logical_not_()  # type: ignore[operator]  # changed content: never a stale hit
    fresh = made.fitness(hosts, parasites, None, generator=torch.Generator())
    assert torch.equal(made.fitness(hosts, parasites, None, generator=torch.Generator(), memo=memo)[0], fresh[0])


def test_a_full_prefetch_table_keeps_the_pairs_the_new_games_need(registries, monkeypatch) -> None:
    """Past ``PAIR_LIMIT`` the table starts afresh; the pairs of the games being prefetched that it already
    held stay (it once dropped them, so every such game was tested again: a 64x64 grid played 1.4x the
    sorting-network runs of a 32x32 per cell-generation)."""
    from evogan_sortnet import problem as module

    from evogan.api import FitnessGame

    made = problem(registries, inputs=6, comparators=14, vectors=9)
    hosts, parasites = population(made, "host", 3, seed=1), population(made, "parasite", 2, seed=2)
    made.prefetch_fitness([FitnessGame(hosts, parasites, None)])
    monkeypatch.setattr(module, "PAIR_LIMIT", 8)  # 6 held + 3 new overflow it
    newcomer = population(made, "parasite", 1, seed=3)[0]
    made.prefetch_fitness([FitnessGame(hosts, [*parasites, newcomer], None)])
    assert len(made._pairs) == 9
    answered = made.prefetched
    made.fitness(hosts, [*parasites, newcomer], None, generator=torch.Generator())
    assert made.prefetched == answered + 1  # the whole game from the table, nothing tested again


def test_large_games_are_left_to_each_cells_own_call(registries, monkeypatch) -> None:
    """Past ``PREFETCH_PAIRS`` host-parasite pairs a game on average, one pass over every game costs more
    than the cells' own calls: nothing is prefetched, and fitness tests the pairs itself."""
    from evogan_sortnet import problem as module

    from evogan.api import FitnessGame

    made = problem(registries, inputs=6, comparators=14, vectors=9)
    hosts, parasites = population(made, "host", 3, seed=1), population(made, "parasite", 2, seed=2)
    monkeypatch.setattr(module, "PREFETCH_PAIRS", 5)  # 3 x 2 = 6 pairs a game
    made.prefetch_fitness([FitnessGame(hosts, parasites, None)])
    assert not made._pairs
    made.fitness(hosts, parasites, None, generator=torch.Generator())
    assert made.prefetched == 0
    monkeypatch.setattr(module, "PREFETCH_PAIRS", 6)
    made.prefetch_fitness([FitnessGame(hosts, parasites, None)])
    assert len(made._pairs) == 6


def test_a_full_exhaustive_cache_keeps_the_hosts_being_checked(registries, monkeypatch) -> None:
    """Past ``CACHE_LIMIT`` the exhaustive results start afresh; a call that mixes cached hosts with new
    ones still answers for all of them (the cleared cache once raised KeyError for the cached ones)."""
    from evogan_sortnet import problem as module

    made = problem(registries, inputs=6, comparators=14, vectors=9)
    hosts = population(made, "host", 4, seed=1)
    before = made.evaluate(hosts[:2], [1.0, 1.0], generator=torch.Generator())
    monkeypatch.setattr(module, "CACHE_LIMIT", 3)  # 2 held + 2 new overflow it
    after = made.evaluate([hosts[0], *hosts[2:]], [1.0, 0.0, 0.0], generator=torch.Generator())
    assert after["best_sorted"] == made.evaluate(hosts[:1], [1.0], generator=torch.Generator())["best_sorted"]
    assert before["evaluations"] == after["evaluations"] == 0


def individuals(made: SortingNetworks, role: str, size: int, seed: int, cell: int = 0) -> list[Individual]:
    return [
        Individual(role=role, network=network, optimizer=None, hyper={}, origin=cell, uid=f"{cell}/{role}{i}")
        for i, network in enumerate(population(made, role, size, seed))
    ]


def job(members: dict[str, list[Individual]], pool: dict[str, list[Individual]], generation: int = 1) -> Any:
    """A stand-in for the engine's Variation job: only what the problem reads."""
    rnd = CellRandom.for_generation(seed=1, cell=0, generation=generation)
    return SimpleNamespace(members=members, pool=pool, rnd=rnd, cell_index=0, generation=generation)


def genomes(group: list[Individual]) -> list[torch.Tensor]:
    return [t.clone() for ind in group for t in ind.network.state_dict().values()]


def test_vary_changes_members_in_place_reproducibly_and_never_the_pool(registries) -> None:
    made = problem(registries, inputs=8, comparators=20, vectors=10)
    pool = {role: individuals(made, role, 5, seed=9) for role in made.roles}
    pool_before = {role: genomes(group) for role, group in pool.items()}

    def members() -> dict[str, list[Individual]]:
        return {role: individuals(made, role, 3, seed=11) for role in made.roles}

    first = members()
    buffers = {id(t) for group in first.values() for ind in group for t in ind.network.buffers()}
    before = {role: genomes(group) for role, group in first.items()}
    random.seed(5)
    state = random.getstate()
    made.vary(job(first, pool))
    assert random.getstate() == state
    assert {id(t) for group in first.values() for ind in group for t in ind.network.buffers()} == buffers
    for role in made.roles:
        after = genomes(first[role])
        assert any(not torch.equal(a, b) for a, b in zip(after, before[role], strict=True))
        assert all(a.shape == b.shape and a.dtype == b.dtype for a, b in zip(after, before[role], strict=True))
        assert all(torch.equal(a, b) for a, b in zip(genomes(pool[role]), pool_before[role], strict=True))
    second = members()
    made.vary(job(second, pool))
    for role in made.roles:
        assert all(torch.equal(a, b) for a, b in zip(genomes(first[role]), genomes(second[role]), strict=True))
    third = members()
    made.vary(job(third, pool, generation=2))
    assert any(not torch.equal(a, b) for a, b in zip(genomes(first["host"]), genomes(third["host"]), strict=True))


def test_evaluate_checks_the_ensemble_on_every_input_and_records_correct_networks(registries) -> None:
    made = problem(registries, inputs=8, comparators=19, vectors=5)
    correct = Host(torch.tensor(odd_even_merge(8)), torch.empty(0, 2, dtype=torch.int64))
    broken = Host(torch.tensor([*odd_even_merge(8)[:-1], (3, 3)]), torch.empty(0, 2, dtype=torch.int64))
    alone = made.evaluate([broken], [1.0], generator=torch.Generator())
    assert alone["correct"] == 0.0 and 0.9 < alone["sorted"] < 1.0 and alone["comparators"] == 18
    assert alone["found"] == 0.0 and alone["smallest_correct"] == 0.0
    both = made.evaluate([broken, correct], [0.75, 0.25], generator=torch.Generator())
    assert both["correct"] == 1.0 and both["comparators"] == 19 and both["best_sorted"] == 1.0
    assert both["sorted"] == pytest.approx(0.75 * alone["sorted"] + 0.25)
    assert both["found"] == 1.0 and both["smallest_correct"] == 19
    assert made.evaluate([broken, correct], [1.0, 0.0], generator=torch.Generator())["correct"] == 0.0
    assert made.objective(both) == pytest.approx(1 - both["sorted"])
    assert made.found.smallest == [list(pair) for pair in odd_even_merge(8)]
    assert made.describe()["smallest_correct"] == {  # summary.json's problem section
        "comparators": 19,
        "depth": 6,
        "found_at_evaluations": 0,
        "network": [list(pair) for pair in odd_even_merge(8)],
    }
    assert "smallest_correct" not in problem(registries, inputs=8, comparators=19, vectors=5).describe()


def test_fitness_verifies_hosts_that_pass_all_their_tests(registries) -> None:
    made = problem(registries, inputs=8, comparators=19, vectors=6)
    correct = Host(torch.tensor(odd_even_merge(8)), torch.empty(0, 2, dtype=torch.int64))
    parasites = population(made, "parasite", 2, seed=0)
    made.fitness(population(made, "host", 2, seed=0), parasites, None, generator=torch.Generator())
    assert made.found.history == []
    made.fitness([correct], parasites, None, generator=torch.Generator())
    assert made.found.history == [(2 * 2 * 6 + 2 * 6, 19)] and made.checks == 1
    off = problem(registries, inputs=8, comparators=19, vectors=6, verify=False)
    off.fitness([correct], parasites, None, generator=torch.Generator())
    assert off.found.history == [] and off.checks == 0


def test_the_prefix_is_prepended_and_needs_blocks_that_divide_the_inputs(registries) -> None:
    made = problem(registries, inputs=16, comparators=28, vectors=4, prefix_layers=4)
    host = population(made, "host", 1, seed=0)[0]
    assert host.network().shape == (60, 2)  # type: ignore[operator]
    assert made.describe()["max_comparators"] == 60 and made.describe()["best_known_comparators"] == 60
    path = Path(__file__).resolve().parents[3] / "recipes" / "sortnet.toml"
    with pytest.raises(RecipeError) as caught:
        recipes.load(path, registries, ["problem.inputs=12"])
    assert caught.value.lines == [f"{path}: problem.prefix_layers: 4 hypercube layers asked, 12 inputs admit 2"]
    with pytest.raises(ValidationError, match="4 hypercube layers asked, 8 inputs admit 3"):
        problem(registries, inputs=8, prefix_layers=4)
    with pytest.raises(ValidationError, match=r"1 hypercube layers asked, 7 inputs admit 0 \(odd\)"):
        problem(registries, inputs=7, prefix_layers=1)
    with pytest.raises(ValidationError, match=r"comparator \[2, 6\] has a wire outside 0..5"):
        problem(registries, inputs=6, prefix=[[0, 1], [2, 6]])


def test_the_shipped_recipe_validates(registries) -> None:
    path = Path(__file__).resolve().parents[3] / "recipes" / "sortnet.toml"
    recipe = recipes.load(path, registries)
    assert recipe.choices["problem"].name == "sortnet"
    with pytest.raises(RecipeError) as caught:  # the new key's bad value: one line naming it
        recipes.load(path, registries, ['problem.symmetric="mirror"'])
    assert len(caught.value.lines) == 1 and caught.value.lines[0].startswith(f"{path}: problem.symmetric: ")


def test_the_engines_problem_contract() -> None:
    from evogan.testing import check_problem

    produced = check_problem(SortingNetworks, {"inputs": 8, "comparators": 20, "vectors": 6}, size=3)
    host_loss, parasite_loss = produced["fitness"]
    assert torch.equal(host_loss, 1 - parasite_loss.T)
    assert 0 < produced["metrics"]["sorted"] < 1


def test_defaults_follow_hillis_style_operators() -> None:
    options = SortingNetworks.Options.model_validate({})
    assert (options.host.crossover.operator, options.host.mutation.operator) == ("cxTwoPoint", "mutUniformInt")
    assert (options.parasite.crossover.operator, options.parasite.mutation.operator) == ("cxTwoPoint", "mutFlipBit")
    assert options.host.mutation.arguments == {"indpb": 0.02}


def test_symmetric_hosts_run_each_comparator_with_its_reflection(registries) -> None:
    half = [(0, 1), (0, 2), (1, 2)]  # with reflections: (0,1) (2,3) (0,2) (1,3) (1,2) (1,2), a 4-sorter
    assert with_mirrors(torch.tensor(half), 4).tolist() == [[0, 1], [2, 3], [0, 2], [1, 3], [1, 2], [1, 2]]
    made = problem(registries, inputs=4, comparators=3, vectors=4, symmetric=True)
    assert made.describe()["max_comparators"] == 6 and made.describe()["symmetric"] is True
    host = made.create("host", generator=torch.Generator().manual_seed(0))
    assert host.comparators.shape == (3, 2)  # the genome holds half the network  # type: ignore[union-attr]
    made.write("host", host, [wire for pair in half for wire in pair])
    scores = made.evaluate([host], [1.0], generator=torch.Generator())
    assert scores["correct"] == 1.0 and scores["comparators"] == 5  # the self-reflected (1, 2)'s copy is pruned
    values = torch.randn(50, 4)
    assert torch.equal(host(values), values.sort(dim=-1).values)  # the module runs its reflections too
    plain = problem(registries, inputs=4, comparators=3, vectors=4)
    assert (
        plain.evaluate([Host(torch.tensor(half), plain._prefix)], [1.0], generator=torch.Generator())["correct"] == 0.0
    )
    parasites = population(made, "parasite", 2, seed=1)
    loss, _ = made.fitness([host], parasites, None, generator=torch.Generator())
    assert torch.equal(loss, torch.zeros(1, 2))


def test_a_prefixed_problem_scores_and_checks_as_its_whole_networks_would(registries) -> None:
    made = problem(registries, inputs=8, comparators=12, vectors=9, prefix_layers=2, prefix=[[1, 2], [5, 6]])
    assert made.describe()["prefix_comparators"] == 10 and made.describe()["inputs_reaching_evolved"] < 256
    hosts, parasites = population(made, "host", 4, seed=1), population(made, "parasite", 3, seed=2)
    host_loss, _ = made.fitness(hosts, parasites, None, generator=torch.Generator())
    for h, host in enumerate(hosts):
        network = host.network().tolist()  # type: ignore[operator]
        for p, parasite in enumerate(parasites):
            share = sum(sorts(network, v) for v in parasite.vectors.int().tolist()) / 9  # type: ignore[operator]
            assert host_loss[h, p].item() == pytest.approx(1 - share)
    rest = odd_even_merge(8)[8:]  # Batcher's 8-sorter after its first 8 comparators (a 2-layer hypercube)
    batcher = Host(torch.tensor(rest), made._prefix)
    plain = problem(registries, inputs=8, comparators=19, vectors=9)
    whole = Host(torch.tensor(odd_even_merge(8)), torch.empty(0, 2, dtype=torch.int64))
    prefixed = problem(registries, inputs=8, comparators=11, vectors=9, prefix_layers=2)
    assert prefixed.evaluate([batcher], [1.0], generator=torch.Generator()) == pytest.approx(
        plain.evaluate([whole], [1.0], generator=torch.Generator())
    )
    assert prefixed.found.smallest == [list(pair) for pair in odd_even_merge(8)[:8]] + [list(p) for p in rest]


def test_size_as_secondary_objective_ranks_equally_scored_hosts_correct_then_smaller(registries) -> None:
    settings = {"inputs": 8, "comparators": 21, "vectors": 6}
    made = problem(registries, **settings, secondary="size_depth")
    batcher = odd_even_merge(8)
    no_op = torch.empty(0, 2, dtype=torch.int64)
    small = Host(torch.tensor([*batcher, (1, 1), (2, 2)]), no_op)  # 19 effective
    large = Host(torch.tensor([*batcher, (0, 1), (3, 4)]), no_op)  # 21 comparators, 19 effective + 2 redundant
    larger = Host(torch.tensor([(0, 7), (0, 7), *batcher]), no_op)  # 20 effective: (0, 7) swaps, its duplicate never
    broken = Host(torch.tensor([*batcher[:-1], (3, 3), (3, 3), (3, 3)]), no_op)  # not correct
    parasites = [Parasite(torch.tensor([[0] * 8] * 6, dtype=torch.bool))]  # every host sorts all of it
    loss, parasite_loss = made.fitness([small, large, larger, broken], parasites, None, generator=torch.Generator())
    assert loss[0, 0] == loss[1, 0] < loss[2, 0] < loss[3, 0] < 1 / 6  # redundant comparators cost nothing
    assert torch.equal(parasite_loss, torch.ones(1, 4))
    plain = problem(registries, **settings)
    assert bool((plain.fitness([small, broken], parasites, None, generator=torch.Generator())[0] == 0).all())
    one_wrong = [Parasite(torch.tensor([[1, 0, 0, 0, 0, 0, 0, 0]] * 6, dtype=torch.bool))]
    wrong = Host(torch.tensor([(3, 3)] * 21), no_op)  # sorts nothing with a 1 above a 0
    loss, _ = made.fitness([small, wrong], one_wrong, None, generator=torch.Generator())
    assert loss[1, 0] > 1 - 1e-6 and loss[0, 0] < 1 / 6  # a failed vector outweighs any size


def test_parasites_scored_by_the_hosts_that_fail_them(registries) -> None:
    made = problem(registries, inputs=6, comparators=14, vectors=9, parasite_fitness="hosts")
    hosts, parasites = population(made, "host", 4, seed=1), population(made, "parasite", 3, seed=2)
    host_loss, parasite_loss = made.fitness(hosts, parasites, None, generator=torch.Generator())
    share = 1 - host_loss.T
    assert torch.allclose(parasite_loss, (share == 1).float() + share / 5)
    assert torch.equal(
        host_loss,
        problem(registries, inputs=6, comparators=14, vectors=9).fitness(
            hosts, parasites, None, generator=torch.Generator()
        )[0],
    )
