"""The wire format shared by every transport: ``[topic, JSON header, raw tensor bytes]``. No pickle.

The header carries who sent the message (run, cell, generation, sequence, incarnation), how many training
batches past that generation the models are (``substep``: 0 at a generation's end, k, 2k, ... for the
exchanges inside the next one; messages order by ``(generation, substep)``), free-form
``meta`` (fitness, hyper-parameters, ...) and a manifest of tensors (name, dtype, shape, offset, length).
The payload is the tensors' bytes back to back. :func:`decode` checks everything before it trusts a byte:
every header field and manifest entry is type-checked (non-negative int64 counts, never a bool; strings;
known dtype names; shapes, offsets and lengths that add up to the payload), per message, not per element.
Any failure raises :class:`~evogan.errors.MessageRejected` with a reason ``field: detail`` (such as
``manifest.dtype: tensor 'w' has no known dtype name``); receivers count drops by the field.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

import numpy as np
import torch

from evogan.errors import MessageRejected

FORMAT_VERSION = 1
MODEL_KIND = b"M"
TOPIC_WIDTH = 5  # c00000. .. c99999.: fixed width, so "c00001." never prefix-matches "c00010."
SUBSCRIBER_MARK = b"S"  # a second subscription "c00003.S00001" names the subscribing cell (00001)

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


@dataclass
class Received:
    """One validated message from a neighbour (what :func:`decode` returns)."""

    header: dict[str, Any]
    tensors: dict[str, torch.Tensor]


ITEMSIZE = {name: torch.empty(0, dtype=dtype).element_size() for name, dtype in DTYPES.items()}
MAX_COUNT = 2**63 - 1  # counters, offsets and dimensions are int64 wherever they end up
MAX_DIMS = 32
# A zero-size shape may name huge other dimensions; torch's int64 stride arithmetic overflows on them.
MAX_ELEMENTS = 1 << 48
MAX_HEADER_BYTES = 1 << 20
_FIELDS: tuple[tuple[str, type, str], ...] = (  # required header fields: (key, type, what it must be)
    *((key, int, "a non-negative integer") for key in ("v", "cell", "generation", "sequence", "incarnation")),
    ("run", str, "a string"),
    ("meta", dict, "an object"),
    ("tensors", list, "a list"),
)


def is_count(value: object) -> TypeGuard[int]:
    """A JSON integer >= 0 that fits int64. ``type(...) is int`` keeps ``true``/``false`` out."""
    return type(value) is int and 0 <= value <= MAX_COUNT


def is_shape(value: object) -> TypeGuard[list[int]]:
    """A list of at most ``MAX_DIMS`` counts whose product (zeros counted as ones) torch can stride."""
    return (
        isinstance(value, list)
        and len(value) <= MAX_DIMS
        and all(is_count(d) for d in value)
        and math.prod(max(d, 1) for d in value) <= MAX_ELEMENTS
    )


def load_json(raw: bytes | memoryview, what: str) -> Any:
    """JSON from a peer; anything Python's parser refuses (bad UTF-8, syntax, a number of thousands of
    digits, nesting too deep to parse) is ``MessageRejected`` naming ``what``."""
    try:
        return json.loads(bytes(raw))
    except (ValueError, RecursionError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise MessageRejected(f"{what}: not JSON") from None


def topic(cell: int, kind: bytes = MODEL_KIND) -> bytes:
    """``b"c00004.M"``: the topic of ``cell``'s messages of ``kind``."""
    if not 0 <= cell < 10**TOPIC_WIDTH:
        raise ValueError(f"cell id {cell} does not fit the topic width")
    return b"c%0*d." % (TOPIC_WIDTH, cell) + kind


def topic_prefix(cell: int) -> bytes:
    """What a subscriber passes to ``SUBSCRIBE`` to receive every kind from ``cell`` and nothing else."""
    return b"c%0*d." % (TOPIC_WIDTH, cell)


def subscriber_mark(cell: int, subscriber: int) -> bytes:
    """``b"c00003.S00001"``: a subscription that matches no topic and tells ``cell``'s publisher who listens."""
    return topic_prefix(cell) + SUBSCRIBER_MARK + b"%0*d" % (TOPIC_WIDTH, subscriber)


def subscribed_cell(frame: bytes) -> tuple[int, int] | None:
    """``(cell, subscriber)`` from an XPUB subscription frame ``\x01c00003.S00001``; None for any other frame."""
    width = TOPIC_WIDTH
    if len(frame) != 2 * width + 4 or not frame.startswith(b"\x01c"):
        return None
    cell, mark, subscriber = frame[2 : 2 + width], frame[2 + width : 4 + width], frame[4 + width :]
    if mark != b"." + SUBSCRIBER_MARK or not cell.isdigit() or not subscriber.isdigit():
        return None
    return int(cell), int(subscriber)


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
    """Validate frame layout, topic, header and manifest; return the header. Reads no payload byte.

    Every field is type-checked before it is used; a failure names it (``header.cell: ...``,
    ``manifest.dtype: ...``), and the text before the first colon is what receivers count by."""
    if len(frames) != 3:
        raise _reject(f"frames: expected 3, got {len(frames)}")
    topic_frame, header_frame, payload = (bytes(frames[0]), frames[1], frames[2])
    if len(header_frame) > MAX_HEADER_BYTES:
        raise _reject("header: larger than 1 MiB")
    if len(payload) > max_bytes:
        raise _reject(f"payload: {len(payload)} bytes exceed the cap of {max_bytes}")
    header = load_json(header_frame, "header")
    if not isinstance(header, dict):
        raise _reject("header: not a JSON object")
    for key, kind, what in _FIELDS:
        if key not in header:
            raise _reject(f"header.{key}: missing")
        if not (is_count(header[key]) if kind is int else isinstance(header[key], kind)):
            raise _reject(f"header.{key}: not {what}")
    if not is_count(header.setdefault("substep", 0)):
        raise _reject("header.substep: not a count of batches")
    if header["v"] != FORMAT_VERSION:
        raise _reject(f"header.v: envelope version {header['v']} (this side speaks {FORMAT_VERSION})")
    if header["cell"] >= 10**TOPIC_WIDTH or topic_frame[: TOPIC_WIDTH + 2] != topic_prefix(header["cell"]):
        raise _reject("topic: does not match the header's cell")
    end = _check_manifest(header["tensors"], len(payload))
    if end != len(payload):
        raise _reject(f"payload: {len(payload)} bytes, the manifest says {end}")
    return header


def _check_manifest(manifest: list[Any], payload: int) -> int:
    """Check each entry of the tensor manifest in order; return where the last tensor ends."""
    end = 0
    names: set[str] = set()
    for index, entry in enumerate(manifest):
        if not isinstance(entry, dict):
            raise _reject(f"manifest: entry {index} is not an object")
        name, dtype, shape = entry.get("name"), entry.get("dtype"), entry.get("shape")
        offset, length = entry.get("offset"), entry.get("length")
        if not isinstance(name, str):
            raise _reject(f"manifest.name: entry {index} has no name string")
        if name in names:
            raise _reject(f"manifest.name: tensor {name!r} appears twice")
        names.add(name)
        if not isinstance(dtype, str) or dtype not in DTYPES:
            raise _reject(f"manifest.dtype: tensor {name!r} has no known dtype name")
        if not is_shape(shape):
            raise _reject(f"manifest.shape: tensor {name!r} has no valid shape")
        if not is_count(offset) or offset != end:
            raise _reject(f"manifest.offset: tensor {name!r} does not start where the one before ends")
        if not is_count(length) or length != math.prod(shape) * ITEMSIZE[dtype]:
            raise _reject(f"manifest.length: tensor {name!r} does not match its shape and dtype")
        end += length
        if end > payload:
            raise _reject(f"payload: {payload} bytes, the manifest says more")
    return end


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
            raise _reject(f"manifest: tensor names differ from the local model (missing {missing}, unexpected {extra})")
        for entry in manifest:
            dtype, shape = expected[entry["name"]]
            if DTYPES[entry["dtype"]] != dtype or tuple(entry["shape"]) != tuple(shape):
                raise _reject(f"manifest: tensor {entry['name']!r} differs from the local model in dtype or shape")
    raw = np.frombuffer(frames[2], dtype=np.uint8)
    tensors: dict[str, torch.Tensor] = {}
    for entry in manifest:
        dtype = DTYPES[entry["dtype"]]
        if entry["length"] == 0:
            tensors[entry["name"]] = torch.empty(entry["shape"], dtype=dtype)
            continue
        chunk = torch.from_numpy(raw[entry["offset"] : entry["offset"] + entry["length"]].copy())
        if dtype is torch.bool and int(chunk.max()) > 1:  # any other byte is not a bool torch can use
            raise _reject(f"payload: tensor {entry['name']!r} holds bool bytes other than 0 and 1")
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
    "MAX_COUNT",
    "Received",
    "decode",
    "encode",
    "is_count",
    "is_shape",
    "load_json",
    "parse_header",
    "payload_size",
    "stamp",
    "topic",
    "topic_prefix",
]
