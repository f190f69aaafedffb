"""All cells in one process: messages are kept in memory, through the same envelope code path."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from pydantic import Field

from evogan.api import ComponentOptions, Transport


def pick(held: dict[tuple[int, int], list], wanted: tuple[int, int]) -> tuple[int, int] | None:
    """Exactly ``wanted`` ``(generation, substep)``; else the newest older; else the oldest newer."""
    if not held:
        return None
    if wanted in held:
        return wanted
    older = [k for k in held if k <= wanted]
    return max(older) if older else min(held)


def forget_old(held: dict[tuple[int, int], list], keep: int) -> None:
    """Keep the messages of the newest ``keep`` generations, and of those sent inside a generation
    (substep > 0) only the newest ``keep``: a long generation exchanged every few batches would
    otherwise hold hundreds of models per neighbour. Lockstep needs one point back at most."""
    newest = max(held)[0]
    inside = sorted(k for k in held if k[1])
    for old in [k for k in held if k[0] <= newest - keep] + inside[:-keep]:
        held.pop(old, None)


class InProcessTransport(Transport["InProcessTransport.Options"]):
    """Keeps the last few generations of every cell's messages in memory.

    Single-process runs train cells one after another (or in lockstep turns when they exchange inside a
    generation), so a neighbour's message for the wanted generation is always there; nothing ever waits.
    """

    name: ClassVar[str] = "inproc"
    description: ClassVar[str] = "all cells in one process; messages kept in memory (the reference mode)"

    class Options(ComponentOptions):
        keep: int = Field(
            3, ge=1, description="generations of messages kept per cell (and messages from inside generations)"
        )

    def __init__(self, options: InProcessTransport.Options) -> None:
        super().__init__(options)
        self._messages: dict[int, dict[tuple[int, int], list[bytes]]] = {}

    def publish(self, cell: int, frames: Sequence[bytes | memoryview]) -> None:
        from evogan.transport.envelope import parse_header, stamp

        header = parse_header(frames, max_bytes=1 << 62)
        held = self._messages.setdefault(cell, {})
        held[stamp(header)] = [bytes(frame) for frame in frames]
        forget_old(held, self.options.keep)

    def gather(
        self,
        cell: int,
        peers: Sequence[int],
        generation: int,
        *,
        max_staleness: int,
        timeout: float,
        substep: int = 0,
    ) -> dict[int, list[bytes | memoryview]]:
        found: dict[int, list[bytes | memoryview]] = {}
        for peer in peers:
            held = self._messages.get(peer, {})
            chosen = pick(held, (generation, substep))
            if chosen is not None:
                found[peer] = list(held[chosen])
        return found
