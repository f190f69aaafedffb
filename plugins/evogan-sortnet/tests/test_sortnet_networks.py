"""The bit-parallel evaluation against known networks and a slow pure-Python reference."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from evogan_sortnet.networks import (
    Host,
    all_inputs,
    depth,
    exhaustive,
    hypercube_prefix,
    normalise,
    pack,
    pair_counts,
    popcount,
    prefix_outputs,
    sorted_counts,
    unpack,
)
from sortnet_helpers import binary, bubble, odd_even_merge, sorts, sorts_everything, swapping

FOUR = [(0, 1), (2, 3), (0, 2), (1, 3), (1, 2)]


def check(network: list[tuple[int, int]], n: int) -> tuple[int, int]:
    """(inputs sorted, effective comparators) of one network, through the bit-parallel code."""
    done, swaps = exhaustive(normalise(torch.tensor([network]).reshape(1, -1, 2)), n)
    return int(done[0]), int(swaps.sum())


def test_the_helpers_known_networks_are_what_the_literature_says() -> None:
    assert len(odd_even_merge(8)) == 19 and len(odd_even_merge(16)) == 63
    assert sorts_everything(odd_even_merge(8), 8) and sorts_everything(FOUR, 4) and sorts_everything(bubble(6), 6)


@pytest.mark.parametrize(
    ("network", "n"),
    [(FOUR, 4), (odd_even_merge(8), 8), (odd_even_merge(16), 16), (bubble(12), 12)],
    ids=["4", "batcher-8", "batcher-16", "bubble-12"],
)
def test_known_networks_sort_every_input_and_lose_it_without_their_last_comparator(network, n: int) -> None:
    assert check(network, n) == (1 << n, len(network))  # a textbook network has no useless comparator
    done, _ = check(network[:-1], n)
    assert done < 1 << n
    # the inputs the cut network fails are exactly those the reference fails (checked where cheap)
    if n <= 8:
        assert done == sum(sorts(network[:-1], binary(x, n)) for x in range(1 << n))


def test_useless_and_no_op_comparators_are_pruned_from_the_count() -> None:
    padded = [(3, 3), *FOUR, (2, 1), (0, 1), (1, 1)]  # a no-op, a reversed duplicate, a redundant one
    assert check(padded, 4) == (16, 5)


def test_random_networks_match_the_reference_on_every_input() -> None:
    draw = torch.Generator().manual_seed(3)
    for n in (2, 3, 5, 6, 7):
        networks = torch.randint(0, n, (6, 12, 2), generator=draw)
        done, swaps = exhaustive(normalise(networks), n)
        for h, network in enumerate(networks.tolist()):
            assert int(done[h]) == sum(sorts(network, binary(x, n)) for x in range(1 << n))
            assert int(swaps[h].sum()) == swapping(network, n)


def test_exhaustive_splits_many_hosts_into_passes_without_changing_results() -> None:
    networks = normalise(torch.randint(0, 10, (7, 30, 2), generator=torch.Generator().manual_seed(1)))
    whole = exhaustive(networks, 10)
    parts = exhaustive(networks, 10, chunk_words=10 * 16 * 2)  # two hosts per pass
    assert all(torch.equal(a, b) for a, b in zip(whole, parts, strict=True))


def test_sorted_counts_match_the_reference_all_against_all() -> None:
    draw = torch.Generator().manual_seed(7)
    for n, vectors in ((4, 3), (6, 64), (9, 70), (12, 150)):  # segments shorter than, equal to, past a word
        networks = torch.randint(0, n, (5, 25, 2), generator=draw)
        parasites = torch.randint(0, 2, (4, vectors, n), generator=draw).bool()
        counts = sorted_counts(normalise(networks), parasites)
        reference = [
            [sum(sorts(net, vec) for vec in parasite) for parasite in parasites.int().tolist()]
            for net in networks.tolist()
        ]
        assert counts.tolist() == reference


def test_bit_planes_hold_vector_k_of_word_w_at_bit_k() -> None:
    bits = torch.randint(0, 2, (3, 130, 5), generator=torch.Generator().manual_seed(0)).bool()
    planes = pack(bits)
    assert planes.shape == (3, 5, 3) and planes.dtype == torch.int64
    assert torch.equal(unpack(planes, 130), bits)
    assert int(planes[1, 2, 1]) >> 4 & 1 == int(bits[1, 64 + 4, 2])
    for n in (1, 3, 6, 8):
        everything = torch.tensor([binary(x, n) for x in range(1 << n)]).bool()
        assert torch.equal(all_inputs(n), pack(everything))
    assert popcount(torch.tensor([0, 1, -1, -(2**63), 0x0F0F])).tolist() == [0, 1, 64, 1, 8]


def test_the_host_module_sorts_real_values_and_keeps_its_prefix_out_of_the_state_dict() -> None:
    host = Host(torch.tensor(odd_even_merge(8)[4:]), torch.tensor(odd_even_merge(8)[:4]))
    values = torch.randn(10, 8, generator=torch.Generator().manual_seed(2))
    assert torch.equal(host(values), values.sort(dim=-1).values)
    assert list(host.state_dict()) == ["comparators"]


def test_the_hypercube_prefix_is_greens_first_32_comparators_for_16_inputs() -> None:
    prefix = hypercube_prefix(16, 4)
    assert prefix.shape == (32, 2)
    assert prefix[:8].tolist() == [[i, i + 1] for i in range(0, 16, 2)]
    layers = prefix.reshape(4, 8, 2)
    assert all(sorted(layer.flatten().tolist()) == list(range(16)) for layer in layers)  # disjoint layers
    assert hypercube_prefix(8, 0).shape == (0, 2)


def test_the_hypercube_prefix_works_on_blocks_where_inputs_are_no_power_of_two() -> None:
    prefix = hypercube_prefix(12, 2)
    assert prefix.shape == (12, 2)  # three blocks of 4, two layers each: 0-1 2-3 ..., then 0-2 1-3 ...
    assert prefix[:6].tolist() == [[i, i + 1] for i in range(0, 12, 2)]
    assert prefix[6:].tolist() == [[0, 2], [1, 3], [4, 6], [5, 7], [8, 10], [9, 11]]


@pytest.mark.parametrize(("n", "layers", "distinct"), [(16, 4, 168), (12, 2, 216), (8, 3, 20), (6, 1, 27)])
def test_the_prefix_outputs_are_its_distinct_binary_outputs_weighted_by_the_inputs_behind_them(
    n: int, layers: int, distinct: int
) -> None:
    prefix = hypercube_prefix(n, layers)
    reaching = prefix_outputs(n, prefix)
    assert reaching.vectors == distinct and reaching.weights is not None
    assert int(reaching.weights.sum()) == 1 << n == reaching.total  # Green's filter: 168 of 65,536
    assert prefix_outputs(n, prefix[:0]).weights is None and prefix_outputs(n, prefix[:0]).vectors == 1 << n


@pytest.mark.parametrize(("n", "layers"), [(8, 3), (12, 2), (6, 1)])
def test_the_check_over_the_prefix_outputs_equals_the_whole_network_on_every_input(n: int, layers: int) -> None:
    prefix = hypercube_prefix(n, layers)
    length = n * (n - 1) // 2
    suffixes = normalise(torch.randint(0, n, (5, length, 2), generator=torch.Generator().manual_seed(n)))
    suffixes[0] = torch.tensor(bubble(n))  # sorts anything, so everything after the prefix too
    whole = torch.cat([prefix.unsqueeze(0).expand(5, -1, -1), suffixes], dim=1)
    done, swaps = exhaustive(whole, n)
    over, over_swaps = exhaustive(suffixes, n, over=prefix_outputs(n, prefix))
    assert torch.equal(done, over)
    assert torch.equal(swaps[:, len(prefix) :], over_swaps)  # a comparator swaps on some input reaching it
    assert bool(swaps[:, : len(prefix)].all())  # every hypercube comparator swaps on some input
    assert int(done[0]) == 1 << n


def test_counts_with_the_prefix_run_once_equal_the_whole_networks() -> None:
    draw = torch.Generator().manual_seed(5)
    prefix = normalise(hypercube_prefix(8, 2))
    suffixes = normalise(torch.randint(0, 8, (4, 10, 2), generator=draw))
    parasites = torch.randint(0, 2, (3, 70, 8), generator=draw).bool()
    whole = torch.cat([prefix.unsqueeze(0).expand(4, -1, -1), suffixes], dim=1)
    assert torch.equal(sorted_counts(suffixes, parasites, prefix), sorted_counts(whole, parasites))
    rows = torch.tensor([0, 3, 1])
    assert torch.equal(pair_counts(suffixes[rows], parasites, prefix), pair_counts(whole[rows], parasites))


def test_depth_schedules_each_comparator_as_early_as_its_wires_allow() -> None:
    assert depth(FOUR, 4) == 3 and depth([(0, 1), (2, 3), (1, 1)], 4) == 1 and depth([], 3) == 0
    assert depth(odd_even_merge(8), 8) == 6 and depth(odd_even_merge(16), 16) == 10


def test_the_12_input_network_evogan_found_sorts_everything_at_the_best_known_size() -> None:
    """The symmetric search's seed 4 (benchmarks/RESULTS.md, "Symmetric networks"): 39 comparators in 9
    layers, the best known size for 12 inputs; checked by the pure-Python reference on all 4,096 inputs."""
    found = json.loads((Path(__file__).parent / "data" / "sortnet-12-39.json").read_text())
    network = [(low, high) for low, high in found["network"]]
    assert len(network) == found["comparators"] == 39 and depth(network, 12) == found["depth"] == 9
    assert sorts_everything(network, 12)
    assert check(network, 12) == (1 << 12, 39)  # every comparator swaps on some input
    assert {(11 - high, 11 - low) for low, high in network} == set(network)  # symmetric
