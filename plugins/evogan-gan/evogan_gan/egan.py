"""E-GAN's variation of the generator (Wang, Xu, Yao and Tao, "Evolutionary Generative Adversarial
Networks", IEEE TEVC 2019), the GAN problem's ``[problem.egan]``.

Each generator step makes one child per loss of ``losses`` (E-GAN's mutations): every child starts from the
parent's weights, buffers and optimizer state, sees the same noise and the same augmentation draws, and takes
one optimizer step with its own generator loss against the same discriminator(s). Each child is scored on one
fresh noise batch, the same for all: ``F = F_q + gamma * F_d``, with quality ``F_q = E_z[D(G(z))]`` (D's
probability; several weighted discriminators: the weighted mean) and diversity
``F_d = -log ||grad_D(-E_x[log D(x)] - E_z[log(1 - D(G(z)))])||`` (the norm of the gradient of D's BCE loss
with respect to D's parameters, on the step's real batch and the child's fakes; several discriminators: of the
weighted sum of their losses, with respect to all their parameters). The child with the highest ``F`` (the
first among equals) takes the parent's place, weights and optimizer state.

One loss is the plain step with that loss: no fitness, nothing more drawn. The fitness forwards run in eval
mode, as the problem's own fitness does, so they change no buffer of the discriminators.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import Field, field_validator

from evogan.adversarial.contracts import Loss
from evogan.api import ComponentOptions
from evogan.individual import Individual
from evogan.lazy import lazy
from evogan.recipe import component_names_field

if TYPE_CHECKING:
    import torch
    import torch.nn.functional as F
    from torch import nn

    from evogan.precision import Precision
else:  # imported on first use: `evogan validate` reads the options without torch
    torch = lazy("torch", globals())
    F = lazy("torch.nn.functional", globals())

WINS = "egan_wins"  # the generator's extra: how many of its steps each loss's child won this generation


class EganOptions(ComponentOptions):
    """E-GAN's variation of each generator step (Wang et al. 2019): one child per loss, the fittest
    child replaces the parent. Leave the table out for the plain step."""

    losses: tuple[str, ...] = component_names_field(
        "loss",
        ("minimax", "heuristic", "mse"),
        "the mutations: a generator loss per child, by loss name (E-GAN: minimax, heuristic, least squares)",
        min_length=1,
    )
    gamma: float = Field(
        0.0,
        ge=0,
        description="weight of the diversity fitness F_d in F = F_q + gamma F_d (0: quality alone, and no "
        "gradient of D is computed; the authors' code used 0.1 (PyTorch) or about 2 (toy, Theano))",
    )

    @field_validator("losses")
    @classmethod
    def _distinct(cls, losses: tuple[str, ...]) -> tuple[str, ...]:
        twice = sorted({name for name in losses if losses.count(name) > 1})
        if twice:
            raise ValueError(f"each loss at most once ({', '.join(twice)} twice)")
        return losses


@dataclass
class Snapshot:
    """A generator's weights, buffers and optimizer state at one moment, to start a child from or keep."""

    parameters: list[torch.Tensor]
    buffers: list[torch.Tensor]
    optimizer: dict[str, Any]

    @classmethod
    def of(cls, individual: Individual) -> Snapshot:
        network = individual.network
        return cls(
            [p.detach().clone() for p in network.parameters()],
            [b.detach().clone() for b in network.buffers()],
            copy.deepcopy(individual.trainer.state_dict()),
        )

    def restore(self, individual: Individual) -> None:
        network = individual.network
        with torch.no_grad():
            for target, saved in zip(network.parameters(), self.parameters, strict=True):
                target.copy_(saved)
            for buffer, saved in zip(network.buffers(), self.buffers, strict=True):
                buffer.copy_(saved)
        # a copy: loading keeps the state's tensors, which the next step would change in place
        individual.trainer.load_state_dict(copy.deepcopy(self.optimizer))


class Egan:
    """The variation a GAN problem runs in place of its plain generator step when ``[problem.egan]`` is set."""

    def __init__(self, options: EganOptions, losses: Sequence[Loss[Any]]) -> None:
        self.options, self.losses = options, list(losses)

    @property
    def names(self) -> tuple[str, ...]:
        return self.options.losses

    def wins_layout(self) -> dict[str, tuple[torch.dtype, tuple[int, ...]]]:
        return {WINS: (torch.int64, (len(self.losses),))}

    def begin_generation(self, generators: Sequence[Individual]) -> None:
        """Start each generator's tally of wins afresh (the records report one generation's mix)."""
        for generator in generators:
            generator.extra[WINS] = torch.zeros(len(self.losses), dtype=torch.int64)

    def metrics(self, extra: Mapping[str, torch.Tensor]) -> dict[str, float]:
        """Each loss's share of the generator's steps this generation (0 where it has not stepped)."""
        wins = extra.get(WINS)
        total = int(wins.sum()) if wins is not None else 0
        return {
            f"egan_{name}": (int(wins[i]) / total if wins is not None and total else 0.0)
            for i, name in enumerate(self.names)
        }

    def step(
        self,
        attacker: Individual,
        update: Callable[[Loss[Any]], torch.Tensor],
        defenders: Sequence[tuple[nn.Module, float]],
        real: torch.Tensor,
        noise: Callable[[int], torch.Tensor],
        precision: Precision,
        *,
        generator: torch.Generator,
    ) -> torch.Tensor:
        """One E-GAN step of ``attacker``; ``update(loss)`` is the problem's plain step with ``loss`` on the
        step's noise (it returns the detached logits of its forward). Returns the first child's logits:
        the parent's forward, as the plain step's."""
        if len(self.losses) == 1:
            logits = update(self.losses[0])
            self._won(attacker, 0)
            return logits
        z_fit = noise(real.shape[0])  # drawn once: every child is scored on the same noise
        scorer = Fitness(defenders, real, self.options.gamma, precision)
        parent, start = Snapshot.of(attacker), generator.get_state()
        best, best_fitness, kept, first = 0, -math.inf, None, None
        for index, loss in enumerate(self.losses):
            if index:
                parent.restore(attacker)
                generator.set_state(start)  # the same augmentation draws (and random losses' draws)
            logits = update(loss)
            first = logits if first is None else first
            fitness = scorer(attacker.network, z_fit)
            if fitness > best_fitness:  # NaN never wins
                best, best_fitness = index, fitness
                last = index == len(self.losses) - 1
                kept = None if last else Snapshot.of(attacker)  # the last child is in place already
        if kept is not None:
            kept.restore(attacker)
        self._won(attacker, best)
        assert first is not None
        return first

    def _won(self, attacker: Individual, index: int) -> None:
        wins = attacker.extra.get(WINS)
        if wins is None:  # a generator made outside a generation (a test's): start its tally here
            wins = attacker.extra[WINS] = torch.zeros(len(self.losses), dtype=torch.int64)
        wins[index] += 1


class Fitness:
    """E-GAN's ``F = F_q + gamma F_d`` of generators against fixed discriminators, on one real batch; the
    real batch's part of D's gradient is computed once, at the first call that needs it."""

    def __init__(
        self, defenders: Sequence[tuple[nn.Module, float]], real: torch.Tensor, gamma: float, precision: Precision
    ) -> None:
        self.networks = [network for network, _ in defenders]
        self.weights = [weight for _, weight in defenders]
        self.real, self.gamma, self.precision = real, gamma, precision
        # one entry per parameter, even if a network is faced twice
        unique = {id(p): p for network in self.networks for p in network.parameters()}
        self.parameters = list(unique.values())
        self._real_grads: list[torch.Tensor] | None = None

    def __call__(self, network: nn.Module, z: torch.Tensor) -> float:
        nets = [network, *self.networks]
        modes = [n.training for n in nets]
        for n in nets:
            n.eval()
        try:
            with torch.no_grad(), self.precision.autocast():
                fake = network(z)
            logits = self._logits(fake)
            probabilities = [float(torch.sigmoid(x.detach()).mean()) for x in logits]
            value = sum(w * p for w, p in zip(self.weights, probabilities, strict=True)) / sum(self.weights)
            if self.gamma:
                value += self.gamma * self._diversity(self._bce(logits, torch.zeros_like))
        finally:
            for n, mode in zip(nets, modes, strict=True):
                n.train(mode)
        return -math.inf if math.isnan(value) else value

    def _logits(self, x: torch.Tensor) -> list[torch.Tensor]:
        # a graph through D only where F_d needs D's gradient: with gamma 0 the forwards are plain
        with torch.set_grad_enabled(self.gamma > 0), self.precision.autocast():
            return [network(x).float() for network in self.networks]

    def _bce(self, logits: Sequence[torch.Tensor], target: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        """The weighted sum of the discriminators' BCE losses against ``target`` labels."""
        total = torch.zeros((), device=logits[0].device)
        for weight, x in zip(self.weights, logits, strict=True):
            total = total + weight * F.binary_cross_entropy_with_logits(x, target(x))
        return total

    def _grads(self, loss: torch.Tensor) -> list[torch.Tensor]:
        found = torch.autograd.grad(loss, self.parameters, allow_unused=True)
        return [torch.zeros_like(p) if g is None else g for p, g in zip(self.parameters, found, strict=True)]

    def _diversity(self, fake_loss: torch.Tensor) -> float:
        """``-log ||g_real + g_fake||``, the gradient of D's whole BCE loss; its real half computed once."""
        if self._real_grads is None:
            self._real_grads = self._grads(self._bce(self._logits(self.real), torch.ones_like))
        squares = torch.zeros((), device=self.real.device)
        for real_grad, fake_grad in zip(self._real_grads, self._grads(fake_loss), strict=True):
            squares = squares + (real_grad + fake_grad).float().pow(2).sum()
        norm_squared = float(squares)
        return -0.5 * math.log(norm_squared) if norm_squared > 0 else math.inf


__all__ = ["Egan", "EganOptions", "Fitness", "Snapshot"]
