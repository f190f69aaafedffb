"""One diverging cell must not take the grid down: finding individuals whose numbers turned non-finite in
training, putting a finite copy in their place, and what the records and the summary say about it.

A GAN that diverges (or an fp16 overflow) leaves NaN or Inf in its weights; a neighbour that trains
against such a model gets NaN losses in turn, and within a few generations every cell of the grid is
lost. So the boundaries hold: after a cell's variation each individual it varied is checked
(:meth:`evogan.api.Problem.finite`, one pass over its tensors) and a non-finite one is replaced, in this
order of preference, by

1. its own copy from before the generation (with selection off, where training changes the population
   in place, the cell keeps one),
2. the cell's best individual of that role from before the generation (with selection on, the
   incumbents training never touches),
3. the best of the neighbours' copies the cell holds (never non-finite: the codec drops such messages).

The copy's learning rate is multiplied by ``population.restore_lr``: a step size that diverged once
diverges again. Where no finite copy exists (a lone cell whose every individual diverged) the individual
stays as it is and the cell is reported diverged at the end.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from evogan.api import Problem, Role
    from evogan.individual import Individual

OWN = "own"  # restored_from: the cell's own copy from before the generation


def snapshot(individuals: Sequence[Individual], problem: Problem) -> list[Individual]:
    """Copies of ``individuals`` with their fitness, to restore from after a generation that trains
    them in place."""
    copies = []
    for individual in individuals:
        copy = individual.clone(problem.make_optimizer)
        if individual.fitness.valid:
            copy.fitness.values = individual.fitness.values
        copies.append(copy)
    return copies


def restore(
    problem: Problem,
    cell: int,
    varied: Mapping[Role, list[Individual]],
    before: Mapping[Role, Sequence[Individual]],
    neighbours: Mapping[int, Mapping[Role, Individual]],
    *,
    aligned: bool,
    lr_factor: float,
) -> list[str | None]:
    """Replace, in place in ``varied``, each individual whose numbers are not all finite; return where
    each replacement came from (``own``, ``cell K``), None for one that found no finite copy.

    :param before: per role, the cell's own individuals from before the generation.
    :param aligned: ``before[role][i]`` is the copy of ``varied[role][i]`` (selection off).
    :param neighbours: neighbour cell -> its best individual of each role, as this cell holds them.
    """
    sources: list[str | None] = []
    for role, individuals in varied.items():
        for slot, individual in enumerate(individuals):
            if problem.finite(individual):
                continue
            candidates = _candidates(role, slot, before.get(role, ()), neighbours, aligned=aligned)
            found = next(((name, c) for name, c in candidates if problem.finite(c)), None)
            if found is None:
                sources.append(None)
                continue
            name, source = found
            copy = source.clone(problem.make_optimizer)
            copy.origin, copy.uid = cell, individual.uid
            if "lr" in copy.hyper:
                copy.set_hyper({**copy.hyper, "lr": copy.hyper["lr"] * lr_factor})
            individuals[slot] = copy
            sources.append(name)
    return sources


def _candidates(
    role: Role,
    slot: int,
    before: Sequence[Individual],
    neighbours: Mapping[int, Mapping[Role, Individual]],
    *,
    aligned: bool,
) -> list[tuple[str, Individual]]:
    """The copies to restore ``role``'s ``slot`` from, most preferred first."""
    own = [(OWN, before[slot])] if aligned and slot < len(before) else []
    own += [(OWN, c) for c in sorted(before, key=_loss)]
    foreign = sorted(((f"cell {peer}", slots[role]) for peer, slots in neighbours.items()), key=lambda p: _loss(p[1]))
    return own + foreign


def _loss(individual: Individual) -> float:
    return individual.fitness.loss if individual.fitness.valid else float("inf")


class DivergenceTally:
    """The divergence summary folded one record at a time (the run's end reads the records once)."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.last: dict[int, Mapping[str, Any]] = {}

    def add(self, record: Mapping[str, Any]) -> None:
        cell = int(record["cell"])
        if record.get("diverged"):
            self.counts[str(cell)] = self.counts.get(str(cell), 0) + 1
        if cell not in self.last or record["generation"] >= self.last[cell]["generation"]:
            self.last[cell] = record

    def summary(self) -> dict[str, Any]:
        at_end = sorted(cell for cell, record in self.last.items() if record.get("diverged"))
        return {"diverged": dict(sorted(self.counts.items(), key=lambda item: int(item[0]))), "diverged_at_end": at_end}


def divergence_summary(records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """``diverged``: cell -> generations in which it diverged; ``diverged_at_end``: the cells that
    diverged in their last generation (their models are restored copies, but training no longer keeps
    them finite)."""
    tally = DivergenceTally()
    for record in records:
        tally.add(record)
    return tally.summary()


def failure_line(summary: Mapping[str, Any]) -> str | None:
    """The one line a run ends with when every cell diverged in its last generation, else None."""
    at_end, cells = summary.get("diverged_at_end") or [], summary.get("cells") or {}
    if not cells or len(at_end) < len(cells):
        return None
    return (
        f"every cell ({len(cells)}) diverged in its last generation (non-finite numbers after training; "
        "the checkpoints hold the last finite copies): lower the learning rate or check the problem"
    )


__all__ = ["OWN", "DivergenceTally", "divergence_summary", "failure_line", "restore", "snapshot"]
