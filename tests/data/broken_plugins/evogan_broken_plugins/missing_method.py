"""Registers a working topology, then a selection that leaves out ``select``: the whole plugin is refused
(the topology too), since half a plugin is not what its author tested."""

from __future__ import annotations

from typing import ClassVar

from evogan import hookimpl
from evogan.api import ComponentOptions, Selection, Topology
from evogan.hookspecs import Register


class Pair(Topology[ComponentOptions]):
    """Two cells, each the other's neighbour."""

    name: ClassVar[str] = "broken_pair"

    @property
    def cells(self) -> int:
        return 2

    def neighbours(self, cell: int) -> tuple[int, ...]:
        return (1 - cell,)


class Half(Selection[ComponentOptions]):  # no select(): the failure under test
    """A selection without its one required method."""

    name: ClassVar[str] = "half"


@hookimpl
def evogan_register_topologies(register: Register) -> None:
    register(Pair)


@hookimpl
def evogan_register_selections(register: Register) -> None:
    register(Half)
