"""A masked tensor in the exchange envelope: its active values plus a bitmap, so bytes shrink with density.

A masked tensor ``w`` travels as ``<name>.__values__`` (``w[mask]``, row-major), ``<name>.__bitmap__`` (the mask, 8
positions per byte, least significant bit first, padding 0) and ``<name>.__shape__`` (int64, so a message decodes
on its own): about ``4 d n + n / 8`` bytes at density d instead of ``4 n`` for float32. Decoding rebuilds the dense
tensors bit for bit; any inconsistency raises :class:`~evogan.errors.MessageRejected`, as the envelope does for bad
messages. A wire format, knowing nothing of who made the masks: the codec takes them from an individual's
:func:`evogan.individual.wire_masks` (the sparsity controller's state), :mod:`evogan_gan.sparse.wire` checks the state.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch

from evogan.errors import MessageRejected
from evogan.transport.envelope import is_shape

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


def encode_masked(
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


def decode_masked(
    tensors: Mapping[str, torch.Tensor],
    expected: Mapping[str, tuple[torch.dtype, tuple[int, ...]]] | None = None,
    *,
    complete: bool = True,
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """``(dense state, masks)`` from :func:`encode_masked` output; a bad entry raises MessageRejected.

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


def encoded_bytes(tensors: Mapping[str, torch.Tensor]) -> int:
    """Payload bytes the envelope will carry for ``tensors``."""
    return sum(t.numel() * t.element_size() for t in tensors.values())


__all__ = ["BITMAP", "SHAPE", "VALUES", "decode_masked", "encode_masked", "encoded_bytes", "pack_bits", "unpack_bits"]
