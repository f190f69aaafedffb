"""The GAN problem's training steps for many individuals at once (``run.vectorize``).

The parameters of all generators (and of all discriminators) being trained in a process are stacked
along a new first dimension, and one step runs every individual through ``torch.func.functional_call``
under ``torch.func.vmap``: a few batched matrix products instead of one small product per individual.
Each individual keeps its own Adam moments, step count and learning rate (a batched Adam below), its own
noise (drawn from its cell's stream in the looped path's order) and its own opponent, picked from the
live stack (its cell's own, being trained) or from the neighbours' frozen copies. The arithmetic is the
looped path's (:meth:`GanProblem.generator_step`, ``discriminator_step``), so records agree with it
within float tolerance; batched products round differently, so they are not bitwise equal.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import torch
from torch import nn
from torch.func import functional_call, vmap

from evogan.api import Faced, Loss, StackedTraining
from evogan.individual import Individual

if TYPE_CHECKING:
    from evogan.builtin.gan.problem import GanProblem

Params = dict[str, torch.Tensor]


def signature(network: nn.Module) -> tuple[object, ...]:
    """What must agree for networks to share one stack: module types, parameter names, shapes, dtypes."""
    return (
        tuple(type(m).__name__ for m in network.modules()),
        tuple((n, tuple(p.shape), p.dtype, p.device) for n, p in network.named_parameters()),
    )


def unstackable(role: str, individuals: Sequence[Individual], loss: Loss) -> str:
    """Why these individuals cannot be trained as one stack ('' when they can)."""
    if not type(loss).stackable:
        return f"loss {loss.name} is not marked stackable (it may draw at random or branch on values)"
    first = individuals[0]
    if any(True for _ in first.network.buffers()):
        return f"the {role} networks have buffers (BatchNorm running statistics): not stacked yet"
    if any(isinstance(m, nn.modules.dropout._DropoutNd) for m in first.network.modules()):
        return f"the {role} networks use dropout (random draws inside the network)"
    groups = first.optimizer.param_groups
    if type(first.optimizer) is not torch.optim.Adam or len(groups) != 1:
        return f"the {role} optimizer is not a plain torch.optim.Adam with one parameter group"
    group = groups[0]
    if group["amsgrad"] or group["weight_decay"] or group["maximize"] or group["capturable"]:
        return f"the {role} Adam uses amsgrad, weight decay, maximize or capturable"
    shape = signature(first.network)
    for other in individuals[1:]:
        if signature(other.network) != shape:
            return f"the {role} networks differ in architecture"
        theirs = other.optimizer.param_groups[0]
        if type(other.optimizer) is not torch.optim.Adam or (theirs["betas"], theirs["eps"]) != (
            group["betas"],
            group["eps"],
        ):
            return f"the {role} optimizers differ"
    return ""


class Stack:
    """One role's individuals as stacked parameters with stacked Adam state."""

    def __init__(self, individuals: Sequence[Individual]) -> None:
        self.individuals = list(individuals)
        self.template = self.individuals[0].network  # functional_call swaps its parameters for the stack's
        self.rows = {id(ind): row for row, ind in enumerate(self.individuals)}
        named = [dict(ind.network.named_parameters()) for ind in self.individuals]
        self.names = list(named[0])
        group = self.individuals[0].optimizer.param_groups[0]
        self.betas: tuple[float, float] = group["betas"]
        self.eps: float = group["eps"]
        states = [[ind.optimizer.state.get(p, {}) for p in ind.network.parameters()] for ind in self.individuals]
        self.params: Params = {}
        self.exp_avg: Params = {}
        self.exp_avg_sq: Params = {}
        for k, name in enumerate(self.names):
            values = [params[name].detach() for params in named]
            self.params[name] = torch.stack(values).requires_grad_(True)
            for key, into in (("exp_avg", self.exp_avg), ("exp_avg_sq", self.exp_avg_sq)):
                pairs = zip(states, values, strict=True)
                into[name] = torch.stack([st[k][key] if key in st[k] else torch.zeros_like(v) for st, v in pairs])
        device = self.params[self.names[0]].device
        self.steps = torch.tensor([float(state[0]["step"]) if state[0] else 0.0 for state in states],
                                  dtype=torch.float64, device=device)  # fmt: skip

    def __len__(self) -> int:
        return len(self.individuals)

    def detached(self) -> Params:
        return {name: p.detach() for name, p in self.params.items()}

    def adam(self, grads: Sequence[torch.Tensor]) -> None:
        """One Adam step of every row, each with its own learning rate and step count (torch's Adam
        arithmetic, bias corrections in float64 as torch computes them)."""
        beta1, beta2 = self.betas
        lr = torch.tensor([ind.hyper["lr"] for ind in self.individuals], dtype=torch.float64,
                          device=self.steps.device)  # fmt: skip
        self.steps += 1
        step_size = lr / (1 - beta1**self.steps)
        correction2 = (1 - beta2**self.steps).sqrt()
        with torch.no_grad():
            for name, grad in zip(self.names, grads, strict=True):
                param, m, v = self.params[name], self.exp_avg[name], self.exp_avg_sq[name]
                shape = (-1,) + (1,) * (param.dim() - 1)
                m.lerp_(grad, 1 - beta1)
                v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                denom = (v.sqrt() / correction2.to(v.dtype).view(shape)).add_(self.eps)
                param.sub_(m * step_size.to(m.dtype).view(shape) / denom)

    def close(self) -> None:
        """Weights into the networks, moments and step counts into each individual's own optimizer."""
        with torch.no_grad():
            for row, individual in enumerate(self.individuals):
                optimizer = individual.optimizer
                fused = bool(optimizer.param_groups[0].get("fused"))
                for name, param in individual.network.named_parameters():
                    param.copy_(self.params[name][row])
                    step = torch.tensor(float(self.steps[row]), dtype=torch.float32,
                                        device=param.device if fused else "cpu")  # fmt: skip
                    optimizer.state[param] = {
                        "step": step,
                        "exp_avg": self.exp_avg[name][row].clone(),
                        "exp_avg_sq": self.exp_avg_sq[name][row].clone(),
                    }


class StackedGan(StackedTraining):
    """:class:`~evogan.api.StackedTraining` for :class:`~evogan.builtin.gan.problem.GanProblem`."""

    def __init__(self, problem: GanProblem, generators: Sequence[Individual], discriminators: Sequence[Individual]):
        self.problem = problem
        self.g, self.d = Stack(generators), Stack(discriminators)
        self._frozen: dict[int, Params] = {}  # neighbours' copies: their weights do not change this generation
        self.joint = problem.joint_discriminator_batch(self.d.template)

    def _forward(self, stack: Stack) -> Callable[[Params, torch.Tensor], torch.Tensor]:
        template = stack.template
        return vmap(lambda params, x: functional_call(template, params, (x,)))

    def _opponents(self, stack: Stack, chosen: Sequence[Individual]) -> Params:
        """The stacked parameters of ``chosen[i]`` for every row ``i``: rows of the live stack (whose
        weights move every step) or frozen copies; no copy when row i faces live row i."""
        rows = [stack.rows.get(id(ind)) for ind in chosen]
        if rows == list(range(len(stack))):
            return stack.detached()
        sources = []
        for ind, row in zip(chosen, rows, strict=True):
            if row is not None:
                sources.append({name: p[row] for name, p in stack.detached().items()})
            else:
                if id(ind) not in self._frozen:
                    self._frozen[id(ind)] = {n: p.detach() for n, p in ind.network.named_parameters()}
                sources.append(self._frozen[id(ind)])
        return {name: torch.stack([source[name] for source in sources]) for name in stack.names}

    def _noise(self, real: Sequence[torch.Tensor], generators: Sequence[torch.Generator]) -> torch.Tensor:
        return torch.stack([self.problem.noise(r.shape[0], g) for r, g in zip(real, generators, strict=True)])

    def generator_step(
        self, faced: Sequence[Faced], real: Sequence[torch.Tensor], generators: Sequence[torch.Generator]
    ) -> None:
        z = self._noise(real, generators)
        loss_fn = self.problem.loss.generator_loss
        fake = self._forward(self.g)(self.g.params, z)
        width = max(len(f) for f in faced)
        if width == 1:  # one opponent each: the plain loss, as the looped path computes it
            logits = self._forward(self.d)(self._opponents(self.d, [f[0][0] for f in faced]), fake)
            losses = vmap(loss_fn)(logits)
        else:  # weighted sums; rows with fewer opponents are padded with weight 0
            padded = [list(f) + [(f[0][0], 0.0)] * (width - len(f)) for f in faced]
            losses = torch.zeros(len(faced), device=fake.device)
            for k in range(width):
                weights = torch.tensor([row[k][1] for row in padded], device=fake.device)
                logits = self._forward(self.d)(self._opponents(self.d, [row[k][0] for row in padded]), fake)
                losses = losses + weights * vmap(loss_fn)(logits)
        grads = torch.autograd.grad(losses.sum(), [self.g.params[n] for n in self.g.names])
        self.g.adam(grads)

    def discriminator_step(
        self, defenders: Sequence[Individual], real: Sequence[torch.Tensor], generators: Sequence[torch.Generator]
    ) -> None:
        z = self._noise(real, generators)
        with torch.no_grad():
            fake = self._forward(self.g)(self._opponents(self.g, defenders), z)
        batch = torch.stack(list(real))
        forward = self._forward(self.d)
        if self.joint:
            real_logits, fake_logits = forward(self.d.params, torch.cat((batch, fake), dim=1)).split(
                batch.shape[1], dim=1
            )
        else:
            real_logits, fake_logits = forward(self.d.params, batch), forward(self.d.params, fake)
        losses = vmap(self.problem.loss.discriminator_loss)(real_logits, fake_logits)
        grads = torch.autograd.grad(losses.sum(), [self.d.params[n] for n in self.d.names])
        self.d.adam(grads)

    def close(self) -> None:
        self.g.close()
        self.d.close()


__all__ = ["Stack", "StackedGan", "signature", "unstackable"]
