"""An individual's optimizer state as envelope tensors, so a selected neighbour keeps its momentum.

Lipizzaner ships Adam's state with every individual; without it a foreign parent restarts from zero
moments, whose first steps are sign-sized jolts (Adam's bias-corrected step is about ``lr * sign(g)``).
Each per-parameter state tensor travels as ``optimizer/<role>/<parameter name>/<key>`` (Adam: ``step``,
``exp_avg``, ``exp_avg_sq``); a masked parameter's per-element state uses the weight's mask, so it goes
as values plus bitmap like the weight and its masked positions arrive as zeros (they are zero already:
:func:`evogan.sparse.masks.apply_masks` clears them after every step). Hyper-parameters do not travel:
the receiver builds the optimizer from its own recipe and the sender's learning rate.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

import torch

from evogan.api import Role
from evogan.errors import MessageRejected
from evogan.individual import Individual

PREFIX = "optimizer/"


def optimizer_tensors(
    role: Role, individual: Individual
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """``(tensors, masks)`` of ``individual``'s optimizer state, named for the envelope.

    Parameters without state (no step taken yet) send nothing. A state value that is not a tensor
    cannot travel (torch's optimizers keep tensors only) and raises ``ValueError``.
    """
    names = {id(p): n for n, p in individual.network.named_parameters()}
    masks = individual.sparse.get("masks") or {}
    tensors: dict[str, torch.Tensor] = {}
    tensor_masks: dict[str, torch.Tensor] = {}
    for group in individual.optimizer.param_groups:
        for param in group["params"]:
            for key, value in individual.optimizer.state.get(param, {}).items():
                if not isinstance(value, torch.Tensor):
                    raise ValueError(f"optimizer state {key!r} is a {type(value).__name__}, not a tensor")
                name = f"{PREFIX}{role}/{names[id(param)]}/{key}"
                tensors[name] = value
                mask = masks.get(names[id(param)])
                if mask is not None and value.shape == param.shape:
                    tensor_masks[name] = mask
    return tensors, tensor_masks


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
) -> dict[Role, dict[str, dict[str, torch.Tensor]]]:
    """Role -> parameter name -> key -> tensor, from decoded optimizer tensors; anything a local
    optimizer could not load raises :class:`MessageRejected`.

    :param expected: the local model's ``role/name -> (dtype, shape)``, as the weights are checked.
    :param weight_masks: the masks that came with the weights (``role/name``); a masked parameter's
        per-element state must come with the same mask.
    """
    out: dict[Role, dict[str, dict[str, torch.Tensor]]] = {}
    for name, tensor in state.items():
        role, _, rest = name[len(PREFIX) :].partition("/")
        parameter, _, key = rest.rpartition("/")
        target = expected.get(f"{role}/{parameter}")
        if role not in ("generator", "discriminator") or not key or target is None:
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
        out.setdefault(cast(Role, role), {}).setdefault(parameter, {})[key] = tensor
    for role, parameters in out.items():
        keys = {frozenset(entry) for entry in parameters.values()}
        if len(keys) != 1:
            raise MessageRejected(f"optimizer state: the {role}'s parameters carry different keys")
    return out


def load_optimizer_state(individual: Individual, state: Mapping[str, Mapping[str, torch.Tensor]]) -> None:
    """Load ``state`` (parameter name -> key -> tensor) into ``individual.optimizer``, keeping its
    hyper-parameters; parameters not named start without state."""
    optimizer = individual.optimizer
    index = {id(p): i for i, p in enumerate(p for g in optimizer.param_groups for p in g["params"])}
    parameters = dict(individual.network.named_parameters())
    packed = optimizer.state_dict()
    packed["state"] = {
        index[id(parameters[name])]: {key: value.clone() for key, value in entry.items()}
        for name, entry in state.items()
    }
    optimizer.load_state_dict(packed)


__all__ = ["PREFIX", "checked_state", "load_optimizer_state", "optimizer_tensors", "split"]
