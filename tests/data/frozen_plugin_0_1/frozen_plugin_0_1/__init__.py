"""Roulette selection and a hook logger, written against the evogan 0.1 API (frozen: never edit)."""

import json
from typing import ClassVar

import numpy as np
from pydantic import Field

from evogan import hookimpl
from evogan.api import Options, Selection

EVENTS_FILE = "frozen-0-1-events.jsonl"


class Roulette(Selection):
    """Fitness-proportional selection: softmax over -loss / temperature (roulette wheel, Goldberg 1989)."""

    name: ClassVar[str] = "roulette"
    description: ClassVar[str] = "fitness-proportional selection"

    class Options(Options):
        temperature: float = Field(1.0, gt=0, description="softmax temperature over -loss")

    def select(self, population, k, *, rng: np.random.Generator):
        losses = np.array([individual.fitness.loss for individual in population], dtype=float)
        scores = -(losses - losses.min()) / self.options.temperature
        weights = np.exp(scores)
        picks = rng.choice(len(population), size=k, p=weights / weights.sum())
        return [population[i] for i in picks]


@hookimpl
def evogan_register_selections(register):
    register(Roulette)


def _log(run, **event):
    with open(run.run_dir.path / EVENTS_FILE, "a") as events:
        events.write(json.dumps(event) + "\n")


@hookimpl
def evogan_run_start(run):
    _log(run, hook="run_start", cells=run.cells, generations=run.generations)


@hookimpl
def evogan_exchange(run, cell, generation, received):
    _log(run, hook="exchange", cell=cell, generation=generation, neighbours=sorted(received))


@hookimpl
def evogan_generation_end(run, cell, generation, record):
    _log(run, hook="generation_end", cell=cell, generation=generation)


@hookimpl
def evogan_checkpoint(run, cell, generation, path):
    _log(run, hook="checkpoint", cell=cell, generation=generation)


@hookimpl
def evogan_run_end(run, summary, interrupted):
    _log(run, hook="run_end", interrupted=interrupted)
