"""Metrics computed as they are read: a score whose objective is wanted now and whose other metrics may
never be.

The mixture ES scores two weight vectors of a cell's ensemble and keeps one: both need the number
:meth:`evogan.api.Problem.objective` reads, only the kept one's other metrics are recorded.
:meth:`evogan.api.Problem.evaluate_lazily` returns a :class:`LazyMetrics`: what the objective reads, known
at once, and a function that completes the rest from the same samples (a GAN keeps the samples' features,
so KID and precision/recall cost nothing for the candidate that is dropped).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping


class LazyMetrics(Mapping[str, float]):
    """A score's metrics, some known, the rest computed on first need.

    ``known`` holds what is computed already (at least what the problem's objective reads); ``rest``, when
    given, returns *every* metric, in the order the records show them, the known ones with the same values
    (it is computed from the same samples, so it is the same numbers :meth:`evogan.api.Problem.evaluate_on`
    would give). It runs at most once: on :meth:`complete`, on iteration or ``len``, or when a key that is
    not known is read (so an objective that reads more than the problem said still gets its values).
    """

    __slots__ = ("_known", "_rest")

    def __init__(self, known: Mapping[str, float], rest: Callable[[], dict[str, float]] | None = None) -> None:
        self._known = dict(known)
        self._rest = rest

    @property
    def pending(self) -> bool:
        """Whether some metrics are still to be computed."""
        return self._rest is not None

    def complete(self) -> dict[str, float]:
        """Every metric, as a new dict (computed at most once)."""
        if self._rest is not None:
            rest, self._rest = self._rest, None
            self._known = dict(rest())
        return dict(self._known)

    def __getitem__(self, key: str) -> float:
        if key not in self._known and self._rest is not None:
            self.complete()
        return self._known[key]

    def __iter__(self) -> Iterator[str]:
        self.complete()
        return iter(self._known)

    def __len__(self) -> int:
        self.complete()
        return len(self._known)

    def __repr__(self) -> str:
        return f"LazyMetrics({self._known!r}{', pending' if self.pending else ''})"


__all__ = ["LazyMetrics"]
