from __future__ import annotations

import json

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


@pytest.mark.parametrize(
    ("broken", "reason"),
    [
        (lambda m: m[:2], "expected 3 frames"),
        (lambda m: [m[0], b"{not json", m[2]], "not JSON"),
        (lambda m: [m[0], b"[1, 2]", m[2]], "not a JSON object"),
        (lambda m: [b"c00004.M", m[1], m[2]], "topic does not match"),
        (lambda m: [m[0], m[1], m[2][:-3]], "manifest says"),
        (lambda m: mutate_header(m, lambda h: h.pop("generation")), "'generation' missing"),
        (lambda m: mutate_header(m, lambda h: h.update(v=99)), "envelope version"),
        (lambda m: mutate_header(m, lambda h: h["tensors"][0].update(dtype="complex")), "bad name or dtype"),
        (lambda m: mutate_header(m, lambda h: h["tensors"][0].update(shape=[4, 4])), "length does not match"),
        (lambda m: mutate_header(m, lambda h: h["tensors"][1].update(offset=0)), "not contiguous"),
    ],
)
def test_malformed_messages_are_rejected_with_a_reason(broken, reason: str) -> None:
    with pytest.raises(MessageRejected, match=reason):
        envelope.decode(broken(frames()), max_bytes=1 << 20, expected=expected())


def test_oversized_and_wrong_shape_messages_are_rejected() -> None:
    with pytest.raises(MessageRejected, match="exceeds the cap"):
        envelope.decode(frames(), max_bytes=10)
    wrong = expected() | {"generator/0.weight": (torch.float32, (3, 4))}
    with pytest.raises(MessageRejected, match="differs from the local model"):
        envelope.decode(frames(), max_bytes=1 << 20, expected=wrong)
    with pytest.raises(MessageRejected, match="names differ"):
        envelope.decode(frames(), max_bytes=1 << 20, expected={"other": (torch.float32, (1,))})
