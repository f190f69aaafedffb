"""evogan: a plugin-based spatial coevolution engine for robust, scalable GAN training."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from evogan import moved
from evogan.hookspecs import hookimpl
from evogan.training import run  # light: torch is imported when a run starts
from evogan.version import __version__

moved.install()  # the GAN problem's old module names (evogan.sparse, evogan.builtin.gan) still import

if TYPE_CHECKING:
    from evogan.trained import TrainedRun


def load(
    path: Path | str, *, device: str | None = None, disable: tuple[str, ...] = (), generation: int | None = None
) -> TrainedRun:
    """A finished (or stopped) run's cells from their checkpoints (the newest, or every cell's at
    ``generation``): see :func:`evogan.trained.load`.

    Defined here, importing torch only when called, so ``import evogan`` stays light."""
    from evogan.trained import load as load_run

    return load_run(path, device=device, disable=disable, generation=generation)


__all__ = ["__version__", "hookimpl", "load", "run"]
