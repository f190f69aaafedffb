"""The gloo control plane of one torch elastic round: fixed-size byte tensors, never pickle.

Endpoints and each rank's run tag travel as rows of UTF-8 bytes; JSON documents (scores, checkpoint
generations) as padded byte tensors with their lengths.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from evogan.engine.rundir import RunDirectory, resume_points
from evogan.errors import RunFailure, UserError
from evogan.runtime.environment import WorkerEnv
from evogan.runtime.placement import cells_of

ROW_BYTES = 512  # one endpoint (or run tag) per row of the exchange tensor


def to_rows(texts: Sequence[str]) -> torch.Tensor:
    rows = torch.zeros(len(texts), ROW_BYTES, dtype=torch.uint8)
    for i, text in enumerate(texts):
        data = text.encode()
        if len(data) > ROW_BYTES:
            raise UserError(f"endpoint {text!r} is longer than {ROW_BYTES} bytes")
        if data:
            rows[i, : len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    return rows


def from_row(row: torch.Tensor) -> str:
    data = bytes(row.tolist())
    return data.rstrip(b"\0").decode("utf-8", errors="replace")


def exchange_endpoints(endpoints: Mapping[int, str], tag: str, env: WorkerEnv, cells: int) -> dict[int, str]:
    """All-gather one row per cell (empty when not ours) plus one tag row; no pickle involved."""
    import torch.distributed as dist

    texts = [endpoints.get(c, "") for c in range(cells)] + [tag]
    mine = to_rows(texts)
    gathered = [torch.empty_like(mine) for _ in range(env.world)]
    dist.all_gather(gathered, mine)
    result: dict[int, str] = {}
    for rank, rows in enumerate(gathered):
        theirs = from_row(rows[cells])
        if theirs != tag:
            block = cells_of(rank, env.world, cells)
            raise RunFailure(
                f"rank {rank} (cells {block.start}-{block.stop - 1}) runs {theirs}, rank {env.rank} "
                f"runs {tag}: every node must use the same --run-dir name and recipe"
            )
        for cell in cells_of(rank, env.world, cells):
            result[cell] = from_row(rows[cell])
    return result


def gather_json(value: Any, world: int) -> list[Any]:
    """All-gather a JSON document from every rank as padded UTF-8 bytes."""
    import torch.distributed as dist

    data = json.dumps(value, default=float).encode()
    size = torch.tensor([len(data)], dtype=torch.int64)
    sizes = [torch.empty_like(size) for _ in range(world)]
    dist.all_gather(sizes, size)
    longest = int(max(s.item() for s in sizes))
    mine = torch.zeros(longest, dtype=torch.uint8)
    if data:
        mine[: len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    out = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(out, mine)
    return [json.loads(bytes(t[: int(n.item())].tolist())) for t, n in zip(out, sizes, strict=True)]


def agree_resume_points(directory: RunDirectory, mine: Sequence[int], world: int) -> dict[int, int] | None:
    """Every rank's valid checkpoint generations meet over gloo, so all cells of the run resume from one
    consistent generation (the newest every cell has), or all start afresh when any cell has none.
    Returns every cell's point (the run starts at the least advanced). A fresh start removes this
    rank's checkpoints: they belong to a timeline the run does not continue."""
    mine_available = {str(c): directory.valid_generations(c) for c in mine}
    available = {int(c): gens for part in gather_json(mine_available, world) for c, gens in part.items()}
    if all(available.values()):
        return resume_points(available)
    for cell in mine:
        directory.discard_checkpoints_after(cell, 0)
    directory.truncate_records({c: 0 for c in mine})
    return None


__all__ = ["ROW_BYTES", "agree_resume_points", "exchange_endpoints", "from_row", "gather_json", "to_rows"]
