from __future__ import annotations

import json
from collections.abc import Callable

import pytest
import torch

from evogan.errors import MessageRejected
from evogan.transport import envelope


def sample_tensors() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return {
        "generator/0.weight": torch.randn(4, 3, generator=generator),
        "generator/0.bias": torch.randn(4, generator=generator),
        "discriminator/bn.num_batches_tracked": torch.tensor(7),
        "half": torch.randn(5, generator=generator).to(torch.bfloat16),
        "empty": torch.empty(0, 3),
    }


def frames(**fields) -> list[bytes]:
    message = envelope.encode(
        sample_tensors(), run="r", cell=3, generation=2, meta={"fitness": 0.5}, **fields
    )
    return [bytes(frame) for frame in message]


def test_round_trip_is_exact_and_pickle_free() -> None:
    message = frames(sequence=4, incarnation=1)
    assert message[0] == b"c00003.M"
    header = json.loads(message[1])
    assert header["generation"] == 2 and header["meta"] == {"fitness": 0.5} and header["incarnation"] == 1
    received = envelope.decode(message, max_bytes=1 << 20)
    for name, tensor in sample_tensors().items():
        assert torch.equal(received.tensors[name], tensor) and received.tensors[name].dtype == tensor.dtype
    raw = sum(t.numel() * t.element_size() for t in sample_tensors().values())
    assert len(message[2]) == raw  # payload is exactly the tensor bytes


def test_fixed_width_topics_never_prefix_match() -> None:
    assert not envelope.topic(10).startswith(envelope.topic_prefix(1))
    assert envelope.topic(1).startswith(envelope.topic_prefix(1))


def expected() -> dict[str, tuple[torch.dtype, tuple[int, ...]]]:
    return {name: (t.dtype, tuple(t.shape)) for name, t in sample_tensors().items()}


def mutate_header(message: list[bytes], change) -> list[bytes]:
    header = json.loads(message[1])
    change(header)
    return [message[0], json.dumps(header).encode(), message[2]]


def entry(index: int, **fields) -> Callable[[list[bytes]], list[bytes]]:
    """A message whose manifest entry ``index`` has ``fields`` replaced."""
    return lambda m: mutate_header(m, lambda h: h["tensors"][index].update(fields))


def field(**fields) -> Callable[[list[bytes]], list[bytes]]:
    return lambda m: mutate_header(m, lambda h: h.update(fields))


@pytest.mark.parametrize(
    ("broken", "reason"),
    [
        (lambda m: m[:2], "^frames: expected 3, got 2"),
        (lambda m: [m[0], b"{not json", m[2]], "^header: not JSON"),
        (lambda m: [m[0], b"[1, 2]", m[2]], "^header: not a JSON object"),
        (lambda m: [m[0], b"\xff" + m[1], m[2]], "^header: not JSON"),  # not UTF-8
        (lambda m: [m[0], b"[" * 100_000 + b"]" * 100_000, m[2]], "^header: not JSON"),  # too deep to parse
        (lambda m: [m[0], m[1].replace(b'"generation":2', b'"generation":' + b"9" * 5000), m[2]], "^header: not JSON"),
        (lambda m: [m[0], b" " * (1 << 20) + m[1], m[2]], "^header: larger than 1 MiB"),
        (lambda m: [b"c00004.M", m[1], m[2]], "^topic: does not match"),
        (lambda m: [m[0], m[1], m[2][:-3]], "^payload: .* the manifest says"),
        (lambda m: [m[0], m[1], bytes(m[2]) + b"\0"], "^payload: .* the manifest says"),
        (lambda m: mutate_header(m, lambda h: h.pop("generation")), "^header.generation: missing"),
        (field(v=99), "^header.v: envelope version 99"),
        (field(v=True), "^header.v: not a non-negative integer"),  # bool is an int to Python, not here
        (field(cell=[3]), "^header.cell: not a non-negative integer"),
        (field(cell=100_003), "^topic: does not match"),  # a cell id wider than the topic
        (field(generation=-1), "^header.generation: not a non-negative integer"),
        (field(generation=2**63), "^header.generation: not a non-negative integer"),  # not int64
        (field(sequence=1.0), "^header.sequence: not a non-negative integer"),
        (field(incarnation=None), "^header.incarnation: not a non-negative integer"),
        (field(substep=False), "^header.substep: not a count"),
        (field(run=["r"]), "^header.run: not a string"),
        (field(meta=[]), "^header.meta: not an object"),
        (field(tensors={}), "^header.tensors: not a list"),
        (lambda m: mutate_header(m, lambda h: h["tensors"].append(7)), "^manifest: entry 5 is not an object"),
        # the reported defect: a dtype or name given as a JSON list or object raised TypeError
        (entry(0, dtype=["float32"]), "^manifest.dtype: tensor 'generator/0.weight' has no known dtype"),
        (entry(0, dtype={"float32": 1}), "^manifest.dtype: "),
        (entry(0, name=["generator/0.weight"]), "^manifest.name: entry 0 has no name string"),
        (entry(0, name={"a": 1}), "^manifest.name: entry 0 has no name string"),
        (entry(1, name="generator/0.weight"), "^manifest.name: tensor 'generator/0.weight' appears twice"),
        (entry(0, dtype="complex"), "^manifest.dtype: "),
        (entry(0, shape=[4, 4]), "^manifest.length: tensor 'generator/0.weight' does not match"),
        (entry(0, shape=[4, True, 3]), "^manifest.shape: "),
        (entry(0, shape=[4, -3]), "^manifest.shape: "),
        (entry(0, shape="4x3"), "^manifest.shape: "),
        (entry(4, shape=[0, 2**62, 4]), "^manifest.shape: tensor 'empty'"),  # torch's strides would overflow
        (entry(4, shape=[0] * 33), "^manifest.shape: tensor 'empty'"),
        (entry(1, offset=0), "^manifest.offset: tensor 'generator/0.bias' does not start"),
        (entry(0, offset=False), "^manifest.offset: "),
        (entry(0, length=48.0), "^manifest.length: "),
        (entry(0, length=2**70), "^manifest.length: "),
    ],
)
def test_malformed_messages_are_rejected_with_a_reason_naming_the_field(broken, reason: str) -> None:
    with pytest.raises(MessageRejected, match=reason):
        envelope.decode(broken(frames()), max_bytes=1 << 20, expected=expected())


def test_bool_tensors_hold_only_zero_and_one_bytes() -> None:
    message = envelope.encode({"mask": torch.tensor([True, False, True])}, run="r", cell=0, generation=0)
    assert envelope.decode(message, max_bytes=64).tensors["mask"].tolist() == [True, False, True]
    with pytest.raises(MessageRejected, match=r"^payload: tensor 'mask' holds bool bytes other than 0 and 1"):
        envelope.decode([message[0], message[1], b"\x01\x00\x02"], max_bytes=64)


def test_oversized_and_wrong_shape_messages_are_rejected() -> None:
    with pytest.raises(MessageRejected, match=r"^payload: .* exceed the cap of 10"):
        envelope.decode(frames(), max_bytes=10)
    wrong = expected() | {"generator/0.weight": (torch.float32, (3, 4))}
    with pytest.raises(MessageRejected, match="differs from the local model"):
        envelope.decode(frames(), max_bytes=1 << 20, expected=wrong)
    with pytest.raises(MessageRejected, match="names differ"):
        envelope.decode(frames(), max_bytes=1 << 20, expected={"other": (torch.float32, (1,))})
