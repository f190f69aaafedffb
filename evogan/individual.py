"""Individuals, their roles and their fitness, as plain classes (no DEAP ``creator`` globals).

Below :mod:`evogan.api` in the layering: the component contracts speak of individuals, and this module
imports nothing of evogan but :mod:`evogan.deprecated` (for the properties it serves until 0.4).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from deap import base

if TYPE_CHECKING:  # only in annotations: `import evogan` must not import torch (see evogan.lazy)
    import torch
    from torch import nn

#: A population's name, declared by the problem (:attr:`evogan.api.Problem.roles`): ``host`` and
#: ``parasite`` for sorting networks; a GAN's are :data:`ROLES`.
Role = str
ROLES: tuple[Role, Role] = ("generator", "discriminator")

# Named entries of Individual.extra that hold a component's nested state rather than one tensor of the
# problem's extra_layout. Checkpoints keep them at the top level of the individual's state, as before 0.3
# (so checkpoints written before and after this slot moved into extra load alike).
SPARSE = "sparse"  # the sparsity controller's state; its "masks" compress the weights on the wire
AVERAGE = "average"  # the moving average of the parameters (problem.g_ema): one tensor per parameter
SLOTS = (SPARSE, AVERAGE)


class _NotPlain(Exception):
    """A module :func:`copy_network` leaves to ``copy.deepcopy``."""


# Attribute values a plain module may hold as they are (immutable), beside its parameter, buffer and
# submodule tables, its empty hook tables and lists or tuples of these.
_IMMUTABLE = (bool, int, float, str, type(None))


def copy_network(network: nn.Module) -> nn.Module:
    """``copy.deepcopy(network)``, faster for plain modules: those whose attributes are numbers, strings,
    their lists and tuples, tensors and submodules, with no hook registered (what genomes and most
    layers are). Cloning a small genome by deepcopy's generic walk costs several times the tensors' own
    copies, once per selected individual per generation. Tensors shared within the module stay shared
    in the copy, as deepcopy keeps them; anything else (hooks, parametrizations, other objects) is
    deep-copied as before."""
    tensors: list[tuple[dict[str, Any], str, torch.Tensor]] = []
    try:
        fresh = _copy_plain(network, {}, tensors)
    except _NotPlain:  # found before any tensor was copied: the fallback is the only copy made
        return copy.deepcopy(network)
    copies: dict[int, torch.Tensor] = {}
    for table, name, tensor in tensors:
        if id(tensor) not in copies:
            copies[id(tensor)] = _copy_tensor(tensor)
        table[name] = copies[id(tensor)]
    return fresh


def _copy_plain(
    module: nn.Module, memo: dict[int, nn.Module], tensors: list[tuple[dict[str, Any], str, torch.Tensor]]
) -> nn.Module:
    """The module's structure copied, each of its tensors left in ``tensors`` as (table, name, tensor) for
    the caller to copy once the whole module is known to be plain."""
    import torch

    if id(module) in memo:
        return memo[id(module)]
    fresh = object.__new__(type(module))
    memo[id(module)] = fresh
    state: dict[str, Any] = {}
    for key, value in module.__dict__.items():
        if key in ("_parameters", "_buffers"):
            table: dict[str, Any] = {}
            for name, tensor in value.items():
                table[name] = None
                if tensor is not None:
                    _check_plain(tensor)
                    tensors.append((table, name, tensor))
            state[key] = table
        elif key == "_modules":
            state[key] = {name: None if sub is None else _copy_plain(sub, memo, tensors) for name, sub in value.items()}
        elif isinstance(value, dict):
            if value:  # a registered hook, or state of a kind this copy does not know
                raise _NotPlain(key)
            state[key] = type(value)()
        elif isinstance(value, set) and all(type(item) is str for item in value):
            state[key] = set(value)  # the non-persistent buffers' names
        elif isinstance(value, _IMMUTABLE) or (
            isinstance(value, list | tuple) and all(isinstance(item, _IMMUTABLE) for item in value)
        ):
            state[key] = list(value) if isinstance(value, list) else value
        elif isinstance(value, torch.dtype | torch.device):
            state[key] = value
        else:
            raise _NotPlain(key)
    fresh.__dict__.update(state)
    return fresh


def _check_plain(tensor: torch.Tensor) -> None:
    import torch

    parameter = type(tensor) is torch.nn.Parameter
    if not (parameter or type(tensor) is torch.Tensor) or tensor.__dict__ or tensor._is_view() or tensor.is_sparse:
        raise _NotPlain("tensor")  # views, subclasses, sparse layouts: deepcopy knows their storage
    if not parameter and (tensor.grad is not None or tensor.requires_grad):
        raise _NotPlain("tensor")  # a buffer deepcopy would copy with its gradient


def _copy_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """A tensor as deepcopy copies it: a Parameter stays one, with its ``requires_grad`` and without its
    ``.grad`` (as ``Parameter.__deepcopy__`` does)."""
    import torch

    data = tensor.detach().clone(memory_format=torch.preserve_format)
    return torch.nn.Parameter(data, tensor.requires_grad) if type(tensor) is torch.nn.Parameter else data


class LossFitness(base.Fitness):
    """A single loss, minimised. Defined as an ordinary class, so it pickles and needs no ``creator``."""

    weights = (-1.0,)

    @property
    def loss(self) -> float:
        return self.values[0] if self.valid else float("inf")


OptimizerFactory = Callable[[Role, "nn.Module", float], "torch.optim.Optimizer | None"]


@dataclass(eq=False)
class Individual:
    """A member of one role's population: network, optimizer, hyper-parameters, fitness and extra state.

    :param network: the individual's genome as a module: a GAN's network, or tensors in its buffers.
    :param optimizer: None for a problem that varies its individuals without gradients.
    :param origin: the cell the individual was created or last trained in.
    :param extra: everything else kept about this individual, checkpointed, copied by selection and sent
        with the weights, like them: the problem's own tensors (a discriminator's augmentation
        probability, :meth:`evogan.api.Problem.extra_layout`), the sparsity controller's state under
        :data:`SPARSE` (masks and schedules) and the moving average of the weights that evaluation
        uses under :data:`AVERAGE` (``problem.g_ema``; absent until the first step).
    """

    role: Role
    network: nn.Module
    optimizer: torch.optim.Optimizer | None
    hyper: dict[str, float]
    origin: int
    uid: str
    fitness: LossFitness = field(default_factory=LossFitness)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def sparse(self) -> dict[str, Any]:
        """Deprecated: ``extra[SPARSE]`` (created empty on first read, so changes to it stick)."""
        _deprecated("evogan.individual.Individual.sparse")
        state: dict[str, Any] = self.extra.setdefault(SPARSE, {})
        return state

    @sparse.setter
    def sparse(self, state: dict[str, Any]) -> None:
        _deprecated("evogan.individual.Individual.sparse")
        self.extra[SPARSE] = state

    @property
    def average(self) -> dict[str, torch.Tensor] | None:
        """Deprecated: ``extra.get(AVERAGE)``."""
        _deprecated("evogan.individual.Individual.average")
        average: dict[str, torch.Tensor] | None = self.extra.get(AVERAGE)
        return average

    @average.setter
    def average(self, average: dict[str, torch.Tensor] | None) -> None:
        _deprecated("evogan.individual.Individual.average")
        if average is None:
            self.extra.pop(AVERAGE, None)
        else:
            self.extra[AVERAGE] = average

    @property
    def learning_rate(self) -> float:
        return self.hyper["lr"]

    @property
    def trainer(self) -> torch.optim.Optimizer:
        """The optimizer of an individual trained by gradient (every GAN individual has one)."""
        if self.optimizer is None:
            raise RuntimeError(f"individual {self.uid} ({self.role}) has no optimizer")
        return self.optimizer

    def set_hyper(self, hyper: dict[str, float]) -> None:
        self.hyper = hyper
        if self.optimizer is not None:
            for group in self.optimizer.param_groups:
                group["lr"] = hyper["lr"]

    def clone(self, make_optimizer: OptimizerFactory, *, keep_optimizer_state: bool = True) -> Individual:
        """A deep copy: weights, optimizer state, hyper-parameters and extra state travel together.

        Fitness is reset, as the copy will be re-evaluated.
        """
        network = copy_network(self.network)
        optimizer = None if self.optimizer is None else make_optimizer(self.role, network, self.hyper["lr"])
        if keep_optimizer_state and optimizer is not None and self.optimizer is not None:
            # load_state_dict keeps the tensors it is given: without the copy the clone and its parent
            # would share (and both advance) one set of Adam moments and step counts.
            optimizer.load_state_dict(copy.deepcopy(self.optimizer.state_dict()))
            for group in optimizer.param_groups:
                group["lr"] = self.hyper["lr"]
        return Individual(
            role=self.role,
            network=network,
            optimizer=optimizer,
            hyper=dict(self.hyper),
            origin=self.origin,
            uid=self.uid,
            extra=copy.deepcopy(self.extra),
        )

    def state(self) -> dict[str, Any]:
        """Everything needed to rebuild this individual, loadable with ``torch.load(weights_only=True)``.

        The :data:`SLOTS` of ``extra`` keep their own keys, the layout of checkpoints before 0.3."""
        return {
            "role": self.role,
            "uid": self.uid,
            "origin": self.origin,
            "hyper": dict(self.hyper),
            "fitness": list(self.fitness.values) if self.fitness.valid else [],
            "network": self.network.state_dict(),
            "optimizer": None if self.optimizer is None else self.optimizer.state_dict(),
            "sparse": self.extra.get(SPARSE, {}),
            "average": self.extra.get(AVERAGE),
            "extra": layout_extra(self),
        }

    @classmethod
    def from_state(
        cls, state: dict[str, Any], network: nn.Module, make_optimizer: OptimizerFactory
    ) -> Individual:
        network.load_state_dict(state["network"])
        optimizer = None
        if state["optimizer"] is not None:
            optimizer = make_optimizer(state["role"], network, state["hyper"]["lr"])
            if optimizer is not None:
                optimizer.load_state_dict(state["optimizer"])
        individual = cls(
            role=state["role"],
            network=network,
            optimizer=optimizer,
            hyper=dict(state["hyper"]),
            origin=int(state["origin"]),
            uid=state["uid"],
            extra=dict(state.get("extra") or {}),
        )
        if state["sparse"]:
            individual.extra[SPARSE] = state["sparse"]
        if state.get("average") is not None:  # absent from checkpoints before 0.3
            individual.extra[AVERAGE] = state["average"]
        if state["fitness"]:
            individual.fitness.values = tuple(state["fitness"])
        return individual


def layout_extra(individual: Individual) -> dict[str, torch.Tensor]:
    """The problem's own tensors in ``individual.extra`` (its ``extra_layout``): all but the :data:`SLOTS`."""
    return {name: value for name, value in individual.extra.items() if name not in SLOTS}


def wire_masks(individual: Individual) -> dict[str, torch.Tensor]:
    """Parameter name -> boolean mask of ``individual``'s masked weights (the sparsity controller's
    ``extra[SPARSE]["masks"]``); empty for a dense individual."""
    masks: dict[str, torch.Tensor] = individual.extra.get(SPARSE, {}).get("masks") or {}
    return masks


def individual_tensors(individual: Individual) -> Iterator[torch.Tensor]:
    """Every tensor an individual's numbers live in: its network's parameters and buffers, its moving
    average, its optimizer state and the problem's ``extra`` tensors (not the sparsity state)."""
    yield from individual.network.parameters()
    yield from individual.network.buffers()
    yield from (individual.extra.get(AVERAGE) or {}).values()
    if individual.optimizer is not None:
        for state in individual.optimizer.state.values():
            yield from (value for value in state.values() if hasattr(value, "is_floating_point"))
    yield from layout_extra(individual).values()


def all_finite(tensors: Iterable[torch.Tensor]) -> bool:
    """Whether every floating value of ``tensors`` is finite; one host sync per device they live on."""
    import torch

    flags: dict[torch.device, list[torch.Tensor]] = {}
    for tensor in tensors:
        if tensor.is_floating_point() or tensor.is_complex():
            flags.setdefault(tensor.device, []).append(torch.isfinite(tensor).all())
    return all(bool(torch.stack(on_device).all()) for on_device in flags.values())


def _deprecated(name: str) -> None:
    from evogan import deprecated  # imported at first use: this module stays importable on its own

    deprecated.warn(name, stacklevel=4)


__all__ = [
    "AVERAGE",
    "ROLES",
    "SLOTS",
    "SPARSE",
    "Individual",
    "LossFitness",
    "OptimizerFactory",
    "Role",
    "all_finite",
    "individual_tensors",
    "layout_extra",
    "wire_masks",
]
