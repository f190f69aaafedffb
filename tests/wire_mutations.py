"""Seeded mutations of valid envelopes, for the wire fuzz test and the rogue publisher of the end-to-end test.

Structural: a header node (a field, a manifest entry, a meta value) given an odd JSON value, a key dropped
or added, a list's items duplicated, dropped or swapped, a number nudged, the JSON text cut short or its
bytes changed, frames truncated, extended, dropped, added or swapped. Bitwise: payload bits flipped. A case
is ``mutate(frames, random.Random(seed))``: the same seed gives the same message, so a failure replays.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from typing import Any

Frames = list[bytes]
Path = tuple[str | int, ...]

# Odd JSON values: wrong types, out-of-range numbers, near-miss strings. bool is an int to Python.
ODD_VALUES: tuple[Any, ...] = (
    None,
    True,
    False,
    0,
    1,
    -1,
    2**31,
    2**63,
    -(2**63),
    10**30,
    1.5,
    -0.0,
    float("nan"),
    float("inf"),
    "",
    "x",
    "float32",
    "bool",
    "generator/0.weight",
    "optimizer/generator/0.weight/exp_avg",
    [],
    [1],
    [0, 10**30],
    [-1],
    [True],
    ["float32"],
    [[]],
    {},
    {"a": 1},
    {"generator": None, "discriminator": None},
    {"generator": [1], "discriminator": {"x": 1}},
)
FIELD_NAMES = (
    "v", "run", "cell", "generation", "substep", "sequence", "incarnation", "meta", "tensors",
    "name", "dtype", "shape", "offset", "length", "recipe", "fitness", "lr", "uid", "sparse",
    "generator", "discriminator", "masks", "balance", "window", "format",
)  # fmt: skip


def nodes(tree: Any, path: Path = ()) -> list[Path]:
    """The path of every node below ``tree`` (dict values and list items, recursively)."""
    found: list[Path] = []
    children: Sequence[tuple[str | int, Any]] = (
        list(tree.items()) if isinstance(tree, dict) else list(enumerate(tree)) if isinstance(tree, list) else []
    )
    for key, child in children:
        found.append((*path, key))
        found.extend(nodes(child, (*path, key)))
    return found


def _at(tree: Any, path: Path) -> Any:
    for key in path:
        tree = tree[key]
    return tree


def _where(header: Any, kind: type, *, empty: bool = False) -> list[Path]:
    """Paths of the header's nodes of ``kind``, the root included; only non-empty ones unless ``empty``."""
    return [p for p in [(), *nodes(header)] if isinstance(_at(header, p), kind) and (empty or _at(header, p))]


def _dotted(path: Path) -> str:
    return ".".join(map(str, path))


def _header(frames: Frames) -> dict[str, Any]:
    return json.loads(frames[1])


def _with_header(frames: Frames, header: Any) -> Frames:
    return [frames[0], json.dumps(header).encode(), *frames[2:]]


def odd_value(frames: Frames, rng: random.Random) -> tuple[str, Frames]:
    header = _header(frames)
    path = rng.choice(nodes(header))
    value = rng.choice(ODD_VALUES)
    _at(header, path[:-1])[path[-1]] = value
    return f"{_dotted(path)} = {value!r}", _with_header(frames, header)


def _on_node(
    frames: Frames, rng: random.Random, kind: type, change: Callable[[Any, Path, random.Random], str]
) -> tuple[str, Frames]:
    """``change`` a random non-empty node of ``kind`` (the root included); an odd value when there is none."""
    header = _header(frames)
    found = _where(header, kind)
    if not found:
        return odd_value(frames, rng)
    path = rng.choice(found)
    return change(_at(header, path), path, rng), _with_header(frames, header)


def _drop(node: dict[str, Any], path: Path, rng: random.Random) -> str:
    key = rng.choice(sorted(node))
    del node[key]
    return f"del {_dotted((*path, key))}"


def drop_key(frames: Frames, rng: random.Random) -> tuple[str, Frames]:
    return _on_node(frames, rng, dict, _drop)


def add_key(frames: Frames, rng: random.Random) -> tuple[str, Frames]:
    header = _header(frames)
    path, key, value = rng.choice(_where(header, dict, empty=True)), rng.choice(FIELD_NAMES), rng.choice(ODD_VALUES)
    _at(header, path)[key] = value
    return f"{_dotted((*path, key))} := {value!r}", _with_header(frames, header)


def _shuffle(items: list[Any], path: Path, rng: random.Random) -> str:
    how = rng.choice(("duplicate", "drop", "swap", "reverse"))
    i, j = rng.randrange(len(items)), rng.randrange(len(items))
    if how == "duplicate":
        items.insert(j, json.loads(json.dumps(items[i])))
    elif how == "drop":
        items.pop(i)
    elif how == "swap":
        items[i], items[j] = items[j], items[i]
    else:
        items.reverse()
    return f"{how} in {_dotted(path)}"


def reshuffle(frames: Frames, rng: random.Random) -> tuple[str, Frames]:
    """Duplicate, drop, swap or reverse the items of a list (the manifest, a shape, a window)."""
    return _on_node(frames, rng, list, _shuffle)


def nudge(frames: Frames, rng: random.Random) -> tuple[str, Frames]:
    """An integer field off by a little or a lot: offsets, lengths, dimensions, counters."""
    header = _header(frames)
    ints = [p for p in nodes(header) if type(_at(header, p)) is int]
    if not ints:
        return odd_value(frames, rng)
    path = rng.choice(ints)
    old = _at(header, path)
    new = rng.choice((old + 1, old - 1, old * 2, -old, 0, old + 2**32, old * 10**6))
    _at(header, path[:-1])[path[-1]] = new
    return f"{_dotted(path)}: {old} -> {new}", _with_header(frames, header)


def cut_json(frames: Frames, rng: random.Random) -> tuple[str, Frames]:
    at = rng.randrange(len(frames[1]))
    return f"header cut at byte {at}", [frames[0], frames[1][:at], *frames[2:]]


def header_bytes(frames: Frames, rng: random.Random) -> tuple[str, Frames]:
    text = bytearray(frames[1])
    at = rng.randrange(len(text))
    text[at] = rng.choice((0, 0x22, 0x5B, 0x7B, 0x7D, 0x2C, 0x30, 0x2D, 0xFF, rng.randrange(256)))
    return f"header byte {at} = {text[at]:#x}", [frames[0], bytes(text), *frames[2:]]


def payload_bits(frames: Frames, rng: random.Random) -> tuple[str, Frames]:
    """Bitwise: flip a few payload bits (the only mutation a well-formed header cannot reveal)."""
    payload = bytearray(frames[2])
    if not payload:
        return cut_json(frames, rng)
    flipped = [rng.randrange(len(payload) * 8) for _ in range(rng.randint(1, 8))]
    for bit in flipped:
        payload[bit // 8] ^= 1 << (bit % 8)
    return f"payload bits {flipped} flipped", [frames[0], frames[1], bytes(payload), *frames[3:]]


def payload_length(frames: Frames, rng: random.Random) -> tuple[str, Frames]:
    payload = frames[2]
    if payload and rng.random() < 0.5:
        at = rng.randrange(len(payload))
        return f"payload cut at byte {at}", [frames[0], frames[1], payload[:at]]
    extra = rng.randbytes(rng.choice((1, 3, 8, 64)))
    return f"payload + {len(extra)} bytes", [frames[0], frames[1], payload + extra]


def reframe(frames: Frames, rng: random.Random) -> tuple[str, Frames]:
    how = rng.choice(("drop", "add", "duplicate", "swap", "topic", "empty"))
    out = list(frames)
    if how == "drop":
        out.pop(rng.randrange(len(out)))
    elif how == "add":
        out.insert(rng.randrange(len(out) + 1), rng.randbytes(rng.randrange(16)))
    elif how == "duplicate":
        out.append(out[rng.randrange(len(out))])
    elif how == "swap":
        i, j = rng.sample(range(len(out)), 2)
        out[i], out[j] = out[j], out[i]
    elif how == "topic":
        out[0] = rng.choice((b"", b"c", out[0][:-1], out[0] + b"M", b"c99999.M", b"c-0001.M", rng.randbytes(8)))
    else:
        out = [b"" for _ in out]
    return f"frames: {how}", out


def extreme(frames: Frames, rng: random.Random) -> tuple[str, Frames]:
    """Headers that break parsers rather than checks: deep nesting, a number of thousands of digits,
    invalid UTF-8, JSON that is not an object, a header over the size cap."""
    how = rng.choice(("deep", "digits", "utf8", "scalar", "huge"))
    if how == "deep":
        depth = rng.choice((1000, 100_000))
        text = b"[" * depth + b"]" * depth
    elif how == "digits":
        text = frames[1].replace(b'"generation":', b'"generation":' + b"9" * 5000 + b',"g":', 1)
    elif how == "utf8":
        text = frames[1][:10] + b"\xc3\x28" + frames[1][10:]
    elif how == "scalar":
        text = rng.choice((b"null", b"1", b'"header"', b"[]", b"NaN"))
    else:
        text = b'{"v": 1, "pad": "' + b"x" * (1 << 20) + b'"}'
    return f"header: {how}", [frames[0], text, *frames[2:]]


MUTATIONS: tuple[Callable[[Frames, random.Random], tuple[str, Frames]], ...] = (
    odd_value,
    odd_value,
    odd_value,
    drop_key,
    add_key,
    reshuffle,
    nudge,
    nudge,
    cut_json,
    header_bytes,
    payload_bits,
    payload_bits,
    payload_length,
    reframe,
    extreme,
)


def mutate(frames: Sequence[bytes | memoryview], rng: random.Random) -> tuple[str, Frames]:
    """One mutated copy of ``frames`` (a valid message) and what was done to it; sometimes two changes."""
    plain = [bytes(frame) for frame in frames]
    what, out = rng.choice(MUTATIONS)(plain, rng)
    if rng.random() < 0.15 and len(out) == 3:
        try:
            header = json.loads(out[1])
        except (ValueError, RecursionError):
            return what, out
        if not isinstance(header, dict) or not header:
            return what, out
        again, out = rng.choice(MUTATIONS)(out, rng)
        what = f"{what}; {again}"
    return what, out


__all__ = ["MUTATIONS", "ODD_VALUES", "mutate", "nodes"]
