"""Sparse tensors for the exchange envelope: a masked weight travels as its active values plus a bitmap.

For a masked tensor ``w`` of n elements, :func:`encode_sparse` emits

- ``<name>.__values__``: ``w[mask]``, 1-D, in ``w``'s dtype (row-major order of the active positions);
- ``<name>.__bitmap__``: the mask packed 8 positions per byte, uint8, ``ceil(n / 8)`` bytes, least
  significant bit first, padding bits 0;
- ``<name>.__shape__``: the dense shape, int64 (a few bytes, so a message decodes on its own).

At density d a float32 weight costs about ``4 d n + n / 8`` bytes instead of ``4 n``. Unmasked tensors pass
through unchanged. :func:`decode_sparse` rebuilds the dense tensors bit for bit and returns the masks; any
inconsistency raises :class:`~evogan.errors.MessageRejected`, as the envelope does for bad messages.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Mapping
from typing import Any

import torch

from evogan.errors import MessageRejected

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
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """``(dense state, masks)`` from :func:`encode_sparse` output; a bad entry raises MessageRejected.

    ``expected`` (dense name -> (dtype, shape), as the envelope's) is checked before any dense tensor is
    allocated. Pass it here rather than to ``envelope.decode``: the length of ``__values__`` depends on
    the sender's mask, so the envelope cannot pin it.
    """
    if expected is not None:
        names = {k.removesuffix(VALUES) for k in tensors if not k.endswith((BITMAP, SHAPE))}
        if names != set(expected):
            missing, extra = sorted(set(expected) - names)[:3], sorted(names - set(expected))[:3]
            raise MessageRejected(
                f"tensor names differ from the local model (missing {missing}, unexpected {extra})"
            )
    state: dict[str, torch.Tensor] = {}
    masks: dict[str, torch.Tensor] = {}
    for key, tensor in tensors.items():
        if key.endswith((BITMAP, SHAPE)):
            continue
        if not key.endswith(VALUES):
            if expected is not None and (tensor.dtype, tuple(tensor.shape)) != tuple(expected[key]):
                raise MessageRejected(f"tensor {key!r}: dtype or shape differs from the local model")
            state[key] = tensor
            continue
        name = key[: -len(VALUES)]
        bitmap, shape = tensors.get(name + BITMAP), tensors.get(name + SHAPE)
        if bitmap is None or shape is None:
            raise MessageRejected(f"sparse tensor {name!r} lacks its bitmap or shape")
        if bitmap.dtype != torch.uint8 or shape.dtype != torch.int64 or shape.dim() != 1 or tensor.dim() != 1:
            raise MessageRejected(f"sparse tensor {name!r} has bad dtypes or ranks")
        dims = [int(v) for v in shape.tolist()]
        if any(d < 0 for d in dims):
            raise MessageRejected(f"sparse tensor {name!r} has a negative dimension")
        if expected is not None and (tensor.dtype, tuple(dims)) != tuple(expected[name]):
            raise MessageRejected(f"tensor {name!r}: dtype or shape differs from the local model")
        n = math.prod(dims)
        if bitmap.numel() != math.ceil(n / 8):
            raise MessageRejected(
                f"sparse tensor {name!r}: bitmap of {bitmap.numel()} bytes for {n} elements"
            )
        bits = unpack_bits(bitmap, bitmap.numel() * 8)
        if bool(bits[n:].any()):
            raise MessageRejected(f"sparse tensor {name!r}: padding bits are set")
        flat_mask = bits[:n]
        if int(flat_mask.sum()) != tensor.numel():
            raise MessageRejected(
                f"sparse tensor {name!r}: {tensor.numel()} values for {int(flat_mask.sum())} bits"
            )
        dense = torch.zeros(n, dtype=tensor.dtype, device=tensor.device)
        dense[flat_mask.to(tensor.device)] = tensor
        state[name] = dense.view(dims)
        masks[name] = flat_mask.view(dims)
    orphans = [
        k for k in tensors if k.endswith((BITMAP, SHAPE)) and k.rsplit(".__", 1)[0] + VALUES not in tensors
    ]
    if orphans:
        raise MessageRejected(f"sparse bitmap or shape without values: {sorted(orphans)[:3]}")
    return state, masks


TENSOR_STATE = ("masks", "sema")  # tensor-valued entries: masks travel as bitmaps, SEMA stays home


def sparse_meta(sparse: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON-safe part of ``individual.sparse`` (everything but tensors) for the envelope's meta.

    The generator's SEMA average is not sent: a neighbour's copy is evaluated with its live weights."""
    return json.loads(json.dumps({k: v for k, v in sparse.items() if k not in TENSOR_STATE}))


def sparse_state(meta: Mapping[str, Any], masks: Mapping[str, torch.Tensor]) -> dict[str, Any]:
    """Inverse of :func:`sparse_meta`: an ``individual.sparse`` from the meta and decoded masks."""
    return {**copy.deepcopy(dict(meta)), "masks": dict(masks)}


def encoded_bytes(tensors: Mapping[str, torch.Tensor]) -> int:
    """Payload bytes the envelope will carry for ``tensors``."""
    return sum(t.numel() * t.element_size() for t in tensors.values())


__all__ = [
    "BITMAP",
    "SHAPE",
    "VALUES",
    "decode_sparse",
    "encode_sparse",
    "encoded_bytes",
    "pack_bits",
    "sparse_meta",
    "sparse_state",
    "unpack_bits",
]
