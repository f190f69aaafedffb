"""One seed for the whole run, split per cell and per generation. No global generator is ever seeded.

``SeedSequence(seed, spawn_key=(cell, generation, stream))`` makes a cell's numbers independent of how cells are
spread over processes, and a resumed run draws what an uninterrupted one would. Scores have run-wide streams of
their own, the same for every cell so cells compare on common noise, and disjoint from all others: ``validation``
chooses, ``test`` reports. The per-generation mixture ES draws its validation noise from that generation's
evolution stream, where it always has, so records stay as they were.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np

from evogan.lazy import lazy

if TYPE_CHECKING:
    import torch
else:  # imported on first use: evogan.api names this module's types, and `import evogan.api` takes no torch
    torch = lazy("torch", globals())

# Streams within one (cell, generation): separate so adding draws to one never shifts another.
STREAMS = {
    "evolution": 0,
    "torch": 1,
    "init": 2,
    "evaluation": 3,  # pictures
    "data": 4,
    "mixture": 5,
    "validation": 6,  # scores that choose
    "test": 7,  # scores that are reported
}
#: The run's score streams: ``validation`` for every score that chooses, ``test`` for what is reported.
ScoreStream = Literal["validation", "test"]
SCORE_STREAMS: tuple[ScoreStream, ...] = ("validation", "test")


def seed_sequence(seed: int, cell: int, generation: int, stream: str) -> np.random.SeedSequence:
    return np.random.SeedSequence(seed, spawn_key=(cell, generation, STREAMS[stream]))


def score_sequence(seed: int, stream: str, member: int | None = None) -> np.random.SeedSequence:
    """The noise of ``stream`` (``validation`` or ``test``): run-wide (cell and generation slots 0), or
    with ``member`` one generator's own noise (slots ``(member, 1)``: the mixture optimiser draws each
    generator's samples once, the same in every ensemble)."""
    if stream not in SCORE_STREAMS:
        raise ValueError(f"score stream {stream!r}: expected one of {', '.join(SCORE_STREAMS)}")
    return seed_sequence(seed, 0, 0, stream) if member is None else seed_sequence(seed, member, 1, stream)


def score_seed(seed: int, stream: str, member: int | None = None) -> int:
    """A torch seed of :func:`score_sequence` (63 bits, as ``torch.Generator.manual_seed`` takes)."""
    return int(score_sequence(seed, stream, member).generate_state(1, np.uint64)[0] >> 1)


def score_generator(seed: int, stream: str) -> torch.Generator:
    """A fresh generator of ``stream``'s run-wide noise: every call starts the stream from the beginning."""
    return torch.Generator().manual_seed(score_seed(seed, stream))


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


__all__ = [
    "SCORE_STREAMS",
    "STREAMS",
    "CellRandom",
    "ScoreStream",
    "score_generator",
    "score_seed",
    "score_sequence",
    "seed_sequence",
]
