"""A sparsity controller's state in the exchange envelope: its masks compress the weights (as active values plus
a bitmap, :mod:`evogan.transport.masked`, whose names this module also serves), the rest travels in the meta as
JSON and is checked by :func:`check_sparse_meta` before a controller reads it; a failure raises
:class:`~evogan.errors.MessageRejected`, as the envelope does for bad messages.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from typing import Any

import torch

from evogan.errors import MessageRejected
from evogan.transport.envelope import is_count
from evogan.transport.masked import (
    BITMAP,
    SHAPE,
    VALUES,
    decode_masked,
    encode_masked,
    encoded_bytes,
    pack_bits,
    unpack_bits,
)
from evogan_gan.sparse.flops import NetworkFlops, new_ledger
from evogan_gan.sparse.state import FORMAT

# the names before the bitmap encoding moved to evogan.transport.masked (the engine's codec uses it there)
encode_sparse, decode_sparse = encode_masked, decode_masked

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
        **dict.fromkeys(
            ("in_band", "raises", "lowerings", "undos", "blocked", "unanswered", "fell_back_at", "moved_at"), is_count
        ),
        "window": _list(_list(_number, 3)),
        **dict.fromkeys(("pending", "fell_back"), lambda v: type(v) is bool),
        "calibration": _list(_number),
        "band": _optional(_PAIR),
        "last_move": _optional(_list(_number, 3)),
        **dict.fromkeys(("floor", "ceiling", "br"), _number),
    },
    required=("clock", "samples", "due", "decisions", "window", "pending", "calibration"),
)
# The layout of evogan_gan.sparse.state (format FORMAT), as the masked controllers read it back.
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
    is refused. A state in the layout of :mod:`evogan_gan.sparse.state` (``format`` 2) is checked field by
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
