"""WGAN's critic schedule over a whole run (Arjovsky, Chintala and Bottou 2017; Lipizzaner's
``lipizzaner_wgan`` trainer): ``steps`` critic steps before each generator step, ``burst`` before each of
the first ``first`` generator steps and before every ``every``-th one.

The schedule is a pure function of the run-wide batch index, so it needs no counter in checkpoints and
resumes exactly: generator step ``g`` (from 0) comes at the batch that follows its block of critic steps.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CriticSchedule:
    steps: int = 5
    burst: int = 100
    first: int = 25
    every: int = 500

    def _bursts_upto(self, g: int) -> int:
        """How many of the generator steps ``0..g`` follow a burst."""
        early = min(g + 1, self.first)
        if self.every == 0 or g < self.first:
            return early

        def multiples(x: int) -> int:  # multiples of `every` in 0..x
            return x // self.every + 1 if x >= 0 else 0

        return early + multiples(g) - multiples(self.first - 1)

    def block_end(self, g: int) -> int:
        """Critic steps done before generator step ``g`` trains (the batch index it trains at)."""
        return (g + 1) * self.steps + (self.burst - self.steps) * self._bursts_upto(g)

    def generator_trains_at(self, batch: int) -> bool:
        """Whether a generator step comes at run-wide batch ``batch`` (before that batch's critic step)."""
        low, high = 0, batch  # block_end(batch) > batch: every block holds at least one step
        while low < high:
            middle = (low + high) // 2
            if self.block_end(middle) < batch:
                low = middle + 1
            else:
                high = middle
        return self.block_end(low) == batch


__all__ = ["CriticSchedule"]
