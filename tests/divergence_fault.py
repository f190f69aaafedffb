"""A plugin for tests/test_divergence.py, loaded in every process of a run through ``EVOGAN_PLUGINS``:
problem ``gan_with_fault``, the GAN problem whose training leaves NaN or Inf in chosen cells' networks,
as a diverging GAN or an fp16 overflow would. ``EVOGAN_NONFINITE_FAULT`` (JSON) says where: ``cells`` (list),
``generations`` (list, or ``"all"``), ``role`` and ``value`` (``"nan"``, ``"inf"``)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

import torch
from evogan_gan.problem import GanProblem

from evogan import hookimpl
from evogan.api import Variation

FAULT_ENV = "EVOGAN_NONFINITE_FAULT"


def _inject(job: Variation) -> None:
    fault: dict[str, Any] = json.loads(os.environ.get(FAULT_ENV, "{}"))
    generations = fault.get("generations", [])
    if job.cell_index not in fault.get("cells", []) or (generations != "all" and job.generation not in generations):
        return
    with torch.no_grad():
        for individual in job.members[fault.get("role", "generator")]:
            next(individual.network.parameters()).fill_(float(fault.get("value", "nan")))


class GanWithFault(GanProblem):
    name: ClassVar[str] = "gan_with_fault"
    description: ClassVar[str] = "the GAN problem, with NaN or Inf written into chosen cells after training"

    def vary(self, job: Variation) -> Iterator[int]:
        yield from super().vary(job)
        _inject(job)

    def vary_together(self, jobs: Sequence[Variation]) -> None:
        super().vary_together(jobs)
        for job in jobs:
            _inject(job)


@hookimpl
def evogan_register_problems(register: Any) -> None:
    register(GanWithFault)
