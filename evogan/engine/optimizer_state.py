"""An individual's optimizer state as envelope tensors, so a selected neighbour keeps its momentum.

Lipizzaner ships Adam's state with every individual; without it a foreign parent restarts from zero
moments, whose first steps are sign-sized jolts (Adam's bias-corrected step is about ``lr * sign(g)``).
Each per-parameter state tensor travels as ``optimizer/<role>/<parameter name>/<key>`` (Adam: ``step``,
``exp_avg``, ``exp_avg_sq``); a masked parameter's per-element state uses the weight's mask, so it goes
as values plus bitmap like the weight and its masked positions arrive as zeros (they are zero already: the
sparsity controller clears them after every step). Hyper-parameters do not travel:
the receiver builds the optimizer from its own recipe and the sender's learning rate.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import torch

from evogan.api import Role
from evogan.errors import MessageRejected
from evogan.individual import Individual, wire_masks
from evogan.transport.masked import VALUES

PREFIX = "optimizer/"


def optimizer_tensors(
    role: Role, individual: Individual
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """``(tensors, masks)`` of ``individual``'s optimizer state, named for the envelope.

    Parameters without state (no step taken yet) send nothing. A state value that is not a tensor
    cannot travel (torch's optimizers keep tensors only) and raises ``ValueError``.
    """
    names = {id(p): n for n, p in individual.network.named_parameters()}
    masks = wire_masks(individual)
    tensors: dict[str, torch.Tensor] = {}
    tensor_masks: dict[str, torch.Tensor] = {}
    optimizer = individual.optimizer
    if optimizer is None:  # varied without gradients: nothing to send
        return tensors, tensor_masks
    for group in optimizer.param_groups:
        for param in group["params"]:
            for key, value in optimizer.state.get(param, {}).items():
                if not isinstance(value, torch.Tensor):
                    raise ValueError(f"optimizer state {key!r} is a {type(value).__name__}, not a tensor")
                name = f"{PREFIX}{role}/{names[id(param)]}/{key}"
                tensors[name] = value
                mask = masks.get(names[id(param)])
                if mask is not None and value.shape == param.shape:
                    tensor_masks[name] = mask
    return tensors, tensor_masks


def state_layout(individual: Individual) -> dict[str, bool]:
    """Key -> whether it is per element (shaped like its parameter) in ``individual``'s optimizer state:
    what a neighbour's state must look like for this optimizer to step on it (Adam: ``step`` is a
    scalar, ``exp_avg`` and ``exp_avg_sq`` per element). Empty before the first step."""
    layout: dict[str, bool] = {}
    if individual.optimizer is None:
        return layout
    for group in individual.optimizer.param_groups:
        for param in group["params"]:
            for key, value in individual.optimizer.state.get(param, {}).items():
                per_element = isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape == param.shape
                layout[key] = layout.get(key, False) or per_element
    return layout


def moment_manifest(
    names: Iterable[str], expected: Mapping[str, tuple[torch.dtype, tuple[int, ...]]]
) -> dict[str, tuple[torch.dtype, tuple[int, ...]]]:
    """Dense name -> its parameter's (dtype, shape) for optimizer tensors sent as values plus bitmap, so
    that :func:`~evogan.transport.masked.decode_masked` checks a bitmap's shape before densifying it."""
    out = {}
    for name in names:
        if name.endswith(VALUES):
            dense = name.removesuffix(VALUES)
            target = expected.get(dense[len(PREFIX) :].rpartition("/")[0])
            if target is None:
                raise MessageRejected(f"optimizer state: tensor {dense!r} names no local parameter")
            out[dense] = target
    return out


def split(tensors: Mapping[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """``(model tensors, optimizer tensors)`` of a decoded envelope."""
    model = {k: v for k, v in tensors.items() if not k.startswith(PREFIX)}
    optimizer = {k: v for k, v in tensors.items() if k.startswith(PREFIX)}
    return model, optimizer


def checked_state(
    state: Mapping[str, torch.Tensor],
    masks: Mapping[str, torch.Tensor],
    expected: Mapping[str, tuple[torch.dtype, tuple[int, ...]]],
    weight_masks: Mapping[str, torch.Tensor],
    layouts: Mapping[str, Mapping[str, bool]] | None = None,
) -> dict[Role, dict[str, dict[str, torch.Tensor]]]:
    """Role -> parameter name -> key -> tensor, from decoded optimizer tensors; anything a local
    optimizer could not load or step on raises :class:`MessageRejected`.

    :param expected: the local model's ``role/name -> (dtype, shape)``, as the weights are checked.
    :param weight_masks: the masks that came with the weights (``role/name``); per-element state must share them.
    :param layouts: role -> this cell's own :func:`state_layout`, where known: a neighbour's state must
        have exactly its keys, each per element or scalar alike (else the first step would fail).
    """
    out: dict[Role, dict[str, dict[str, torch.Tensor]]] = {}
    for name, tensor in state.items():
        role, _, rest = name[len(PREFIX) :].partition("/")
        parameter, _, key = rest.rpartition("/")
        target = expected.get(f"{role}/{parameter}")
        if not key or target is None:
            raise MessageRejected(f"optimizer state: tensor {name!r} names no local parameter")
        dtype, shape = target
        if tuple(tensor.shape) not in (shape, ()) or not tensor.is_floating_point():
            raise MessageRejected(f"optimizer state: tensor {name!r} does not fit its parameter")
        if tuple(tensor.shape) == shape and tensor.dtype != dtype:
            raise MessageRejected(f"optimizer state: tensor {name!r} differs in dtype from its parameter")
        weight_mask, mask = weight_masks.get(f"{role}/{parameter}"), masks.get(name)
        per_element = weight_mask is not None and tuple(tensor.shape) == shape
        if per_element and (mask is None or weight_mask is None or not torch.equal(mask, weight_mask)):
            raise MessageRejected(f"optimizer state: tensor {name!r} has another mask than its weight")
        out.setdefault(role, {}).setdefault(parameter, {})[key] = tensor
    for role, parameters in out.items():
        keys = {frozenset(entry) for entry in parameters.values()}
        if len(keys) != 1:
            raise MessageRejected(f"optimizer state: the {role}'s parameters carry different keys")
        layout = (layouts or {}).get(role)
        if not layout:
            continue
        if keys.pop() != set(layout):
            raise MessageRejected(f"optimizer state: the {role}'s keys are not this optimizer's")
        for parameter, entry in parameters.items():
            shape = expected[f"{role}/{parameter}"][1]
            for key, tensor in entry.items():
                if tuple(tensor.shape) != (shape if layout[key] else ()):
                    raise MessageRejected(f"optimizer state: {role} {key!r} of {parameter!r} is not shaped as here")
    return out


def load_optimizer_state(individual: Individual, state: Mapping[str, Mapping[str, torch.Tensor]]) -> None:
    """Load ``state`` (parameter name -> key -> tensor) into ``individual.optimizer``, keeping its
    hyper-parameters; parameters not named start without state."""
    optimizer = individual.trainer
    index = {id(p): i for i, p in enumerate(p for g in optimizer.param_groups for p in g["params"])}
    parameters = dict(individual.network.named_parameters())
    packed = optimizer.state_dict()
    packed["state"] = {
        index[id(parameters[name])]: {key: value.clone() for key, value in entry.items()}
        for name, entry in state.items()
    }
    optimizer.load_state_dict(packed)


__all__ = [
    "PREFIX",
    "checked_state",
    "load_optimizer_state",
    "moment_manifest",
    "optimizer_tensors",
    "split",
    "state_layout",
]
