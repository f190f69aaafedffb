"""``evogan export``: a mixture ensemble as one ``torch.export`` file that samples it without evogan.

The problem supplies the module (:meth:`evogan.api.Problem.sampler`: generators and weights baked in,
batch-first inputs); this module exports it with the batch size left free and writes it atomically,
with what the inputs are in the archive's ``evogan.json``::

    extra = {"evogan.json": ""}
    sampler = torch.export.load("mixture.pt2", extra_files=extra).module()
    info = json.loads(extra["evogan.json"])     # inputs: name, per-sample shape, how to draw
    x = sampler(torch.randn(64, *info["inputs"][0]["shape"]), torch.rand(64))

TorchScript would carry a sampling method, but torch deprecates it (every ``torch.jit`` call warns).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from evogan.engine.rundir import atomic_write
from evogan.errors import RunFailure, UserError

if TYPE_CHECKING:
    from evogan.trained import Mixture, TrainedRun

METADATA_FILE = "evogan.json"
FORMAT = 1


def export_mixture(run: TrainedRun, mixture: Mixture, path: Path) -> Path:
    """Export ``mixture`` to ``path``; returns it. UserError when ``path`` cannot be written."""
    if path.is_dir():
        raise UserError(f"{path}: is a directory; give the file to write")
    sampler = run.problem.sampler(mixture.networks, mixture.weights)
    example = mixture.sampler_inputs(2)
    batch = torch.export.Dim("samples", min=1)
    try:
        with torch.no_grad():
            program = torch.export.export(
                sampler.module, example, dynamic_shapes=tuple({0: batch} for _ in example)
            )
    except Exception as exc:  # torch raises many kinds for a network it cannot trace
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise RunFailure(
            f"{run.path}: cell {mixture.cell}'s mixture cannot be exported ({type(exc).__name__}: {first})"
        ) from None
    metadata: dict[str, Any] = {
        "format": FORMAT,
        "run": run.run_dir.run_id,
        "recipe": run.recipe.digest,
        "cell": mixture.cell,
        "members": mixture.members,
        "weights": mixture.weights,
        "generation": run.cells[mixture.cell].generation,
        "inputs": sampler.inputs,
        "problem": run.problem.describe(),
    }
    try:
        atomic_write(
            path,
            lambda handle: torch.export.save(program, handle, extra_files={METADATA_FILE: json.dumps(metadata)}),
        )
    except OSError as exc:
        raise UserError(f"{path}: cannot write: {exc.strerror or exc}") from None
    return path


__all__ = ["METADATA_FILE", "export_mixture"]
