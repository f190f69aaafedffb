"""The GAN problem's all-vs-all fitness as one batched computation (vectorised cells).

Instead of one discriminator forward per (generator, discriminator) pair, the stacked generators run once on the
shared noise and the stacked discriminators once on all fakes. In eval mode each sample is computed alone, so every
row matches the looped path up to rounding. Every row reads the same input, which is never copied per row; that is
why one evaluation is batched at a time and not all cells of a process (each critic row would need its own copy of
its cell's fakes: benchmarks/RESULTS.md, 'Fitness as one batched evaluation'). Masks are already in sparse weights.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from torch.func import functional_call, vmap

from evogan.api import ROLES, Role, StackedFitness
from evogan_gan.modes import evaluating
from evogan_gan.stacked import Forward, GanSteps, Params, linear_plan, run_plan, signature

# Whether a device runs the networks' stacked rows as one forward. Not on the CPU: there the looped products are
# already bound by arithmetic and memory, and the stacked rows were slower, while each network once on all fakes is
# at parity (benchmarks/RESULTS.md, 'Fitness as one batched evaluation'). On a GPU one stacked forward replaces many
# small launches.
STACK_ROWS = {"cpu": False}
# Rows x samples per forward: on the CPU, activations that stay in the cache; on a GPU, pieces that
# keep it busy.
FITNESS_SAMPLES = {"cpu": 1 << 10, "cuda": 1 << 16}
FITNESS_ELEMENTS = 1 << 26  # and rows x samples x values per sample, which bounds memory on any device


_signatures: weakref.WeakKeyDictionary[nn.Module, tuple[object, ...]] = weakref.WeakKeyDictionary()


def architecture(network: nn.Module) -> tuple[object, ...]:
    """:func:`~evogan_gan.stacked.signature`, once per network: a network keeps its architecture,
    and each evaluation asks again (computing it took about a tenth of a toy evaluation's time)."""
    found = _signatures.get(network)
    if found is None:
        found = _signatures[network] = signature(network)
    return found


def fitness_unstackable(role: str, networks: Sequence[nn.Module]) -> str:
    """Why these networks cannot be evaluated as one stack ('' when they can). Eval mode has no random
    draws (dropout is off) and updates no buffers, so any architecture stacks if all networks share it."""
    if not networks:
        return f"no {role} networks to stack"
    shape = architecture(networks[0])
    if any(architecture(other) != shape for other in networks[1:]):
        return f"the {role} networks differ in architecture"
    return ""


def stacked_state(networks: Sequence[nn.Module]) -> tuple[Params, Params]:
    """The networks' parameters and buffers, each name's tensors stacked along a new first dimension."""
    named = [dict(network.named_parameters()) for network in networks]
    buffers = [dict(network.named_buffers()) for network in networks]
    return (
        {name: torch.stack([n[name].detach() for n in named]) for name in named[0]},
        {name: torch.stack([b[name] for b in buffers]) for name in buffers[0]},
    )


# Per-sample modules that act on each value alone: applied to the stacked activations in any layout.
def shared_forward(template: nn.Module, buffered: bool) -> Forward:
    """``forward(params, buffers, x)``: every stacked row's network on the same input ``x``."""
    plan = None if buffered else linear_plan(template)
    if plan is not None:
        return lambda params, _, x: run_plan(plan, params, x, shared=True)
    return vmap(lambda params, buffers, x: functional_call(template, (params, buffers), (x,)), in_dims=(0, 0, None))


def run_stacked(networks: Sequence[nn.Module], x: torch.Tensor, values_per_sample: int) -> torch.Tensor:
    """Every network on ``x`` (samples, ...), in chunks of samples: (networks, samples, ...); as one
    stacked forward where :data:`STACK_ROWS` says so, else network by network, each on all of ``x``.
    ``values_per_sample``: the larger of a sample's input and output sizes (memory per sample)."""
    samples = FITNESS_SAMPLES.get(x.device.type, FITNESS_SAMPLES["cuda"])
    if not STACK_ROWS.get(x.device.type, True):
        chunk = max(1, min(samples, FITNESS_ELEMENTS // max(1, values_per_sample)))
        outputs = [[network(part) for part in x.split(chunk)] for network in networks]
        return torch.stack([parts[0] if len(parts) == 1 else torch.cat(parts) for parts in outputs])
    params, buffers = stacked_state(networks)
    forward = shared_forward(networks[0], bool(buffers))
    chunk = max(1, min(samples, FITNESS_ELEMENTS // max(1, values_per_sample)) // len(networks))
    if x.shape[0] <= chunk:
        return forward(params, buffers, x)
    return torch.cat([forward(params, buffers, part) for part in x.split(chunk)], dim=1)


def all_vs_all(
    problem: GanSteps,
    generators: Sequence[nn.Module],
    discriminators: Sequence[nn.Module],
    real: torch.Tensor,
    *,
    generator: torch.Generator,
    score: Sequence[Role] = ROLES,
    memo: dict[nn.Module, Any] | None = None,
    stacked: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The GAN's fitness matrices ``(g_loss[G, D], d_loss[D, G])`` on one noise draw shared by every
    generator. The forwards run pair by pair (``stacked`` false: the reference arithmetic) or as stacked
    rows (:func:`run_stacked`); the losses are the loss's own calls on each pair's logits either way."""
    loss = problem.loss
    z = problem.noise(real.shape[0], generator)
    g_loss = torch.zeros(len(generators), len(discriminators))
    d_loss = torch.zeros(len(discriminators), len(generators))
    score_g, score_d = "generator" in score, "discriminator" in score
    memo = {} if memo is None else memo
    missing = [d for d in discriminators if d not in memo] if score_d else []  # D(real): the D loss only
    with evaluating(*generators, *discriminators):
        logits: Sequence[Sequence[torch.Tensor]]
        with problem.precision.autocast():
            if stacked:
                sample = real[0].numel()
                fakes = run_stacked(generators, z, max(sample, z[0].numel()))  # (G, samples, ...)
                every = fakes.reshape(-1, *fakes.shape[2:])  # all generators' fakes as one batch
                logits = run_stacked(discriminators, every, sample).unflatten(1, fakes.shape[:2])  # (D, G, ...)
                if missing:
                    memo.update(zip(missing, run_stacked(missing, real, sample).float(), strict=True))
            else:
                fake_list = [g(z) for g in generators]
                memo.update((d, d(real).float()) for d in missing)
                logits = [[d(fake) for fake in fake_list] for d in discriminators]
        for j, d in enumerate(discriminators):  # losses on float32 logits (.float(): a no-op in fp32)
            for i in range(len(generators)):
                if score_g:
                    g_loss[i, j] = loss.generator_loss(logits[j][i].float())
                if score_d:
                    d_loss[j, i] = loss.discriminator_loss(memo[d], logits[j][i].float())
    return g_loss, d_loss


class StackedGanFitness(StackedFitness):
    """:class:`~evogan.api.StackedFitness` for :class:`~evogan_gan.problem.GanProblem`."""

    def __init__(self, problem: GanSteps, generators: Sequence[nn.Module], discriminators: Sequence[nn.Module]):
        self.problem = problem
        self.generators, self.discriminators = list(generators), list(discriminators)

    def fitness(
        self,
        real: torch.Tensor,
        *,
        generator: torch.Generator,
        score: Sequence[Role] = ROLES,
        memo: dict[nn.Module, Any] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return all_vs_all(
            self.problem, self.generators, self.discriminators, real,
            generator=generator, score=score, memo=memo, stacked=True,
        )  # fmt: skip


__all__ = [
    "FITNESS_ELEMENTS",
    "FITNESS_SAMPLES",
    "STACK_ROWS",
    "StackedGanFitness",
    "all_vs_all",
    "fitness_unstackable",
    "run_stacked",
    "shared_forward",
    "stacked_state",
]
