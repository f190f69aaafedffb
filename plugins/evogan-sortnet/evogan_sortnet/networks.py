"""Genomes (hosts: comparator lists, parasites: binary test vectors) and their bit-parallel evaluation.

Binary vectors travel as *bit-planes*: for ``V`` vectors on ``n`` wires, a tensor of shape ``(..., n,
words)`` of int64 where bit ``k`` of word ``w`` on wire ``i`` is the value of wire ``i`` in vector ``64 w +
k``. A comparator ``(a, b)`` with ``a < b`` is then two word operations on every vector at once: the
minimum ``x_a & x_b`` goes to wire ``a``, the maximum ``x_a | x_b`` to wire ``b``. By the 0-1 principle
(Knuth, TAOCP vol. 3, 5.3.4) a network sorts every input iff it sorts all ``2^n`` binary ones.

Padding bits are all-zero vectors: they are sorted and never make a comparator swap, so no count needs
a mask.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from evogan_sortnet.known import BEST_KNOWN, layers_allowed

WORD = 64

# Best known comparator counts (upper bounds; Knuth TAOCP 5.3.4 and later searches), for reports.
class Host(nn.Module):
    """A sorting network: ``comparators`` (int64, ``(C, 2)``) are the evolved wire pairs, applied after
    the problem's fixed ``prefix`` (not part of the genome, so it neither travels nor mutates). A pair
    ``(i, i)`` is a no-op; ``(j, i)`` acts as ``(i, j)``.
    """

    comparators: torch.Tensor
    prefix: torch.Tensor

    def __init__(self, comparators: torch.Tensor, prefix: torch.Tensor, *, mirror: int = 0) -> None:
        """:param mirror: the wires of a symmetric network, whose every evolved comparator is followed by
        its reflection (:func:`with_mirrors`); 0: the comparators as they are."""
        super().__init__()
        self.mirror = mirror
        self.register_buffer("comparators", comparators)
        self.register_buffer("prefix", prefix, persistent=False)

    def network(self) -> torch.Tensor:
        """Every comparator in order, prefix first, as ``(lower wire, upper wire)`` rows."""
        evolved = with_mirrors(self.comparators, self.mirror) if self.mirror else self.comparators
        return torch.cat([self.prefix, evolved]).sort(dim=-1).values

    def forward(self, values: torch.Tensor) -> torch.Tensor:
        """``values`` (``(..., n)``, any ordered dtype) passed through the network: sorted ascending iff
        the network sorts them."""
        out = values.clone()
        for low, high in self.network().tolist():
            if low != high:
                a, b = out[..., low].clone(), out[..., high]
                out[..., low] = torch.minimum(a, b)
                out[..., high] = torch.maximum(a, b)
        return out


class Parasite(nn.Module):
    """A set of test cases: ``vectors`` (bool, ``(V, n)``), one binary input per row."""

    vectors: torch.Tensor

    def __init__(self, vectors: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("vectors", vectors)


def hypercube_prefix(inputs: int, layers: int) -> torch.Tensor:
    """The first ``layers`` layers of Green's 16-input network, for any ``inputs`` that ``2^layers``
    divides: layer ``d`` compares every wire ``i`` having bit ``d`` clear with ``i + 2^d`` (Hillis fixed
    Green's first 32 comparators, four layers for 16 inputs; for 12 inputs two layers work on three
    blocks of 4, as the first two layers of Shapiro and Green's 39-comparator network do). Shape
    ``(layers * inputs / 2, 2)``."""
    pairs = [(i, i | 1 << d) for d in range(layers) for i in range(inputs) if not i >> d & 1]
    return torch.tensor(pairs, dtype=torch.int64).reshape(-1, 2)


def words_for(vectors: int) -> int:
    return -(-vectors // WORD)


@functools.cache
def _bit_weights(device: torch.device) -> torch.Tensor:
    # 1 << 63 wraps to int64's minimum, which is exactly bit 63's pattern; the bits are distinct, so
    # summing them never carries and equals OR-ing them.
    return torch.ones(WORD, dtype=torch.int64, device=device) << torch.arange(WORD, device=device)


@functools.cache
def _byte_counts(device: torch.device) -> torch.Tensor:
    return torch.tensor([bin(b).count("1") for b in range(256)], dtype=torch.int64, device=device)


def pack(bits: torch.Tensor) -> torch.Tensor:
    """Binary vectors ``(..., V, n)`` (bool) as bit-planes ``(..., n, words_for(V))``, zero-padded."""
    *batch, vectors, inputs = bits.shape
    words = words_for(vectors)
    padded = torch.zeros(*batch, words * WORD, inputs, dtype=torch.int64, device=bits.device)
    padded[..., :vectors, :] = bits.to(torch.int64)
    planes = padded.transpose(-1, -2).reshape(*batch, inputs, words, WORD)
    return (planes * _bit_weights(bits.device)).sum(dim=-1)


def unpack(planes: torch.Tensor, vectors: int) -> torch.Tensor:
    """The inverse of :func:`pack`: ``(..., n, words)`` back to ``(..., vectors, n)`` bools."""
    bits = (planes.unsqueeze(-1) & _bit_weights(planes.device)) != 0  # (..., n, words, 64)
    return bits.flatten(-2)[..., :vectors].transpose(-1, -2)


def popcount(words: torch.Tensor) -> torch.Tensor:
    """Set bits of each int64 word (a byte lookup: torch has no popcount)."""
    octets = words.contiguous().view(torch.uint8).reshape(*words.shape, 8)
    return _byte_counts(words.device)[octets.long()].sum(dim=-1)


def all_inputs(inputs: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """Every binary input of ``inputs`` wires as bit-planes ``(inputs, max(1, 2^inputs / 64))``: vector
    ``x`` holds bit ``i`` of ``x`` on wire ``i``. Built word by word (no ``2^n x n`` intermediate)."""
    count = 1 << inputs
    words = words_for(count)
    index = torch.arange(words, dtype=torch.int64, device=device)
    low_bits = min(inputs, 6)  # wires below 6 repeat one pattern in every word
    planes = torch.empty(inputs, words, dtype=torch.int64, device=device)
    valid = (1 << count) - 1 if count < WORD else -1
    for wire in range(low_bits):
        pattern = sum(1 << k for k in range(WORD) if k >> wire & 1)
        pattern = (pattern - (1 << WORD) if pattern >= 1 << 63 else pattern) & valid
        planes[wire] = pattern
    for wire in range(low_bits, inputs):
        planes[wire] = -((index >> (wire - 6)) & 1)  # all ones or all zeros
    return planes


def with_mirrors(comparators: torch.Tensor, inputs: int) -> torch.Tensor:
    """``(..., C, 2)`` wire pairs -> ``(..., 2C, 2)``: each followed by its reflection ``(n-1-j, n-1-i)``, as
    in the symmetric networks of Valsalam and Miikkulainen (2013), among which are the best known for 12
    and 16 inputs. A pair that is its own reflection then repeats and its copy never swaps (pruned from
    the size as any useless comparator)."""
    reflected = (inputs - 1) - comparators.flip(-1)
    return torch.stack([comparators, reflected], dim=-2).flatten(-3, -2)


def normalise(comparators: torch.Tensor) -> torch.Tensor:
    """``(..., 2)`` wire pairs as ``(lower, upper)``."""
    return comparators.sort(dim=-1).values


def run_networks(planes: torch.Tensor, networks: torch.Tensor, *, swaps: bool = False) -> torch.Tensor | None:
    """Apply each host's network to its own bit-planes, in place.

    :param planes: ``(H, n, words)``; row ``h`` goes through network ``h``.
    :param networks: ``(H, C, 2)`` normalised wire pairs (:func:`normalise`).
    :param swaps: also return ``(H, C)`` bools: whether comparator ``c`` of host ``h`` swapped any vector
        (one that never does can be removed without changing what the network computes).
    :returns: the swap table, or None.

    On the CPU the comparators run through numpy on the same memory: each step is a handful of small
    array operations, where torch's per-operation overhead is several times numpy's.
    """
    if planes.device.type == "cpu" and planes.is_contiguous():
        return _run_numpy(planes, networks, swaps=swaps)
    hosts, _, words = planes.shape
    swapped = torch.zeros(hosts, networks.shape[1], dtype=torch.bool, device=planes.device) if swaps else None
    indices = networks.unsqueeze(-1).expand(hosts, networks.shape[1], 2, words)
    for position in range(networks.shape[1]):  # comparators are sequential; vectors and hosts are not
        low, high = indices[:, position, 0:1], indices[:, position, 1:2]
        a, b = planes.gather(1, low), planes.gather(1, high)
        if swapped is not None:
            swapped[:, position] = ((a & ~b) != 0).flatten(1).any(dim=1)
        planes.scatter_(1, low, a & b)  # when low == high both writes leave the wire as it was
        planes.scatter_(1, high, a | b)
    return swapped


def _run_numpy(planes: torch.Tensor, networks: torch.Tensor, *, swaps: bool) -> torch.Tensor | None:
    """:func:`run_networks` on a contiguous CPU tensor, through a numpy view of its memory: wire ``i`` of
    host ``h`` is row ``h * n + i`` of the ``(H * n, words)`` view."""
    hosts, inputs, words = planes.shape
    flat = planes.numpy().reshape(hosts * inputs, words)
    base = (np.arange(hosts, dtype=np.int64) * inputs)[None, :]
    wires = networks.cpu().numpy()
    lows = np.ascontiguousarray(wires[:, :, 0].T) + base  # (C, H): the row of each comparator's ends
    highs = np.ascontiguousarray(wires[:, :, 1].T) + base
    swapped = np.zeros((networks.shape[1], hosts), dtype=bool) if swaps else None
    for position, (low, high) in enumerate(zip(lows, highs, strict=True)):
        a, b = flat[low], flat[high]
        if swapped is not None:
            swapped[position] = (a & ~b).any(axis=1)
        flat[low] = a & b  # when low == high both writes leave the wire as it was
        flat[high] = a | b
    return None if swapped is None else torch.from_numpy(swapped.T.copy()).to(networks.device)


def unsorted_words(planes: torch.Tensor) -> torch.Tensor:
    """``(..., n, words)`` -> ``(..., words)``: the vectors having some wire ``i`` at 1 above a 0."""
    inversions = planes[..., :-1, :] & ~planes[..., 1:, :]
    return functools.reduce(torch.bitwise_or, inversions.unbind(dim=-2), torch.zeros_like(planes[..., 0, :]))


def through(planes: torch.Tensor, prefix: torch.Tensor | None) -> torch.Tensor:
    """``planes`` (``(R, n, words)``) after the fixed ``prefix`` (``(K, 2)`` normalised), every row
    alike: the prefix runs once over all rows' words instead of once per host."""
    if prefix is None or not len(prefix):
        return planes
    rows, inputs, words = planes.shape
    flat = planes.permute(1, 0, 2).reshape(1, inputs, rows * words).contiguous()
    run_networks(flat, prefix.unsqueeze(0))
    return flat.reshape(inputs, rows, words).permute(1, 0, 2).contiguous()


def sorted_counts(networks: torch.Tensor, parasites: torch.Tensor, prefix: torch.Tensor | None = None) -> torch.Tensor:
    """All-vs-all: how many of parasite ``p``'s vectors host ``h`` sorts, ``(H, P)`` int64.

    :param networks: ``(H, C, 2)`` normalised wire pairs.
    :param parasites: ``(P, V, n)`` bools. Each parasite gets its own words, so its counts are one
        popcount over its segment; every host runs all parasites' vectors in one pass.
    :param prefix: ``(K, 2)`` normalised wire pairs every host applies before its own (run once).
    """
    hosts, count = networks.shape[0], parasites.shape[0]
    vectors, inputs = parasites.shape[1:]
    planes = through(pack(parasites), prefix)  # (P, n, w)
    per = planes.shape[-1]
    batch = planes.permute(1, 0, 2).reshape(1, inputs, count * per).expand(hosts, -1, -1).contiguous()
    run_networks(batch, networks)
    failed = popcount(unsorted_words(batch)).reshape(hosts, count, per).sum(dim=-1)
    return vectors - failed


def pair_counts(networks: torch.Tensor, parasites: torch.Tensor, prefix: torch.Tensor | None = None) -> torch.Tensor:
    """Pair by pair: how many of parasite ``r``'s vectors host ``r`` sorts, ``(R,)`` int64.

    :param networks: ``(R, C, 2)`` normalised wire pairs.
    :param parasites: ``(R, V, n)`` bools. Row ``r`` runs only its own parasite's vectors, so any list of
        games (many cells' neighbourhoods at once) is one pass over ``R`` rows.
    :param prefix: as :func:`sorted_counts`.
    """
    planes = through(pack(parasites), prefix)  # (R, n, w)
    run_networks(planes, networks)
    return parasites.shape[1] - popcount(unsorted_words(planes)).sum(dim=-1)


@dataclass(frozen=True)
class InputSet:
    """The binary inputs that reach the evolved comparators: all ``2^inputs``, or after a fixed prefix
    only its distinct outputs (Green's 32 comparators leave 168 of 65,536 for 16 inputs), each weighted
    by how many inputs the prefix maps onto it, so shares still count the ``2^inputs`` inputs.

    :param planes: ``(inputs, words)`` bit-planes of the distinct vectors.
    :param weights: ``(64 * words,)`` int64, inputs per vector (0 for padding); None: one each.
    """

    planes: torch.Tensor
    weights: torch.Tensor | None
    total: int

    @property
    def vectors(self) -> int:
        return self.total if self.weights is None else int((self.weights > 0).sum())


def prefix_outputs(inputs: int, prefix: torch.Tensor, device: torch.device | str = "cpu") -> InputSet:
    """The :class:`InputSet` after ``prefix`` (``(K, 2)`` wire pairs; empty: every input)."""
    planes = all_inputs(inputs, device)
    if not len(prefix):
        return InputSet(planes, None, 1 << inputs)
    batch = planes.unsqueeze(0).contiguous()
    run_networks(batch, normalise(prefix.to(device)).unsqueeze(0))
    bits = unpack(batch[0], 1 << inputs)  # (2^n, n)
    distinct, counts = torch.unique(bits, dim=0, return_counts=True)
    packed = pack(distinct)
    weights = torch.zeros(packed.shape[-1] * WORD, dtype=torch.int64, device=device)
    weights[: len(counts)] = counts
    return InputSet(packed, weights, 1 << inputs)


def failed_inputs(planes: torch.Tensor, weights: torch.Tensor | None) -> torch.Tensor:
    """``(H, n, words)`` after the networks -> ``(H,)``: the inputs left unsorted, weighted."""
    words = unsorted_words(planes)
    if weights is None:
        return popcount(words).sum(dim=-1)
    bits = (words.unsqueeze(-1) & _bit_weights(words.device)) != 0  # (H, words, 64)
    return (bits.flatten(-2).to(torch.int64) * weights).sum(dim=-1)


def exhaustive(
    networks: torch.Tensor, inputs: int, *, chunk_words: int = 1 << 22, over: InputSet | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Every host against all ``2^inputs`` binary inputs, or (``over``) the inputs that reach it.

    :param over: what the networks see (:func:`prefix_outputs`: after a fixed prefix, only its distinct
        outputs, weighted); default every input.
    :returns: ``(sorted, swaps)``: per host, the inputs it sorts (int64, out of ``2^inputs``), and per
        comparator whether it swaps on some input (``swaps.sum(1)`` is the network's size once the useless
        ones are pruned).
    """
    over = over or InputSet(all_inputs(inputs, networks.device), None, 1 << inputs)
    planes = over.planes
    step = max(1, chunk_words // planes.numel())  # hosts per pass, to bound memory at 16+ inputs
    sorted_parts, swap_parts = [], []
    for start in range(0, networks.shape[0], step):
        part = networks[start : start + step]
        batch = planes.unsqueeze(0).repeat(part.shape[0], 1, 1)  # a copy: the networks run in place
        swapped = run_networks(batch, part, swaps=True)
        assert swapped is not None
        sorted_parts.append(over.total - failed_inputs(batch, over.weights))
        swap_parts.append(swapped)
    return torch.cat(sorted_parts), torch.cat(swap_parts)


def depth(network: Sequence[Sequence[int]], inputs: int) -> int:
    """Layers of ``network`` (wire pairs, in order) when every comparator runs as early as its wires
    allow; no-ops ``(i, i)`` take no layer."""
    ready = [0] * inputs
    for low, high in network:
        if low != high:
            ready[low] = ready[high] = max(ready[low], ready[high]) + 1
    return max(ready, default=0)


__all__ = [
    "BEST_KNOWN",
    "WORD",
    "Host",
    "InputSet",
    "Parasite",
    "all_inputs",
    "depth",
    "exhaustive",
    "failed_inputs",
    "hypercube_prefix",
    "layers_allowed",
    "normalise",
    "pack",
    "pair_counts",
    "popcount",
    "prefix_outputs",
    "run_networks",
    "sorted_counts",
    "through",
    "unpack",
    "unsorted_words",
    "with_mirrors",
    "words_for",
]
