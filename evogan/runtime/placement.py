"""Which worker serves which cells, and on which devices."""

from __future__ import annotations

import torch

from evogan.errors import UserError


def cells_of(rank: int, world: int, cells: int) -> range:
    """Contiguous, row-major blocks: rank ``r`` serves cells ``[r*C//W, (r+1)*C//W)``.

    Blocks keep row neighbours in one process and differ in size by at most one cell.
    """
    if world > cells:
        raise UserError(
            f"{world} workers for {cells} cells: at most one worker per cell (lower --workers, or leave it out: "
            "a recipe's run.workers is cut to the cells)"
        )
    return range(rank * cells // world, (rank + 1) * cells // world)


def workers_for(workers: int, cells: int, nodes: int = 1) -> int:
    """The most of ``workers`` (per node) that ``nodes`` nodes can run on ``cells`` cells, one cell each
    at least; never below one (``cells_of`` refuses the rest)."""
    return max(1, min(workers, cells // nodes))


def owner_of(cell: int, world: int, cells: int) -> int:
    return next(r for r in range(world) if cell in cells_of(r, world, cells))


def check_devices(device: str, local_workers: int) -> None:
    """``cuda`` means one GPU per worker; ``auto`` shares GPUs round-robin by local rank."""
    if device != "cuda":
        return
    visible = torch.cuda.device_count()
    if visible == 0:
        raise UserError("run.device: cuda was asked for, but no CUDA device is visible")
    if local_workers > visible:
        raise UserError(
            f"run.device is cuda: {local_workers} workers on this machine need {local_workers} GPUs, "
            f'{visible} visible (use device = "auto" to share GPUs)'
        )


__all__ = ["cells_of", "check_devices", "owner_of", "workers_for"]
