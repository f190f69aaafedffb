"""The wire format shared by every transport: ``[topic, JSON header, raw tensor bytes]``. No pickle.

The header carries who sent the message (run, cell, generation, sequence, incarnation), how many training
batches past that generation the models are (``substep``: 0 at a generation's end, k, 2k, ... for the
exchanges inside the next one; messages order by ``(generation, substep)``), free-form
``meta`` (fitness, hyper-parameters, ...) and a manifest of tensors (name, dtype, shape, offset, length).
The payload is the tensors' bytes back to back. :func:`decode` checks everything before it trusts a byte;
any failure raises :class:`~evogan.errors.MessageRejected` with a short reason that receivers count.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from evogan.api import Received
from evogan.errors import MessageRejected

FORMAT_VERSION = 1
MODEL_KIND = b"M"
TOPIC_WIDTH = 5  # c00000. .. c99999.: fixed width, so "c00001." never prefix-matches "c00010."

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
    "int64": torch.int64,
    "int32": torch.int32,
    "uint8": torch.uint8,
    "bool": torch.bool,
}
DTYPE_NAMES = {dtype: name for name, dtype in DTYPES.items()}
_REQUIRED: dict[str, type | tuple[type, ...]] = {
    "v": int,
    "run": str,
    "cell": int,
    "generation": int,
    "sequence": int,
    "incarnation": int,
    "meta": dict,
    "tensors": list,
}


def topic(cell: int, kind: bytes = MODEL_KIND) -> bytes:
    """``b"c00004.M"``: the topic of ``cell``'s messages of ``kind``."""
    if not 0 <= cell < 10**TOPIC_WIDTH:
        raise ValueError(f"cell id {cell} does not fit the topic width")
    return b"c%0*d." % (TOPIC_WIDTH, cell) + kind


def topic_prefix(cell: int) -> bytes:
    """What a subscriber passes to ``SUBSCRIBE`` to receive every kind from ``cell`` and nothing else."""
    return b"c%0*d." % (TOPIC_WIDTH, cell)


def encode(
    tensors: Mapping[str, torch.Tensor],
    *,
    run: str,
    cell: int,
    generation: int,
    sequence: int = 0,
    incarnation: int = 0,
    meta: Mapping[str, Any] | None = None,
    substep: int = 0,
) -> list[bytes | memoryview]:
    """Frames for one message. The payload is one buffer built with a single copy per tensor."""
    manifest = []
    offset = 0
    parts: list[torch.Tensor] = []
    for name, tensor in tensors.items():
        if tensor.dtype not in DTYPE_NAMES:
            raise ValueError(f"tensor {name!r}: dtype {tensor.dtype} cannot travel")
        flat = tensor.detach().to("cpu").contiguous().reshape(-1)
        raw = flat.view(torch.uint8) if flat.numel() else torch.empty(0, dtype=torch.uint8)
        length = raw.numel()
        manifest.append(
            {
                "name": name,
                "dtype": DTYPE_NAMES[tensor.dtype],
                "shape": list(tensor.shape),
                "offset": offset,
                "length": length,
            }
        )
        parts.append(raw)
        offset += length
    header = {
        "v": FORMAT_VERSION,
        "run": run,
        "cell": cell,
        "generation": generation,
        "substep": substep,
        "sequence": sequence,
        "incarnation": incarnation,
        "meta": dict(meta or {}),
        "tensors": manifest,
    }
    payload = torch.cat(parts) if parts else torch.empty(0, dtype=torch.uint8)
    return [topic(cell), json.dumps(header, separators=(",", ":")).encode(), payload.numpy().data]


def _reject(reason: str) -> MessageRejected:
    return MessageRejected(reason)


def parse_header(frames: Sequence[bytes | memoryview], *, max_bytes: int) -> dict[str, Any]:
    """Validate frame layout, topic and header; return the header. Reads no payload byte."""
    if len(frames) != 3:
        raise _reject(f"expected 3 frames, got {len(frames)}")
    topic_frame, header_frame, payload = (bytes(frames[0]), frames[1], frames[2])
    if len(header_frame) > 1 << 20:
        raise _reject("header larger than 1 MiB")
    if len(payload) > max_bytes:
        raise _reject(f"payload of {len(payload)} bytes exceeds the cap of {max_bytes}")
    try:
        header = json.loads(bytes(header_frame))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise _reject("header is not JSON") from None
    if not isinstance(header, dict):
        raise _reject("header is not a JSON object")
    for key, kind in _REQUIRED.items():
        if not isinstance(header.get(key), kind) or isinstance(header.get(key), bool):
            raise _reject(f"header field {key!r} missing or of the wrong type")
    substep = header.setdefault("substep", 0)
    if not isinstance(substep, int) or isinstance(substep, bool) or substep < 0:
        raise _reject("header field 'substep' is not a count of batches")
    if header["v"] != FORMAT_VERSION:
        raise _reject(f"envelope version {header['v']} (this side speaks {FORMAT_VERSION})")
    if header["cell"] < 0 or topic_frame[: TOPIC_WIDTH + 2] != topic_prefix(header["cell"]):
        raise _reject("topic does not match the header's cell")
    end = 0
    for entry in header["tensors"]:
        if not isinstance(entry, dict):
            raise _reject("manifest entry is not an object")
        name, dtype, shape = entry.get("name"), entry.get("dtype"), entry.get("shape")
        offset, length = entry.get("offset"), entry.get("length")
        if not isinstance(name, str) or dtype not in DTYPES:
            raise _reject(f"manifest entry {name!r}: bad name or dtype")
        if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
            raise _reject(f"tensor {name!r}: bad shape")
        if not isinstance(offset, int) or not isinstance(length, int) or offset != end:
            raise _reject(f"tensor {name!r}: offsets are not contiguous")
        itemsize = torch.empty(0, dtype=DTYPES[dtype]).element_size()
        if length != math.prod(shape) * itemsize:
            raise _reject(f"tensor {name!r}: length does not match shape and dtype")
        end = offset + length
    if end != len(payload):
        raise _reject(f"payload is {len(payload)} bytes, manifest says {end}")
    return header


def decode(
    frames: Sequence[bytes | memoryview],
    *,
    max_bytes: int,
    expected: Mapping[str, tuple[torch.dtype, tuple[int, ...]]] | None = None,
) -> Received:
    """Validate and decode one message. ``expected`` (name -> (dtype, shape)) is checked against the
    manifest before the payload is touched, so a peer with a different model is rejected cheaply."""
    header = parse_header(frames, max_bytes=max_bytes)
    manifest = header["tensors"]
    if expected is not None:
        names = [entry["name"] for entry in manifest]
        if sorted(names) != sorted(expected):
            missing = sorted(set(expected) - set(names))[:3]
            extra = sorted(set(names) - set(expected))[:3]
            raise _reject(f"tensor names differ from the local model (missing {missing}, unexpected {extra})")
        for entry in manifest:
            dtype, shape = expected[entry["name"]]
            if DTYPES[entry["dtype"]] != dtype or tuple(entry["shape"]) != tuple(shape):
                raise _reject(f"tensor {entry['name']!r}: dtype or shape differs from the local model")
    raw = np.frombuffer(frames[2], dtype=np.uint8)
    tensors: dict[str, torch.Tensor] = {}
    for entry in manifest:
        dtype = DTYPES[entry["dtype"]]
        if entry["length"] == 0:
            tensors[entry["name"]] = torch.empty(entry["shape"], dtype=dtype)
            continue
        chunk = torch.from_numpy(raw[entry["offset"] : entry["offset"] + entry["length"]].copy())
        tensors[entry["name"]] = chunk.view(dtype).reshape(entry["shape"])
    return Received(header=header, tensors=tensors)


def stamp(header: Mapping[str, Any]) -> tuple[int, int]:
    """``(generation, substep)``: the order of one cell's messages, as transports store them."""
    return int(header["generation"]), int(header.get("substep", 0))


def payload_size(frames: Sequence[bytes | memoryview]) -> int:
    return sum(len(frame) for frame in frames)


__all__ = [
    "DTYPES",
    "FORMAT_VERSION",
    "decode",
    "encode",
    "parse_header",
    "payload_size",
    "stamp",
    "topic",
    "topic_prefix",
]
