"""Known networks and slow pure-Python references the tests check the bit-parallel code against."""

from __future__ import annotations

from collections.abc import Sequence

Pair = tuple[int, int]


def odd_even_merge(n: int) -> list[Pair]:
    """Batcher's odd-even merge sort for ``n`` a power of two (19 comparators for 8, 63 for 16)."""
    pairs: list[Pair] = []
    block = 1
    while block < n:  # merge sorted runs of ``block`` into runs of ``2 * block``
        gap = block
        while gap >= 1:
            for start in range(gap % block, n - gap, 2 * gap):
                for i in range(start, min(start + gap, n - gap)):
                    if i // (2 * block) == (i + gap) // (2 * block):  # both ends in the same merge
                        pairs.append((i, i + gap))
            gap //= 2
        block *= 2
    return pairs


def bubble(n: int) -> list[Pair]:
    """Bubble sort as a network: ``n (n - 1) / 2`` adjacent comparators (any ``n``)."""
    return [(j, j + 1) for top in range(n - 1, 0, -1) for j in range(top)]


def apply(network: Sequence[Sequence[int]], vector: Sequence[int]) -> list[int]:
    values = list(vector)
    for i, j in network:
        low, high = min(i, j), max(i, j)
        if values[low] > values[high]:
            values[low], values[high] = values[high], values[low]
    return values


def sorts(network: Sequence[Sequence[int]], vector: Sequence[int]) -> bool:
    out = apply(network, vector)
    return all(out[k] <= out[k + 1] for k in range(len(out) - 1))


def binary(x: int, n: int) -> list[int]:
    return [x >> i & 1 for i in range(n)]


def sorts_everything(network: Sequence[Sequence[int]], n: int) -> bool:
    return all(sorts(network, binary(x, n)) for x in range(1 << n))


def swapping(network: Sequence[Sequence[int]], n: int) -> int:
    """Comparators that swap on some binary input (the size of the pruned network)."""
    used = [False] * len(network)
    for x in range(1 << n):
        values = binary(x, n)
        for c, (i, j) in enumerate(network):
            low, high = min(i, j), max(i, j)
            if values[low] > values[high]:
                values[low], values[high] = values[high], values[low]
                used[c] = True
    return sum(used)
