"""The run's random streams: one seed, split per cell, generation and stream; the score streams apart."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from evogan.rng import SCORE_STREAMS, STREAMS, CellRandom, score_generator, score_seed, score_sequence, seed_sequence


def state(sequence: np.random.SeedSequence) -> tuple[int, ...]:
    return tuple(int(x) for x in sequence.generate_state(4))


def test_score_streams_never_coincide_with_training_fitness_or_each_other() -> None:
    """Training and fitness noise come from the torch stream of a (cell, generation), the mixture ES's from
    its evolution stream; no such stream is a score stream, for any cell and generation of a run."""
    for seed in (0, 1, 7):
        others = {
            state(seed_sequence(seed, cell, generation, stream))
            for cell in range(10)
            for generation in range(30)
            for stream in STREAMS
            if stream not in SCORE_STREAMS
        }
        members = (None, *range(10))
        scores = [state(score_sequence(seed, stream, member)) for stream in SCORE_STREAMS for member in members]
        assert len(set(scores)) == len(scores) and not set(scores) & others


def test_score_noise_is_the_seeds_alone() -> None:
    first = torch.randn(5, generator=score_generator(3, "test"))
    assert torch.equal(first, torch.randn(5, generator=score_generator(3, "test")))  # from its start, every call
    assert not torch.equal(first, torch.randn(5, generator=score_generator(3, "validation")))
    assert not torch.equal(first, torch.randn(5, generator=score_generator(4, "test")))
    assert 0 <= score_seed(3, "validation", 2) < 2**63 and score_seed(3, "validation", 2) != score_seed(3, "test", 2)
    with pytest.raises(ValueError, match="score stream 'train'"):
        score_sequence(3, "train")


def test_cell_streams_depend_on_the_cell_and_generation() -> None:
    def draw(cell: int, generation: int) -> float:
        return float(CellRandom.for_generation(1, cell, generation).numpy.random())

    assert draw(0, 1) == draw(0, 1) and len({draw(0, 1), draw(1, 1), draw(0, 2)}) == 3
    data = CellRandom.for_cell(1, 2, "data").torch.initial_seed()
    assert data == CellRandom.for_generation(1, 2, 0, "data").torch.initial_seed()
