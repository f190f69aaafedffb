"""What a worker learns from its environment: torch elastic's variables and the launcher's."""

from __future__ import annotations

import os
from dataclasses import dataclass

from evogan.errors import UserError

RECIPE_ENV = "EVOGAN_RECIPE"  # the recipe as TOML text, set by `evogan run` for its own workers
LAUNCHER_ENV = "EVOGAN_LAUNCHER"  # set by `evogan run`: it coordinates Ctrl-C and shows the output


@dataclass(frozen=True)
class WorkerEnv:
    """What torch elastic tells a worker about itself."""

    rank: int
    world: int
    local_rank: int
    local_world: int
    restart: int
    run_id: str

    @classmethod
    def from_environ(cls) -> WorkerEnv:
        get = os.environ.get
        if "RANK" not in os.environ:
            raise UserError("evogan.start_worker runs under torchrun (or `evogan run --workers N`): RANK is not set")
        return cls(
            rank=int(get("RANK", "0")),
            world=int(get("WORLD_SIZE", "1")),
            local_rank=int(get("LOCAL_RANK", "0")),
            local_world=int(get("LOCAL_WORLD_SIZE", "1")),
            restart=int(get("TORCHELASTIC_RESTART_COUNT", "0")),
            run_id=get("TORCHELASTIC_RUN_ID", ""),
        )


__all__ = ["LAUNCHER_ENV", "RECIPE_ENV", "WorkerEnv"]
