"""Facts about sorting networks that need no torch (read when a recipe is validated)."""

from __future__ import annotations

import math

# The smallest known comparator counts (optimal up to 10 inputs; Knuth, TAOCP vol. 3, and later proofs).
BEST_KNOWN = {
    2: 1, 3: 3, 4: 5, 5: 9, 6: 12, 7: 16, 8: 19, 9: 25, 10: 29, 11: 35, 12: 39, 13: 45, 14: 51, 15: 56, 16: 60,
}


def layers_allowed(inputs: int) -> int:
    """How many hypercube prefix layers ``inputs`` wires admit: ``L`` layers need blocks of ``2^L``
    wires, so ``2^L`` must divide ``inputs`` (16: 4, Green's first 32 comparators; 12: 2, three blocks of
    4; odd: 0)."""
    return int(math.log2(inputs & -inputs))


__all__ = ["BEST_KNOWN", "layers_allowed"]
