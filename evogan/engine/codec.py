"""A cell's side of the wire: its best individuals as one envelope, a neighbour's envelope back as checked
weights, masks, optimizer state and facts.

Everything a message must pass before a cell adopts it lives here: the envelope's own checks
(:func:`evogan.transport.envelope.decode`), the sender (the topic's cell, the run), the recipe digest,
the tensor manifest against the local model, the masked encoding (:mod:`evogan.transport.masked`), the
optimizer state (keys and shapes as this cell's own optimizer keeps them) and the meta fields (learning
rate, id, fitness, and the controller state, which the sparsity controller checks:
:meth:`~evogan.adversarial.contracts.SparsityController.check_wire_state`), each type-checked before use.
A failure raises :class:`~evogan.errors.MessageRejected` naming the field (the cell drops and counts it),
except a neighbour whose messages never carried this recipe: that is a misconfigured run, stopped at once
with the cell named.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from evogan.api import ROLES, Role
from evogan.engine.optimizer_state import checked_state, moment_manifest, optimizer_tensors, split, state_layout
from evogan.errors import MessageRejected, RunFailure
from evogan.individual import AVERAGE, SPARSE, Individual, all_finite, layout_extra, wire_masks
from evogan.transport import envelope
from evogan.transport.masked import decode_masked, encode_masked

Manifest = Mapping[str, tuple[torch.dtype, tuple[int, ...]]]


class WireState(Protocol):
    """What the codec needs of the controller whose per-individual state travels with the weights (a GAN
    problem's sparsity controller, :class:`evogan.adversarial.contracts.SparsityController`): a protocol, so
    the engine imports no problem's contracts."""

    def wire_state(self, state: Mapping[str, Any]) -> dict[str, Any]: ...

    def check_wire_state(self, state: Any, role: Role, local: Mapping[str, Any] | None) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Model:
    """One role's model as a neighbour sent it, validated.

    :param weights: the network's state dict.
    :param masks: parameter name -> boolean mask (empty for a dense model).
    :param optimizer: the optimizer's per-parameter state, or None when the message carries none.
    :param lr: the sender's learning rate (None: not sent).
    :param uid: the sender's individual id (None: not sent).
    :param fitness: the sender's last loss (None: not evaluated yet, e.g. inside a generation).
    :param sparse: the sparsity controller's wire state, checked (None: dense).
    :param average: the moving average of the parameters (``problem.g_ema``), or None.
    :param extra: the problem's own tensors about the individual (``Problem.extra_layout``).
    """

    weights: dict[str, torch.Tensor]
    masks: dict[str, torch.Tensor]
    optimizer: Mapping[str, Mapping[str, torch.Tensor]] | None
    lr: float | None
    uid: str | None
    fitness: float | None
    sparse: dict[str, Any] | None
    average: dict[str, torch.Tensor] | None = None
    extra: dict[str, torch.Tensor] = field(default_factory=dict)


AVERAGE_PREFIX = "~average/"  # prefix of the moving-average tensors: ``~average/<role>/<parameter>``
EXTRA = "~extra/"  # prefix of the problem's own tensors about an individual: ``~extra/<role>/<name>``


@dataclass(frozen=True)
class Message:
    """A decoded neighbour message: its envelope header and each role's model."""

    header: dict[str, Any]
    models: dict[Role, Model]


class Codec:
    """Encodes one cell's messages and decodes its neighbours'.

    :param cell: the cell this codec serves.
    :param run_id: the run every message must belong to.
    :param recipe: the recipe digest every message must carry.
    :param optimizer_state: whether sent messages carry the optimizer state.
    :param max_bytes: the payload cap of a received message.
    :param roles: the problem's roles, each carried under its own name.
    :param wire: ``fp32``, or ``bf16`` to send float32 tensors (not scalars) in half the bytes.
    :param sparsity: the run's sparsity controller, which says what of its state travels and checks a
        neighbour's (None: the problem has none).
    """

    def __init__(
        self,
        cell: int,
        *,
        run_id: str,
        recipe: str,
        optimizer_state: bool,
        max_bytes: int,
        roles: tuple[Role, ...] = ROLES,
        wire: str = "fp32",
        sparsity: WireState | None = None,
    ) -> None:
        self.cell, self.run_id, self.recipe, self.roles = cell, run_id, recipe, roles
        self.sparsity = sparsity
        self.wire = torch.bfloat16 if wire == "bf16" else torch.float32
        self.optimizer_state, self.max_bytes = optimizer_state, max_bytes
        self.agreed: set[int] = set()  # neighbours whose messages carried this recipe at least once
        # What this cell's own messages held, per role (learnt in encode; a run's cells publish before
        # they first gather): a neighbour's optimizer and controller state must look the same.
        self.layouts: dict[str, dict[str, bool]] = {}
        self.sparse: dict[str, dict[str, Any] | None] = {}

    def encode(
        self,
        best: Mapping[Role, Individual],
        *,
        generation: int,
        substep: int,
        sequence: int,
        incarnation: int,
    ) -> list[bytes | memoryview]:
        """The envelope of each role's ``best`` individual. Masked weights (and their per-element
        optimizer state) travel as active values plus a bitmap, so bytes shrink with density."""
        tensors: dict[str, torch.Tensor] = {}
        sparse_info = {}
        for role, individual in best.items():
            masks = wire_masks(individual)
            state = {f"{role}/{k}": v for k, v in individual.network.state_dict().items()}
            tensors.update(encode_masked(state, {f"{role}/{k}": m for k, m in masks.items()}))
            if self.optimizer_state:
                tensors.update(encode_masked(*optimizer_tensors(role, individual)))
                self.layouts[role] = state_layout(individual) or self.layouts.get(role, {})
            average = individual.extra.get(AVERAGE)
            if average is not None:
                tensors.update({f"{AVERAGE_PREFIX}{role}/{k}": v for k, v in average.items()})
            tensors.update({f"{EXTRA}{role}/{k}": v for k, v in layout_extra(individual).items()})
            controller_state = individual.extra.get(SPARSE)
            if controller_state:
                # without a controller (a bare codec) the masks travel with an empty state
                sparse_info[role] = self.sparsity.wire_state(controller_state) if self.sparsity else {}
            self.sparse[role] = sparse_info.get(role)
        if self.wire != torch.float32:  # scalars (Adam's step count) keep their exact value
            tensors = {k: v.to(self.wire) if v.dtype == torch.float32 and v.dim() else v for k, v in tensors.items()}
        meta = {
            "recipe": self.recipe,
            # an offspring inside a generation has no fitness yet: None keeps the receiver's last value
            "fitness": {role: _loss_or_none(best[role]) for role in self.roles},
            "lr": {role: best[role].hyper.get("lr") for role in self.roles},
            "uid": {role: best[role].uid for role in self.roles},
            "sparse": sparse_info,
        }
        return envelope.encode(
            tensors,
            run=self.run_id,
            cell=self.cell,
            generation=generation,
            substep=substep,
            sequence=sequence,
            incarnation=incarnation,
            meta=meta,
        )

    def decode(
        self,
        peer: int,
        frames: Any,
        expected: Manifest,
        parameters: Collection[str] = (),
        extras: Manifest | None = None,
    ) -> Message:
        """Check and decode ``peer``'s message against the local model's ``expected`` manifest
        (prefixed names such as ``generator/0.weight`` -> dtype and shape; ``parameters``: which of them
        are parameters, all of which a role's moving average must hold; ``extras``: the problem's
        ``extra_layout``, prefixed the same way). Every failure is ``MessageRejected`` naming the field,
        before anything of the message is used."""
        received = envelope.decode(frames, max_bytes=self.max_bytes)
        tensors = dict(received.tensors)
        if self.wire != torch.float32:  # back to the local models' float32 before any check
            tensors = {k: v.float() if v.dtype == self.wire else v for k, v in tensors.items()}
        header = received.header
        self._check_sender(peer, header)
        meta = header["meta"]
        facts = {key: _per_role(meta, key, self.roles) for key in ("fitness", "lr", "uid", "sparse")}
        # a moving average holds every parameter of its role, as the local model has them
        averaged = {name: expected[name] for name in parameters if name in expected}
        averages = _carried(tensors, AVERAGE_PREFIX, averaged, self.roles)
        extra = _carried(tensors, EXTRA, extras or {}, self.roles)
        model = {k: v for k, v in tensors.items() if not k.startswith((AVERAGE_PREFIX, EXTRA))}
        weights, moments = split(model)
        state, masks = decode_masked(weights, expected)
        sparse_moments, moment_masks = decode_masked(moments, moment_manifest(moments, expected), complete=False)
        optimizer = checked_state(sparse_moments, moment_masks, expected, masks, self.layouts)
        models = {}
        for role in self.roles:
            prefix = f"{role}/"
            lr, uid, loss = facts["lr"].get(role), facts["uid"].get(role), facts["fitness"].get(role)
            if lr is not None and not (_number(lr) and math.isfinite(lr) and lr >= 0):
                raise MessageRejected(f"meta.lr: the {role}'s learning rate is not a finite number >= 0")
            if uid is not None and not isinstance(uid, str):
                raise MessageRejected(f"meta.uid: the {role}'s id is not a string")
            if loss is not None and not _number(loss):
                raise MessageRejected(f"meta.fitness: the {role}'s loss is not a number")
            role_masks = {k[len(prefix) :]: m for k, m in masks.items() if k.startswith(prefix)}
            sparse = facts["sparse"].get(role)
            if role not in facts["sparse"] and role_masks:
                raise MessageRejected(f"meta.sparse: the {role} has masks but no controller state")
            if sparse and role in self.sparse and self.sparse[role] is None:
                raise MessageRejected(f"meta.sparse: the {role} has a controller state, this cell's none")
            if role in facts["sparse"]:
                sparse = self._checked_state(sparse, role) or None
            _check_finite(role, state, prefix, optimizer.get(role), averages.get(role), extra.get(role))
            models[role] = Model(
                weights={k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)},
                masks=role_masks,
                optimizer=optimizer.get(role),
                lr=None if lr is None else float(lr),
                uid=uid,
                fitness=None if loss is None else float(loss),
                sparse=sparse,
                average=averages.get(role),
                extra=extra.get(role, {}),
            )
        return Message(header=header, models=models)

    def _checked_state(self, state: Any, role: Role) -> dict[str, Any]:
        """A neighbour's controller state, checked by this cell's controller (without one: any object)."""
        if self.sparsity is not None:
            return self.sparsity.check_wire_state(state, role, self.sparse.get(role))
        if not isinstance(state, dict):
            raise MessageRejected(f"meta.sparse: the {role}'s state is not an object")
        return state

    def _check_sender(self, peer: int, header: Mapping[str, Any]) -> None:
        if header["cell"] != peer:
            raise MessageRejected("sender: cell differs from the topic it was gathered for")
        if header["run"] != self.run_id:
            raise MessageRejected("sender: message from another run")
        theirs = header["meta"].get("recipe")
        if not isinstance(theirs, str):
            raise MessageRejected("meta.recipe: not a string")
        if theirs == self.recipe:
            self.agreed.add(peer)
            return
        if peer not in self.agreed:
            raise RunFailure(
                f"cell {self.cell}: neighbour cell {peer} runs recipe {theirs}, this node {self.recipe} "
                "(recipe hash differs): every node must run the same recipe"
            )
        raise MessageRejected("recipe hash differs: nodes run different recipes")


def _carried(
    tensors: Mapping[str, torch.Tensor], prefix: str, layout: Manifest, roles: tuple[Role, ...]
) -> dict[Role, dict[str, torch.Tensor]]:
    """Role -> name -> tensor, from the tensors named ``<prefix><role>/<name>`` (a moving average, a
    problem's ``extra``): each one ``layout`` names (``role/name``), in its dtype and shape, and a role's
    all of them or none. The field of a rejection is the prefix's word (``average``, ``extra``)."""
    field = prefix.strip("~/")
    out: dict[Role, dict[str, torch.Tensor]] = {}
    for key, tensor in tensors.items():
        if not key.startswith(prefix):
            continue
        name = key[len(prefix) :]
        role, _, local = name.partition("/")
        if role not in roles or name not in layout:
            raise MessageRejected(f"{field}: {name!r} is not one the local model keeps")
        if (tensor.dtype, tuple(tensor.shape)) != tuple(layout[name]):
            raise MessageRejected(f"{field}: {name!r} differs from the local model in dtype or shape")
        out.setdefault(role, {})[local] = tensor
    for role, held in out.items():
        if len(held) != sum(1 for name in layout if name.startswith(f"{role}/")):
            raise MessageRejected(f"{field}: the {role}'s lacks some of its tensors")
    return out


def _check_finite(
    role: Role,
    state: Mapping[str, torch.Tensor],
    prefix: str,
    optimizer: Mapping[str, Mapping[str, torch.Tensor]] | None,
    average: Mapping[str, torch.Tensor] | None,
    extra: Mapping[str, torch.Tensor] | None,
) -> None:
    """A model with a NaN or Inf anywhere is a diverged neighbour's: dropped like a malformed message,
    so the cell keeps the last finite copy it had (:mod:`evogan.engine.divergence`)."""
    parts = {
        "weights": [v for k, v in state.items() if k.startswith(prefix)],
        "optimizer state": [t for moments in (optimizer or {}).values() for t in moments.values()],
        "average": list((average or {}).values()),
        "extra": list((extra or {}).values()),
    }
    for part, tensors in parts.items():
        if not all_finite(tensors):
            raise MessageRejected(f"non-finite {part}: the {role}'s holds NaN or Inf")


def _per_role(meta: Mapping[str, Any], key: str, roles: tuple[Role, ...]) -> dict[str, Any]:
    """``meta[key]``: an object of role -> value (absent: empty); any other shape is rejected."""
    value = meta.get(key, {})
    if not isinstance(value, dict) or not set(value) <= set(roles):
        raise MessageRejected(f"meta.{key}: not an object of roles")
    return value


def _number(value: Any) -> bool:
    return type(value) in (int, float)  # a JSON number; never a bool


def _loss_or_none(individual: Individual) -> float | None:
    return individual.fitness.values[0] if individual.fitness.valid else None


__all__ = ["Codec", "Manifest", "Message", "Model"]
