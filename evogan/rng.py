"""One seed for the whole run, split per cell and per generation. No global generator is ever seeded.

``SeedSequence(seed, spawn_key=(cell, generation, stream))`` gives every (cell, generation) its own
independent streams, so a cell's numbers do not depend on how cells are spread over processes, and a
resumed run draws exactly what an uninterrupted one would.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

# Streams within one (cell, generation): separate so adding draws to one never shifts another.
STREAMS = {"evolution": 0, "torch": 1, "init": 2, "evaluation": 3, "data": 4, "mixture": 5}


def seed_sequence(seed: int, cell: int, generation: int, stream: str) -> np.random.SeedSequence:
    return np.random.SeedSequence(seed, spawn_key=(cell, generation, STREAMS[stream]))


@dataclass
class CellRandom:
    """The random generators a cell uses during one generation."""

    numpy: np.random.Generator  # selection, mutation, defender picks, mixture ES
    torch: torch.Generator  # noise, batch order, network initialisation

    @classmethod
    def for_generation(cls, seed: int, cell: int, generation: int, stream: str = "evolution") -> CellRandom:
        numpy_rng = np.random.default_rng(seed_sequence(seed, cell, generation, stream))
        # The training stream pairs with its own torch stream; any other stream seeds torch from itself.
        torch_stream = "torch" if stream == "evolution" else stream
        state = seed_sequence(seed, cell, generation, torch_stream).generate_state(1, np.uint64)[0]
        torch_seed = int(state >> 1)
        return cls(numpy_rng, torch.Generator().manual_seed(torch_seed))

    @classmethod
    def for_cell(cls, seed: int, cell: int, stream: str) -> CellRandom:
        """Streams drawn once per cell for the whole run (its share of the data under data dieting):
        they depend on the seed and the cell only, so a resumed run and any split of the cells over
        worker processes draw the same."""
        return cls.for_generation(seed, cell, 0, stream)


__all__ = ["STREAMS", "CellRandom", "seed_sequence"]
