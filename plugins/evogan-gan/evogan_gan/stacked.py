"""The GAN problem's training steps for many individuals at once (``run.vectorize``).

Each role's parameters, Adam moments and BatchNorm statistics are stacked along a new first dimension, and one step
trains every row (linear chains as ``baddbmm``, other networks under ``vmap``), each with its own learning rate,
noise and opponent. While a generation trains, each individual's tensors are views of its rows (:class:`Stack`), so
a sparsity controller's in-place hooks act on the stack. The arithmetic is the looped path's: records agree within
float tolerance, not bitwise, as batched products round differently.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import nn
from torch.func import functional_call, vmap

from evogan.adversarial.contracts import Augment, Faced, GeneratorStep, Loss, TrainingBackend
from evogan.individual import Individual
from evogan.precision import Precision

Params = dict[str, torch.Tensor]


class GanSteps(Protocol):
    """What the stacked steps and fitness use of the GAN problem
    (:class:`~evogan_gan.problem.GanProblem`): its noise, its loss, its augmentation, the precision
    of its forwards and how its discriminator steps batch real and fake. A protocol, as the problem's
    module imports these modules to make them."""

    @property
    def loss(self) -> Loss[Any]: ...

    @property
    def precision(self) -> Precision: ...

    @property
    def augment(self) -> Augment[Any]: ...

    def augment_state(self, discriminator: Individual, *, start: bool = False) -> dict[str, torch.Tensor] | None: ...

    def noise(self, n: int, generator: torch.Generator) -> torch.Tensor: ...

    def joint_discriminator_batch(self, discriminator: nn.Module) -> bool: ...


def signature(network: nn.Module) -> tuple[object, ...]:
    """What must agree for networks to share one stack: module types, parameter and buffer names,
    shapes, dtypes."""
    return (
        tuple(type(m).__name__ for m in network.modules()),
        tuple((n, tuple(p.shape), p.dtype, p.device) for n, p in network.named_parameters()),
        tuple((n, tuple(b.shape), b.dtype, b.device) for n, b in network.named_buffers()),
    )


@dataclass(frozen=True)
class PowerIteration:
    """One spectrally normalised weight (``torch.nn.utils.parametrizations.spectral_norm``, or the old-style
    ``torch.nn.utils.spectral_norm`` hook): the parameter it normalises, its power-iteration vectors ``u`` and
    ``v`` (buffers) and the module whose ``training`` decides whether a forward iterates. Stacked, every row
    iterates on its own weight and vectors, outside ``vmap`` (torch's update writes with ``out=``, which
    ``vmap`` refuses); the forward then runs with the module in eval mode, which computes ``sigma = u . W v``
    from the new vectors as the train-mode forward does after its update. ``u_first``: the parametrization
    updates ``u`` from ``v`` then ``v``, the old hook ``v`` from ``u`` then ``u``; ``attribute``: the plain
    attribute the old hook writes the normalised weight to (put back after a stacked forward)."""

    weight: str
    u: str
    v: str
    owner: str
    dim: int
    eps: float
    iterations: int
    u_first: bool = True
    attribute: str = ""

    def step(self, weight: torch.Tensor, u: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Every row's vectors after one forward's iterations: ``weight`` is (rows, ...), ``u``/``v`` (rows, n)."""

        def times(matrix: torch.Tensor, vector: torch.Tensor) -> torch.Tensor:
            product = torch.bmm(matrix, vector.unsqueeze(-1)).squeeze(-1)
            return nn.functional.normalize(product, dim=-1, eps=self.eps)

        with torch.no_grad():
            matrix = weight.detach().movedim(self.dim + 1, 1).flatten(2)  # each row's weight as torch reshapes it
            for _ in range(self.iterations):
                if self.u_first:
                    u = times(matrix, v)
                    v = times(matrix.mH, u)
                else:
                    v = times(matrix.mH, u)
                    u = times(matrix, v)
        return u, v


def power_iterations(network: nn.Module) -> list[PowerIteration] | str:
    """``network``'s spectrally normalised weights, or why they cannot be stacked (spectral norm chained
    with another parametrization)."""
    from torch.nn.utils import parametrize
    from torch.nn.utils.parametrizations import _SpectralNorm
    from torch.nn.utils.spectral_norm import SpectralNorm

    found: list[PowerIteration] = []
    for prefix, module in network.named_modules():
        at = f"{prefix}." if prefix else ""
        for hook in module._forward_pre_hooks.values():
            if isinstance(hook, SpectralNorm):
                name = hook.name
                found.append(
                    PowerIteration(
                        weight=f"{at}{name}_orig",
                        u=f"{at}{name}_u",
                        v=f"{at}{name}_v",
                        owner=prefix,
                        dim=hook.dim,
                        eps=hook.eps,
                        iterations=hook.n_power_iterations,
                        u_first=False,
                        attribute=name,
                    )
                )
        if not parametrize.is_parametrized(module):
            continue
        for tensor, chain in module.parametrizations.items():
            norms = [p for p in chain if isinstance(p, _SpectralNorm)]
            if not norms:
                continue
            if len(chain) > 1:
                return f"spectral norm chained with other parametrizations ({at}parametrizations.{tensor})"
            norm = norms[0]
            if not hasattr(norm, "_u"):  # a vector's norm: no state
                continue
            base = f"{at}parametrizations.{tensor}"
            found.append(
                PowerIteration(
                    weight=f"{base}.original",
                    u=f"{base}.0._u",
                    v=f"{base}.0._v",
                    owner=f"{base}.0",
                    dim=int(norm.dim),
                    eps=float(norm.eps),
                    iterations=int(norm.n_power_iterations),
                )
            )
    return found


def momenta(network: nn.Module) -> dict[str, float | None] | str:
    """Each buffer's BatchNorm momentum (the running statistics' update ``(1 - m) * old + m * batch``), None for
    spectral norm's power-iteration vectors (each forward in train mode replaces them), or why the buffers
    cannot be stacked: only these two kinds can."""
    iterating = power_iterations(network)
    if isinstance(iterating, str):
        return iterating
    vectors = {name for it in iterating for name in (it.u, it.v)}
    found: dict[str, float | None] = {}
    for prefix, module in network.named_modules():
        for own, _ in module.named_buffers(recurse=False):
            name = f"{prefix}.{own}" if prefix else own
            if name in vectors:
                found[name] = None
                continue
            if not isinstance(module, nn.modules.batchnorm._BatchNorm):
                return (
                    "buffers other than BatchNorm running statistics and spectral norm's vectors "
                    f"({name} of {type(module).__name__})"
                )
            if module.momentum is None:
                return f"BatchNorm with momentum None (a cumulative average: {name})"
            found[name] = float(module.momentum)
    return found


def unstackable(role: str, individuals: Sequence[Individual], loss: Loss, *, hooks: bool = False) -> str:
    """Why these individuals cannot be trained as one stack ('' when they can)."""
    if not type(loss).stackable:
        return f"loss {loss.name} is not marked stackable (it may draw at random or branch on values)"
    first = individuals[0]
    found = momenta(first.network)
    if isinstance(found, str):
        return f"the {role} networks have {found}"
    if hooks and found and role == "discriminator" and shared_by_attackers(individuals):
        # The controller's balance-ratio forwards run D in train mode after a G step; looped, they fall
        # between the steps of one cell's generators, stacked after all of them: another order of updates.
        kind = "BatchNorm" if any(m is not None for m in found.values()) else "spectral-norm"
        return (
            f"sparse cells with several generators facing one {kind} discriminator: the controller's "
            "forwards between their steps (balance-ratio samples) would move its running statistics in "
            "another order"
        )
    if any(isinstance(m, nn.modules.dropout._DropoutNd) for m in first.network.modules()):
        return f"the {role} networks use dropout (random draws inside the network)"
    groups = first.trainer.param_groups
    if type(first.trainer) is not torch.optim.Adam or len(groups) != 1:
        return f"the {role} optimizer is not a plain torch.optim.Adam with one parameter group"
    group = groups[0]
    if group["amsgrad"] or group["weight_decay"] or group["maximize"] or group["capturable"]:
        return f"the {role} Adam uses amsgrad, weight decay, maximize or capturable"
    shape = signature(first.network)
    for other in individuals[1:]:
        if signature(other.network) != shape:
            return f"the {role} networks differ in architecture"
        theirs = other.trainer.param_groups[0]
        if type(other.trainer) is not torch.optim.Adam or (theirs["betas"], theirs["eps"]) != (
            group["betas"],
            group["eps"],
        ):
            return f"the {role} optimizers differ"
    return ""


def unautocast(role: str, network: nn.Module, precision: Precision) -> str:
    """Why ``network``'s stacked forward would not run in ``precision`` ('' when it would): a chain of linear
    layers runs as batched products, which autocast casts; other networks run under ``vmap``, whose
    convolutions and linear layers autocast leaves in fp32 on the CPU (torch 2.14), so they train looped."""
    if precision.name == "fp32" or (linear_plan(network) is not None and not any(True for _ in network.buffers())):
        return ""
    return f"run.precision: the {role} networks' stacked forward (vmap) does not autocast to {precision.name}"


def shared_by_attackers(discriminators: Sequence[Individual]) -> bool:
    """Whether some cell trains several discriminators: then its several generators face one of them
    in a step (``origin`` is the training cell: offspring take it)."""
    origins = [d.origin for d in discriminators]
    return len(set(origins)) < len(origins)


# Modules without parameters that act on each sample alone: run on (rows x batch) samples at once.
PER_SAMPLE: tuple[type[nn.Module], ...] = (
    nn.Identity, nn.Flatten, nn.Unflatten, nn.Tanh, nn.ReLU, nn.ReLU6, nn.LeakyReLU, nn.Sigmoid, nn.ELU,
    nn.GELU, nn.SiLU, nn.Softplus, nn.Hardtanh,
)  # fmt: skip


# Modules that act on every element alone: a shared input needs no per-row layout for them.
ELEMENTWISE: tuple[type[nn.Module], ...] = (
    nn.Identity, nn.Tanh, nn.ReLU, nn.ReLU6, nn.LeakyReLU, nn.Sigmoid, nn.ELU, nn.GELU, nn.SiLU, nn.Softplus,
    nn.Hardtanh,
)  # fmt: skip


def linear_plan(network: nn.Module) -> list[tuple[nn.Module, str | None]] | None:
    """The network as a chain of linear layers (with their parameter prefix) and per-sample modules
    (prefix None), or None when it is anything else. Such a chain runs as batched matrix products
    (``baddbmm``) without ``vmap``'s per-call cost, which dominates for small layers on the CPU."""
    if not isinstance(network, nn.Sequential):
        return None
    plan: list[tuple[nn.Module, str | None]] = []
    for name, module in network.named_children():
        if isinstance(module, nn.Linear) and module.bias is not None:
            plan.append((module, name))
        elif isinstance(module, PER_SAMPLE) or getattr(module, "per_sample", False):
            plan.append((module, None))
        else:
            return None
    return plan


def run_plan(
    plan: Sequence[tuple[nn.Module, str | None]], params: Params, x: torch.Tensor, *, shared: bool = False
) -> torch.Tensor:
    """Every row's linear chain: on its own batch, ``x`` (rows, batch, ...), or with ``shared`` on the
    same input, ``x`` (batch, ...); the result is (rows, batch, ...). A shared input is never copied per
    row: the first linear layer of all rows is one product with their weights side by side, read row by
    row through a strided view."""
    rows = next(iter(params.values())).shape[0]
    stacked = not shared
    for module, prefix in plan:
        if prefix is None:
            if not stacked or isinstance(module, ELEMENTWISE):  # the same for every row / any layout
                x = module(x)
            else:
                y = module(x.reshape(-1, *x.shape[2:]))
                x = y.reshape(rows, y.shape[0] // rows, *y.shape[1:])
            continue
        weight, bias = params[f"{prefix}.weight"], params[f"{prefix}.bias"]
        if stacked:
            out = torch.baddbmm(bias.unsqueeze(1), x.reshape(rows, -1, x.shape[-1]), weight.transpose(1, 2))
            x = out.reshape(*x.shape[:-1], out.shape[-1])
        else:
            out = torch.addmm(bias.reshape(-1), x.reshape(-1, x.shape[-1]), weight.reshape(-1, weight.shape[-1]).t())
            x = out.view(*x.shape[:-1], rows, weight.shape[1]).movedim(-2, 0)
            stacked = True
    return x if stacked else x.expand(rows, *x.shape)


class Stack:
    """One role's individuals as stacked parameters with their Adam state.

    Parameters and moments live in flat memory, name by name, so ``params[name]`` is a contiguous ``(rows, *shape)``
    view for the batched forward and each row a contiguous view for torch's fused Adam, run once per row (each
    individual has its own learning rate), as the looped path. While the stack is open, each individual's
    parameters, moments, buffers and (with ``gradients``) ``.grad`` are views of its rows, so a sparsity
    controller's in-place work acts on the stack; :meth:`close` gives the individuals their own tensors back.
    """

    def __init__(self, individuals: Sequence[Individual], *, gradients: bool = False) -> None:
        self.individuals = list(individuals)
        self.gradients = gradients
        self.template = self.individuals[0].network  # the forward swaps its parameters for the stack's
        self.rows = {id(ind): row for row, ind in enumerate(self.individuals)}
        named = [dict(ind.network.named_parameters()) for ind in self.individuals]
        self.names = list(named[0])
        group = self.individuals[0].trainer.param_groups[0]
        self.betas: tuple[float, float] = group["betas"]
        self.eps: float = group["eps"]
        states = [[ind.trainer.state.get(p, {}) for p in ind.network.parameters()] for ind in self.individuals]
        blocks = [torch.stack([params[name].detach() for params in named]) for name in self.names]
        self.flat = torch.cat([block.reshape(-1) for block in blocks])
        self.exp_avg, self.exp_avg_sq = (
            torch.cat([
                torch.stack([st[k][key] if key in st[k] else torch.zeros_like(block[0]) for st in states]).reshape(-1)
                for k, block in enumerate(blocks)
            ])
            for key in ("exp_avg", "exp_avg_sq")
        )  # fmt: skip
        self.params: Params = {}  # leaves the batched backward differentiates
        self.weights: Params = {}  # the same memory without autograd: what opponents read
        self._views: dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}
        offset = 0
        for name, block in zip(self.names, blocks, strict=True):
            size = block.numel()
            weights, exp_avg, exp_avg_sq = (
                buf[offset : offset + size].view(block.shape) for buf in (self.flat, self.exp_avg, self.exp_avg_sq)
            )
            self._views[name] = (weights, exp_avg, exp_avg_sq)
            self.weights[name] = weights
            self.params[name] = weights.detach().requires_grad_(True)  # a leaf sharing the buffer
            offset += size
        # BatchNorm running statistics, one row per individual, updated in place by the batched forward
        found = momenta(self.template)
        if isinstance(found, str):  # unstackable() refuses these first
            raise ValueError(f"cannot stack: {found}")
        self.momenta: dict[str, float | None] = found
        iterating = power_iterations(self.template)
        self.iterations: list[PowerIteration] = iterating if isinstance(iterating, list) else []
        buffers = [dict(ind.network.named_buffers()) for ind in self.individuals]
        self.buffers: Params = {name: torch.stack([b[name] for b in buffers]) for name in self.momenta}
        device = self.flat.device
        # one step counter per row and parameter, as the fused kernel wants them (float32 on the device)
        self.steps = [
            [torch.tensor(float(st[0]["step"]) if st[0] else 0.0, dtype=torch.float32, device=device)
             for _ in self.names]
            for st in states
        ]  # fmt: skip
        self._all_steps = [step for row in self.steps for step in row]
        # each row's weights, moments (views) and parameters: what its Adam step reads, built once
        self._rows = [
            tuple([self._views[name][i][row] for name in self.names] for i in range(3))
            for row in range(len(self.individuals))
        ]
        self._row_params = [list(ind.network.parameters()) for ind in self.individuals]
        self._own: list[tuple[list[torch.Tensor], list[torch.Tensor]]] = []  # each row's tensors, for close
        self._stepped = [bool(st[0]) for st in states]  # whether the row's optimizer had state
        self._alias()

    def _alias(self) -> None:
        """Make each individual's parameters, moments and running statistics views of its rows."""
        for row, individual in enumerate(self.individuals):
            params = dict(individual.network.named_parameters())
            own_params = []
            for k, name in enumerate(self.names):
                param, (weights, exp_avg, exp_avg_sq) = params[name], self._views[name]
                own_params.append(param.data)
                param.data = weights[row]
                individual.trainer.state[param] = {
                    "step": self.steps[row][k],
                    "exp_avg": exp_avg[row],
                    "exp_avg_sq": exp_avg_sq[row],
                }
            own_buffers = []
            for name in self.momenta:
                module, local = _owner(individual.network, name)
                own_buffers.append(getattr(module, local))
                setattr(module, local, self.buffers[name][row])
            self._own.append((own_params, own_buffers))

    def __len__(self) -> int:
        return len(self.individuals)

    def adam(self, grads: Sequence[torch.Tensor]) -> None:
        """One Adam step of every row with its own learning rate (``hyper["lr"]``) and step count."""
        beta1, beta2 = self.betas
        grads = [grad.contiguous() for grad in grads]  # the fused kernel reads each row's slice as flat memory
        if self.gradients:  # what the looped step leaves in .grad: the controller may regrow by it
            for row, params in enumerate(self._row_params):
                for param, grad in zip(params, grads, strict=True):
                    param.grad = grad[row]
        with torch.no_grad():
            torch._foreach_add_(self._all_steps, 1.0)
            for row, individual in enumerate(self.individuals):
                weights, exp_avg, exp_avg_sq = self._rows[row]
                torch._fused_adam_(
                    weights,
                    [grad[row] for grad in grads],
                    exp_avg,
                    exp_avg_sq,
                    [],
                    self.steps[row],
                    lr=float(individual.hyper["lr"]),
                    beta1=beta1,
                    beta2=beta2,
                    weight_decay=0.0,
                    eps=self.eps,
                    amsgrad=False,
                    maximize=False,
                )

    def close(self) -> None:
        """Each individual's own tensors back, holding its rows' weights and running statistics;
        moments and step counts into its own optimizer."""
        with torch.no_grad():
            for row, individual in enumerate(self.individuals):
                own_params, own_buffers = self._own[row]
                optimizer = individual.trainer
                fused = bool(optimizer.param_groups[0].get("fused"))
                for name, own in zip(self.momenta, own_buffers, strict=True):
                    module, local = _owner(individual.network, name)
                    if getattr(module, local).data_ptr() != self.buffers[name][row].data_ptr():
                        raise RuntimeError(f"buffer {name} of {individual.uid} was replaced while stacked")
                    setattr(module, local, own.copy_(self.buffers[name][row]))
                for k, (name, param) in enumerate(individual.network.named_parameters()):
                    weights, exp_avg, exp_avg_sq = self._views[name]
                    if param.data_ptr() != weights[row].data_ptr():  # a hook swapped the tensor: lost work
                        raise RuntimeError(f"parameter {name} of {individual.uid} was replaced while stacked")
                    param.data = own_params[k].copy_(weights[row])
                    if self.gradients and param.grad is not None:
                        param.grad = param.grad.clone()  # its own, like the looped step's
                    step = self.steps[row][k].clone()
                    if not step and not self._stepped[row]:  # never stepped (a probe): no state, as before
                        optimizer.state.pop(param, None)
                        continue
                    optimizer.state[param] = {
                        "step": step if fused else step.cpu(),
                        "exp_avg": exp_avg[row].clone(),
                        "exp_avg_sq": exp_avg_sq[row].clone(),
                    }


def _owner(network: nn.Module, name: str) -> tuple[nn.Module, str]:
    """The module holding the buffer or parameter ``name`` and its local name there."""
    prefix, _, local = name.rpartition(".")
    return network.get_submodule(prefix), local


@contextlib.contextmanager
def _evaluating(iterations: Sequence[tuple[PowerIteration, nn.Module]]) -> Iterator[None]:
    """The spectral norms' modules in eval mode for the block (they then read their vectors without
    iterating), and what the old-style hook writes to them put back afterwards (no batched tensor stays)."""
    modes = [owner.training for _, owner in iterations]
    kept = [getattr(owner, it.attribute) if it.attribute else None for it, owner in iterations]
    for _, owner in iterations:
        owner.training = False
    try:
        yield
    finally:
        for (it, owner), mode, value in zip(iterations, modes, kept, strict=True):
            owner.training = mode
            if it.attribute:
                setattr(owner, it.attribute, value)


def _chain(stack: Stack, opposed: Opposed, targets: Sequence[Target | None]) -> None:
    """Rows facing the same opponent at once start where the looped path's earlier rows left its
    power-iteration vectors: the k-th such row from its vectors after k forwards (the opponent's weights
    stand still meanwhile), so after the batched forward each row holds what its looped forward left and
    ``commit``, copying row after row, leaves the opponent the last one's."""
    live = [(it, stack.template.get_submodule(it.owner)) for it in stack.iterations]
    live = [(it, owner) for it, owner in live if owner.training]
    if not live or not any(targets):
        return
    earlier: dict[object, int] = {}
    depth: list[int] = []
    for target in targets:
        key = None if target is None else target[0]
        depth.append(earlier.get(key, 0) if key is not None else 0)
        if key is not None:
            earlier[key] = earlier.get(key, 0) + 1
    for k in range(1, max(depth, default=0) + 1):
        rows = torch.tensor([row for row, d in enumerate(depth) if d >= k])
        for it, _ in live:
            u, v = it.step(opposed.params[it.weight][rows], opposed.buffers[it.u][rows], opposed.buffers[it.v][rows])
            opposed.buffers[it.u][rows] = u
            opposed.buffers[it.v][rows] = v


def rowwise(loss: Callable[..., torch.Tensor], *logits: torch.Tensor) -> torch.Tensor:
    """Each row's loss, by the loss's own call on that row's logits: the looped path's arithmetic, and
    for the few rows of a process cheaper than ``vmap`` of the loss."""
    return torch.stack([loss(*row) for row in zip(*logits, strict=True)])


Forward = Callable[[Params, Params, torch.Tensor], torch.Tensor]  # (parameters, buffers, input)
# whose running statistics a row's forward updated: (the opponent, its buffers, its row in them or None)
Target = tuple[object, Params, int | None]


class Opposed:
    """The stacked parameters and buffers of the opponents faced, row by row, and how to hand the
    running statistics their forward updated back to the opponents (``commit``).

    In the looped path each opponent's forward in train mode updates its own BatchNorm statistics, one
    attacker after another. Here rows facing the same opponent run on copies of its statistics at once,
    and ``commit`` replays the updates in row order: the first copies the row's result, each later one
    applies its batch's share ``new - (1 - m) * old`` (exact up to rounding: the batch statistics do not
    depend on the running ones). Rows marked not ``counted`` (padding) update nothing."""

    def __init__(self, params: Params, buffers: Params, targets: Sequence[Target | None]) -> None:
        self.params, self.buffers = params, buffers
        self._before = {name: b.clone() for name, b in buffers.items()} if any(targets) else {}
        self._targets = targets

    def commit(self, momenta: dict[str, float | None]) -> None:
        if not self._before:
            return
        with torch.no_grad():
            seen: set[object] = set()
            for row, target in enumerate(self._targets):
                if target is None:
                    continue
                key, buffers, index = target
                first = key not in seen
                seen.add(key)
                for name, used in self.buffers.items():
                    into = buffers[name] if index is None else buffers[name][index]
                    momentum = momenta[name]
                    if first or momentum is None:  # power-iteration vectors: the row's start was chained
                        into.copy_(used[row])
                    else:
                        keep = 1.0 - momentum if used.is_floating_point() else 1
                        into.mul_(keep).add_(used[row] - keep * self._before[name][row])


class StackedGanTraining(TrainingBackend):
    """The stacked :class:`~evogan.adversarial.contracts.TrainingBackend` of
    :class:`~evogan_gan.problem.GanProblem`: every row in one batched step (the other backend,
    :class:`~evogan.adversarial.RowByRow`, steps them one by one)."""

    def __init__(
        self,
        problem: GanSteps,
        generators: Sequence[Individual],
        discriminators: Sequence[Individual],
        *,
        hooks: bool = False,
        clip: float = 0.0,
    ) -> None:
        self.problem = problem
        self.clip = clip  # WGAN's weight clipping after each D step (problem.clip_weights; 0: off)
        self.g, self.d = Stack(generators, gradients=hooks), Stack(discriminators, gradients=hooks)
        self._frozen: dict[int, Params] = {}  # neighbours' copies: their weights do not change this generation
        self.joint = problem.joint_discriminator_batch(self.d.template)
        self.forward_g, self.forward_d = self._forward(self.g), self._forward(self.d)

    @staticmethod
    def _forward(stack: Stack) -> Forward:
        plan = linear_plan(stack.template) if not stack.buffers else None
        if plan is not None:  # the fast path, for networks without buffers
            return lambda params, _, x: run_plan(plan, params, x)
        template = stack.template
        # in train mode BatchNorm updates the batched running statistics in place, each row its own
        batched = vmap(lambda params, buffers, x: functional_call(template, (params, buffers), (x,)))
        if not stack.iterations:
            return batched
        iterations = [(it, template.get_submodule(it.owner)) for it in stack.iterations]

        def forward(params: Params, buffers: Params, x: torch.Tensor) -> torch.Tensor:
            for it, owner in iterations:  # what each row's train-mode forward does first, in place
                if owner.training:
                    u, v = it.step(params[it.weight], buffers[it.u], buffers[it.v])
                    buffers[it.u].copy_(u)
                    buffers[it.v].copy_(v)
            with _evaluating(iterations):
                return batched(params, buffers, x)

        return forward

    def _opponents(self, stack: Stack, chosen: Sequence[Individual], counted: Sequence[bool] | None = None) -> Opposed:
        """The stacked parameters and buffers of ``chosen[i]`` for every row ``i``: rows of the live stack
        (whose weights move every step) or frozen copies; no copy when row i faces live row i."""
        counted = counted or [True] * len(chosen)
        rows = [stack.rows.get(id(ind)) for ind in chosen]
        if rows == list(range(len(stack))) and all(counted):
            return Opposed(stack.weights, stack.buffers, [])  # updated in place
        sources: list[Params] = []
        buffers: list[Params] = []
        targets: list[Target | None] = []
        for ind, row, count in zip(chosen, rows, counted, strict=True):
            if row is not None:
                sources.append({name: p[row] for name, p in stack.weights.items()})
                buffers.append({name: b[row] for name, b in stack.buffers.items()})
                target: Target = (id(ind), stack.buffers, row)
            else:
                if id(ind) not in self._frozen:
                    self._frozen[id(ind)] = {n: p.detach() for n, p in ind.network.named_parameters()}
                sources.append(self._frozen[id(ind)])
                own = dict(ind.network.named_buffers())
                buffers.append(own)
                target = (id(ind), own, None)
            targets.append(target if count and stack.buffers else None)
        opposed = Opposed(
            {name: torch.stack([source[name] for source in sources]) for name in stack.names},
            {name: torch.stack([b[name] for b in buffers]) for name in stack.buffers},
            targets,
        )
        _chain(stack, opposed, targets)
        return opposed

    def _facing(self, opposed: Opposed, fake: torch.Tensor) -> torch.Tensor:
        with self.problem.precision.autocast():
            logits = self.forward_d(opposed.params, opposed.buffers, fake)
        opposed.commit(self.d.momenta)
        return logits.float()  # the losses' input (a no-op in fp32)

    def _noise(
        self, real: Sequence[torch.Tensor], streams: Sequence[torch.Generator], calls: Sequence[int]
    ) -> tuple[torch.Tensor, list[torch.Generator]]:
        """Each row's noise, and the stream the row's ``calls[i]`` augmentations then draw from, such that
        every cell's stream gives what the looped steps draw from it: a row's noise, then its
        augmentations, row after row. A stream no later row shares is the row's own; a shared one is
        copied after the row's noise and moved past the row's draws (its augmentations run on zeros:
        how much they draw depends on the shape alone)."""
        last = {id(stream): row for row, stream in enumerate(streams)}
        noise, augmenting = [], []
        for row, (r, stream) in enumerate(zip(real, streams, strict=True)):
            noise.append(self.problem.noise(r.shape[0], stream))
            if last[id(stream)] == row or not calls[row]:
                augmenting.append(stream)
                continue
            fork = torch.Generator(device=stream.device)
            fork.set_state(stream.get_state())
            augmenting.append(fork)
            blank = torch.zeros_like(r)
            for _ in range(calls[row]):
                self.problem.augment(blank, stream=stream)
        return torch.stack(noise), augmenting

    def _augmented_fakes(
        self, fake: torch.Tensor, faced: Sequence[Faced], streams: Sequence[torch.Generator], width: int
    ) -> list[torch.Tensor]:
        """What the ``k``-th opponent of every row sees of its fakes, for each ``k`` below ``width``:
        augmented once per row, or per opponent with its own state for an adaptive augmentation (padding
        rows beyond a row's opponents draw nothing), as the looped step does."""
        augment = self.problem.augment
        if augment.identity:
            return [fake] * width
        if not augment.adaptive:
            once = torch.stack([augment(fake[row], stream=stream) for row, stream in enumerate(streams)])
            return [once] * width
        seen: list[list[torch.Tensor]] = [[] for _ in range(width)]
        for row, (chosen, stream) in enumerate(zip(faced, streams, strict=True)):
            for k in range(width):
                if k < len(chosen):
                    state = self.problem.augment_state(chosen[k][0])
                    seen[k].append(augment(fake[row], stream=stream, state=state))
                else:
                    seen[k].append(fake[row])
        return [torch.stack(rows) for rows in seen]

    def _augment_calls(self, per_row: Sequence[int]) -> list[int]:
        return [0 if self.problem.augment.identity else n for n in per_row]

    def generator_step(
        self, faced: Sequence[Faced], real: Sequence[torch.Tensor], streams: Sequence[torch.Generator]
    ) -> list[GeneratorStep]:
        adaptive = self.problem.augment.adaptive
        z, augmenting = self._noise(real, streams, self._augment_calls([len(f) if adaptive else 1 for f in faced]))
        loss_fn = self.problem.loss.generator_loss
        with self.problem.precision.autocast():
            fake = self.forward_g(self.g.params, self.g.buffers, z)
        width = max(len(f) for f in faced)
        fakes = self._augmented_fakes(fake, faced, augmenting, width)
        if width == 1:  # one opponent each: the plain loss, as the looped path computes it
            logits = first = self._facing(self._opponents(self.d, [f[0][0] for f in faced]), fakes[0])
            losses = rowwise(loss_fn, logits)
        else:  # weighted sums; rows with fewer opponents are padded with weight 0
            # a row with one opponent uses the plain loss (weight 1), as the looped path does
            padded = [[(f[0][0], 1.0)] + [(f[0][0], 0.0)] * (width - 1) if len(f) == 1 else
                      list(f) + [(f[0][0], 0.0)] * (width - len(f)) for f in faced]  # fmt: skip
            losses = torch.zeros(len(faced), device=fake.device)
            for k in range(width):
                weights = torch.tensor([row[k][1] for row in padded], device=fake.device)
                opposed = self._opponents(self.d, [row[k][0] for row in padded], [k < len(f) for f in faced])
                logits = self._facing(opposed, fakes[k])
                if k == 0:  # the principal opponent's logits, as the looped step returns them
                    first = logits
                losses = losses + weights * rowwise(loss_fn, logits)
        grads = torch.autograd.grad(losses.sum(), [self.g.params[n] for n in self.g.names])
        self.g.adam(grads)
        pre = first.detach()
        return [GeneratorStep(z=z[i], real=real[i], fake_logits_pre=pre[i], step=0) for i in range(len(faced))]

    def discriminator_step(
        self, defenders: Sequence[Individual], real: Sequence[torch.Tensor], streams: Sequence[torch.Generator]
    ) -> None:
        z, augmenting = self._noise(real, streams, self._augment_calls([2] * len(real)))
        batch = torch.stack(list(real))
        with torch.no_grad():
            opposed = self._opponents(self.g, defenders)
            with self.problem.precision.autocast():
                fake = self.forward_g(opposed.params, opposed.buffers, z).to(batch.dtype)
            opposed.commit(self.g.momenta)
        augment = self.problem.augment
        states = [self.problem.augment_state(d, start=True) for d in self.d.individuals]
        if not augment.identity:  # each row's real batch, then its fakes, from the row's stream
            rows = range(len(real))
            batch = torch.stack([augment(batch[i], stream=augmenting[i], state=states[i]) for i in rows])
            fake = torch.stack([augment(fake[i], stream=augmenting[i], state=states[i]) for i in rows])
        params, buffers, forward = self.d.params, self.d.buffers, self.forward_d
        with self.problem.precision.autocast():
            if self.joint:
                real_logits, fake_logits = forward(params, buffers, torch.cat((batch, fake), dim=1)).split(
                    batch.shape[1], dim=1
                )
            else:  # real first, then fake: the order in which the looped path updates running statistics
                real_logits = forward(params, buffers, batch)
                fake_logits = forward(params, buffers, fake)
        losses = rowwise(self.problem.loss.discriminator_loss, real_logits.float(), fake_logits.float())
        grads = torch.autograd.grad(losses.sum(), [self.d.params[n] for n in self.d.names])
        self.d.adam(grads)
        if self.clip:  # every parameter of every row, as the looped step clamps each network's
            with torch.no_grad():
                self.d.flat.clamp_(-self.clip, self.clip)
        if augment.adaptive:
            signs = real_logits.detach().float().cpu()  # one copy for every row
            for state, row_logits in zip(states, signs, strict=True):
                assert state is not None
                augment.observe(state, row_logits)

    def close(self) -> None:
        self.g.close()
        self.d.close()


__all__ = [
    "ELEMENTWISE",
    "PER_SAMPLE",
    "Opposed",
    "PowerIteration",
    "Stack",
    "StackedGanTraining",
    "linear_plan",
    "momenta",
    "power_iterations",
    "run_plan",
    "signature",
    "unautocast",
    "unstackable",
]
