"""Sparse tensors for the exchange envelope: a masked weight travels as its active values plus a bitmap.

A masked tensor ``w`` travels as ``<name>.__values__`` (``w[mask]``, row-major), ``<name>.__bitmap__`` (the mask, 8
positions per byte, least significant bit first, padding 0) and ``<name>.__shape__`` (int64, so a message decodes
on its own): about ``4 d n + n / 8`` bytes at density d instead of ``4 n`` for float32. Decoding rebuilds the dense
tensors bit for bit; any inconsistency, and controller meta that fails :func:`check_sparse_meta`, raises
:class:`~evogan.errors.MessageRejected`, as the envelope does for bad messages.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable, Mapping
from typing import Any

import torch

from evogan.errors import MessageRejected
from evogan.sparse.flops import NetworkFlops, new_ledger
from evogan.sparse.state import FORMAT
from evogan.transport.envelope import is_count, is_shape

VALUES = ".__values__"
BITMAP = ".__bitmap__"
SHAPE = ".__shape__"
_BITS = torch.tensor([1, 2, 4, 8, 16, 32, 64, 128], dtype=torch.uint8)


def pack_bits(mask: torch.Tensor) -> torch.Tensor:
    """Flattened boolean ``mask`` -> uint8 bitmap of ``ceil(n / 8)`` bytes, LSB first."""
    flat = mask.reshape(-1).to(torch.uint8)
    padded = torch.zeros(math.ceil(flat.numel() / 8) * 8, dtype=torch.uint8, device=flat.device)
    padded[: flat.numel()] = flat
    return (padded.view(-1, 8) * _BITS.to(flat.device)).sum(dim=1, dtype=torch.uint8)


def unpack_bits(bitmap: torch.Tensor, n: int) -> torch.Tensor:
    """Inverse of :func:`pack_bits`: the first ``n`` bits as a flat boolean tensor."""
    bits = (bitmap.reshape(-1, 1) & _BITS.to(bitmap.device)) != 0
    return bits.reshape(-1)[:n]


def encode_sparse(
    state: Mapping[str, torch.Tensor], masks: Mapping[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """Envelope tensors for ``state`` with every tensor named in ``masks`` sent as values + bitmap."""
    out: dict[str, torch.Tensor] = {}
    for name, tensor in state.items():
        mask = masks.get(name)
        if mask is None:
            out[name] = tensor
            continue
        if mask.shape != tensor.shape:
            raise ValueError(
                f"mask of {name!r} has shape {tuple(mask.shape)}, the tensor {tuple(tensor.shape)}"
            )
        mask = mask.to(tensor.device, torch.bool)
        out[name + VALUES] = tensor.detach()[mask]
        out[name + BITMAP] = pack_bits(mask)
        out[name + SHAPE] = torch.tensor(list(tensor.shape), dtype=torch.int64)
    missing = set(masks) - set(state)
    if missing:
        raise ValueError(f"masks name tensors missing from the state: {sorted(missing)}")
    return out


def decode_sparse(
    tensors: Mapping[str, torch.Tensor],
    expected: Mapping[str, tuple[torch.dtype, tuple[int, ...]]] | None = None,
    *,
    complete: bool = True,
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """``(dense state, masks)`` from :func:`encode_sparse` output; a bad entry raises MessageRejected.

    ``expected`` (dense name -> (dtype, shape), as the envelope's) is checked before any dense tensor is
    allocated. Pass it here rather than to ``envelope.decode``: the length of ``__values__`` depends on
    the sender's mask, so the envelope cannot pin it. ``complete=False`` checks only the names
    ``expected`` holds, and requires every sparse tensor to be one of them (so no bitmap is densified
    before its shape is known to fit).
    """
    names = {k.removesuffix(VALUES) for k in tensors if not k.endswith((BITMAP, SHAPE))}
    if expected is not None and complete and names != set(expected):
        missing, extra = sorted(set(expected) - names)[:3], sorted(names - set(expected))[:3]
        raise MessageRejected(
            f"manifest: tensor names differ from the local model (missing {missing}, unexpected {extra})"
        )
    state: dict[str, torch.Tensor] = {}
    masks: dict[str, torch.Tensor] = {}
    for key, tensor in tensors.items():
        if key.endswith((BITMAP, SHAPE)):
            continue
        if not key.endswith(VALUES):
            if expected is not None and key in expected and (tensor.dtype, tuple(tensor.shape)) != tuple(expected[key]):
                raise MessageRejected(f"manifest: tensor {key!r} differs from the local model in dtype or shape")
            state[key] = tensor
            continue
        name = key[: -len(VALUES)]
        if expected is not None and name not in expected:
            raise MessageRejected(f"manifest: sparse tensor {name!r} names nothing of the local model")
        state[name], masks[name] = _densify(name, tensor, tensors, None if expected is None else expected[name])
    orphans = [
        k for k in tensors if k.endswith((BITMAP, SHAPE)) and k.rsplit(".__", 1)[0] + VALUES not in tensors
    ]
    if orphans:
        raise MessageRejected(f"sparse: bitmap or shape without values: {sorted(orphans)[:3]}")
    return state, masks


def _densify(
    name: str,
    values: torch.Tensor,
    tensors: Mapping[str, torch.Tensor],
    expected: tuple[torch.dtype, tuple[int, ...]] | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The dense tensor and mask of sparse tensor ``name`` (``expected``: its local dtype and shape)."""
    bitmap, shape = tensors.get(name + BITMAP), tensors.get(name + SHAPE)
    if name in tensors:
        raise MessageRejected(f"sparse: tensor {name!r} is sent both dense and as values")
    if bitmap is None or shape is None:
        raise MessageRejected(f"sparse: tensor {name!r} lacks its bitmap or shape")
    if bitmap.dtype != torch.uint8 or shape.dtype != torch.int64 or shape.dim() != 1 or values.dim() != 1:
        raise MessageRejected(f"sparse: tensor {name!r} has bad dtypes or ranks")
    dims = [int(v) for v in shape.tolist()]
    if not is_shape(dims):
        raise MessageRejected(f"sparse: tensor {name!r} has no valid shape")
    if expected is not None and (values.dtype, tuple(dims)) != tuple(expected):
        raise MessageRejected(f"manifest: tensor {name!r} differs from the local model in dtype or shape")
    n = math.prod(dims)
    if bitmap.numel() != math.ceil(n / 8):
        raise MessageRejected(f"sparse: tensor {name!r} has a bitmap of {bitmap.numel()} bytes for {n} elements")
    bits = unpack_bits(bitmap, bitmap.numel() * 8)
    if bool(bits[n:].any()):
        raise MessageRejected(f"sparse: tensor {name!r} has padding bits set")
    flat_mask = bits[:n]
    if int(flat_mask.sum()) != values.numel():
        raise MessageRejected(f"sparse: tensor {name!r} has {values.numel()} values for {int(flat_mask.sum())} bits")
    dense = torch.zeros(n, dtype=values.dtype, device=values.device)
    dense[flat_mask.to(values.device)] = values
    return dense.view(dims), flat_mask.view(dims)


TENSOR_STATE = ("masks", "sema")  # tensor-valued entries: masks travel as bitmaps, SEMA stays home


def sparse_meta(sparse: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON-safe part of ``individual.sparse`` (everything but tensors) for the envelope's meta.

    The generator's SEMA average is not sent: a neighbour's copy is evaluated with its live weights."""
    return json.loads(json.dumps({k: v for k, v in sparse.items() if k not in TENSOR_STATE}))


def sparse_state(meta: Mapping[str, Any], masks: Mapping[str, torch.Tensor]) -> dict[str, Any]:
    """Inverse of :func:`sparse_meta`: an ``individual.sparse`` from the meta and decoded masks."""
    return {**copy.deepcopy(dict(meta)), "masks": dict(masks)}


# ------------------------------------------------------------------------ a neighbour's controller state
Check = Callable[[Any], bool]


class _Malformed(Exception):
    """The dotted path of a state field that fails its schema."""


def _number(value: Any) -> bool:
    return type(value) in (int, float)  # not bool


def _numbers(value: Any) -> bool:
    """An object of numbers (FLOPs per parameter name)."""
    return isinstance(value, dict) and all(_number(v) for v in value.values())


def _list(item: Check, length: int | None = None) -> Check:
    return lambda v: isinstance(v, list) and (length is None or len(v) == length) and all(item(x) for x in v)


def _optional(check: Check) -> Check:
    return lambda v: v is None or check(v)


def _fields(schema: Mapping[str, Check], required: tuple[str, ...]) -> Check:
    """An object whose ``required`` keys exist and whose known keys pass their checks; other keys pass
    (the controller never reads them)."""

    def check(value: Any) -> bool:
        if not isinstance(value, dict):
            return False
        for key in required:
            if key not in value:
                raise _Malformed(key)
        for key, inner in schema.items():
            if key not in value:
                continue
            try:
                ok = inner(value[key])
            except _Malformed as deeper:
                raise _Malformed(f"{key}.{deeper}") from None
            if not ok:
                raise _Malformed(key)
        return True

    return check


_PAIR = _list(_number, 2)
_LEDGER = tuple(new_ledger())  # the keys the producers write, so the schema follows them
_COUNTED = tuple(NetworkFlops().to_state())
_BALANCE = _fields(
    {
        **dict.fromkeys(("clock", "samples", "due", "decisions", "warmup_end"), is_count),
        "window": _list(_list(_number, 3)),
        "pending": lambda v: type(v) is bool,
        "calibration": _list(_number),
        "band": _optional(_PAIR),
        "last_move": _optional(_list(_number, 3)),
        **dict.fromkeys(("floor", "ceiling", "br"), _number),
    },
    required=("clock", "samples", "due", "decisions", "window", "pending", "calibration"),
)
# The layout of evogan.sparse.state (format FORMAT), as the masked controllers read it back.
_STATE = _fields(
    {
        "format": is_count,
        "controller": lambda v: isinstance(v, str),
        "role": lambda v: isinstance(v, str),
        "keep_dense": _list(lambda v: isinstance(v, str)),
        "density": lambda v: _number(v) and 0 <= v <= 1,
        **dict.fromkeys(("steps", "mask_updates", "seed", "batch"), is_count),
        "ledger": _fields(dict.fromkeys(_LEDGER, _number), required=_LEDGER),
        "flops": _fields({**dict.fromkeys(_COUNTED, _number), "weights": _numbers}, required=_COUNTED),
        "cost": _PAIR,
        "g_cost": _PAIR,
        "balance": _BALANCE,
    },
    required=("format", "controller", "role", "keep_dense", "density", "steps", "mask_updates", "seed", "ledger"),
)


def check_sparse_meta(meta: Any, role: str, local: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A neighbour's controller state for ``role`` (its :func:`sparse_meta`), checked before a local
    controller reads it; ``MessageRejected`` names the field.

    ``local`` is this cell's own state of the role, when known: a state of another controller or format
    is refused. A state in the layout of :mod:`evogan.sparse.state` (``format`` 2) is checked field by
    field; another controller's is only required to be a JSON object.
    """
    if not isinstance(meta, dict):
        raise MessageRejected(f"meta.sparse: the {role}'s state is not an object")
    for key in TENSOR_STATE:  # tensors never travel in the meta: masks come as bitmaps, SEMA stays home
        if key in meta:
            raise MessageRejected(f"meta.sparse: the {role}'s state carries {key!r}")
    if local is not None:
        for key in ("controller", "format"):
            if meta.get(key) != local.get(key):
                raise MessageRejected(f"meta.sparse: the {role}'s {key} is not this cell's")
    if meta.get("format") != FORMAT:
        return meta
    try:
        _STATE(meta)
    except _Malformed as field:
        raise MessageRejected(f"meta.sparse: the {role}'s field {str(field)!r} is malformed") from None
    if meta["role"] != role or ("g_cost" in meta and "batch" not in meta):
        raise MessageRejected(f"meta.sparse: the {role}'s state names another role or lacks its batch")
    return meta


def encoded_bytes(tensors: Mapping[str, torch.Tensor]) -> int:
    """Payload bytes the envelope will carry for ``tensors``."""
    return sum(t.numel() * t.element_size() for t in tensors.values())


__all__ = [
    "BITMAP",
    "SHAPE",
    "VALUES",
    "check_sparse_meta",
    "decode_sparse",
    "encode_sparse",
    "encoded_bytes",
    "pack_bits",
    "sparse_meta",
    "sparse_state",
    "unpack_bits",
]
