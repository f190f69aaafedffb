from __future__ import annotations

import numpy as np
import torch

from evogan.builtin.mutation import GaussianLearningRate, LogNormalLearningRate
from evogan.builtin.selection import Best, Tournament
from evogan.individual import Individual


def population(losses: list[float]) -> list[Individual]:
    individuals = []
    for i, loss in enumerate(losses):
        network = torch.nn.Linear(1, 1)
        individual = Individual(
            "generator",
            network,
            torch.optim.Adam(network.parameters()),
            {"lr": 1e-3},
            origin=0,
            uid=f"0/G{i}",
        )
        individual.fitness.values = (loss,)
        individuals.append(individual)
    return individuals


def test_tournament_is_reproducible_and_leaves_input_alone() -> None:
    pop = population([0.5, 0.1, 0.9, 0.3])
    before = [ind.uid for ind in pop]
    tournament = Tournament(Tournament.Options(size=2))
    first = tournament.select(pop, 10, rng=np.random.default_rng(3))
    again = tournament.select(pop, 10, rng=np.random.default_rng(3))
    assert len(first) == 10 and [i.uid for i in first] == [i.uid for i in again]
    assert [ind.uid for ind in pop] == before
    assert "0/G2" not in {i.uid for i in first}  # the worst can never win a 2-tournament without replacement


def test_full_tournament_always_picks_the_best() -> None:
    pop = population([0.5, 0.1, 0.9])
    winners = Tournament(Tournament.Options(size=3)).select(pop, 5, rng=np.random.default_rng(0))
    assert {w.uid for w in winners} == {"0/G1"}
    assert [w.uid for w in Best(Best.Options()).select(pop, 2, rng=np.random.default_rng(0))] == [
        "0/G1",
        "0/G0",
    ]


def test_gaussian_lr_mutation_follows_lipizzaner() -> None:
    mutation = GaussianLearningRate(GaussianLearningRate.Options(probability=0.5, alpha=1e-4))
    rng = np.random.default_rng(0)
    hyper = {"lr": 2e-4, "lr0": 2e-4}
    deltas = []
    for _ in range(20_000):
        new = mutation.mutate(hyper, rng=rng)
        deltas.append(new["lr"] - hyper["lr"])
    deltas = np.array(deltas)
    assert hyper == {"lr": 2e-4, "lr0": 2e-4}  # input untouched
    assert 0.45 < (deltas != 0).mean() < 0.55
    applied = deltas[deltas != 0]
    # delta ~ N(-lr0/10, lr0) scaled by alpha: mean -2e-9, sd 2e-8
    assert abs(applied.mean() + 2e-9) < 1e-9 and abs(applied.std() - 2e-8) < 2e-9


def test_lognormal_mutation_stays_in_bounds() -> None:
    mutation = LogNormalLearningRate(LogNormalLearningRate.Options(probability=1.0, sigma=2.0, max_lr=1e-3))
    rng = np.random.default_rng(1)
    values = [mutation.mutate({"lr": 5e-4}, rng=rng)["lr"] for _ in range(200)]
    assert min(values) >= 1e-6 and max(values) <= 1e-3
