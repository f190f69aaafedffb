"""Sorting networks by host-parasite coevolution (Hillis 1990): a second evogan problem, not a GAN.

    [problem]
    use = "sortnet"
    inputs = 16
    comparators = 60
    vectors = 20

Hosts are comparator lists, parasites sets of binary test vectors; see :mod:`evogan_sortnet.problem`.
"""

from __future__ import annotations

from evogan.hookspecs import Register, hookimpl
from evogan_sortnet.problem import SortingNetworks


@hookimpl
def evogan_register_problems(register: Register) -> None:
    register(SortingNetworks)


__all__ = ["SortingNetworks", "evogan_register_problems"]
