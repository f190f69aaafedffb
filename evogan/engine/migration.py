"""Migration between cells that otherwise train alone: every ``population.migration_every`` generations a
cell takes its best neighbour's pair when that neighbour's individual of the scored role (a GAN's
generator) scores better on the validation stream than its own.

Independent GANs on a grid keep the good generators they reach but never share them; coevolution shares
them every step and, on MNIST, spoils them (benchmarks/RESULTS.md, issue 35). Migration is the coarse
middle: cells train their own pair and only a clearly better neighbour's pair (its best of each role, so
the discriminator knows the generator it comes with) moves in. The score is the problem's validation
objective on the run's fixed validation noise, the stream the mixture is chosen on; the test stream stays
untouched.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from evogan.rng import score_generator

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    import torch

    from evogan.api import Problem, Role
    from evogan.individual import Individual
    from evogan.rng import CellRandom


class _Seeded(Protocol):
    @property
    def seed(self) -> int: ...


class Cell(Protocol):
    """What migration needs of a cell (:class:`evogan.engine.cell.Cell` has it; named here as a protocol
    because the cell calls this module)."""

    index: int
    foreign: dict[int, dict[Role, Individual]]

    @property
    def roles(self) -> Sequence[Role]: ...
    @property
    def problem(self) -> Problem: ...
    @property
    def settings(self) -> _Seeded: ...
    def best(self, role: Role) -> Individual: ...
    def population(self, role: Role) -> list[Individual]: ...
    def evaluated(self, individual: Individual) -> torch.nn.Module: ...
    @property
    def evaluate(self) -> Callable[..., None]: ...  # Cell.evaluate


def validation_score(cell: Cell, individual: Individual) -> float:
    """The problem's objective (lower is better) of ``individual`` alone on the validation stream."""
    problem = cell.problem
    metrics = problem.evaluate_on(
        [cell.evaluated(individual)],
        [1.0],
        stream="validation",
        generator=score_generator(cell.settings.seed, "validation"),
    )
    return float(problem.objective(metrics))


def migrate(cell: Cell, pool: Mapping[Role, Sequence[Individual]], data: Any, rnd: CellRandom) -> int | None:
    """Move the best-scoring neighbour's pair into ``cell`` in place of its worst individual of each role
    when that neighbour beats the cell's own best; re-score the newcomers' fitness against ``pool`` on the
    generation's batch. Returns the neighbour's index, or None when the cell keeps its own."""
    first = cell.roles[0]
    if not cell.foreign:
        return None
    own = validation_score(cell, cell.best(first))
    scores = {peer: validation_score(cell, slots[first]) for peer, slots in sorted(cell.foreign.items())}
    peer = min(scores, key=lambda p: scores[p])
    if scores[peer] >= own:
        return None
    for role in cell.roles:
        local = cell.population(role)
        worst = max(range(len(local)), key=lambda i: local[i].fitness.loss)
        incoming = cell.foreign[peer][role].clone(cell.problem.make_optimizer)
        incoming.origin, incoming.uid = cell.index, local[worst].uid
        local[worst] = incoming
    second = cell.roles[1]
    cell.evaluate(cell.population(first), pool[second], data, rnd, score=(first,))
    cell.evaluate(pool[first], cell.population(second), data, rnd, score=(second,))
    return peer


__all__ = ["migrate", "validation_score"]
