"""All cells in one process: messages are kept in memory, through the same envelope code path."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from pydantic import Field

from evogan.api import Options, Transport


class InProcessTransport(Transport):
    """Keeps the last few generations of every cell's messages in memory.

    Single-process runs train cells one after another, so a neighbour's message for the wanted
    generation is always there; nothing ever waits.
    """

    name: ClassVar[str] = "inproc"
    description: ClassVar[str] = "all cells in one process; messages kept in memory (the reference mode)"

    class Options(Options):
        keep: int = Field(3, ge=1, description="generations of messages kept per cell")

    def __init__(self, options: Options) -> None:
        super().__init__(options)
        self._messages: dict[int, dict[int, list[bytes]]] = {}

    def publish(self, cell: int, frames: Sequence[bytes | memoryview]) -> None:
        from evogan.transport.envelope import parse_header

        header = parse_header(frames, max_bytes=1 << 62)
        by_generation = self._messages.setdefault(cell, {})
        by_generation[header["generation"]] = [bytes(frame) for frame in frames]
        for old in sorted(by_generation)[: -self.options.keep]:
            del by_generation[old]

    def gather(
        self, cell: int, peers: Sequence[int], generation: int, *, max_staleness: int, timeout: float
    ) -> dict[int, list[bytes | memoryview]]:
        found: dict[int, list[bytes | memoryview]] = {}
        for peer in peers:
            by_generation = self._messages.get(peer)
            if not by_generation:
                continue
            if generation in by_generation:
                found[peer] = by_generation[generation]
            else:
                older = [g for g in by_generation if g <= generation]
                found[peer] = by_generation[max(older) if older else min(by_generation)]
        return found
