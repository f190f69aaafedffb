"""Fuzzed neighbour messages: every structural or bitwise mutation of a valid envelope (a dense, a sparse and
an optimizer-state message of real cells) is rejected with ``MessageRejected`` or decodes to the local
model's dtypes and shapes and is adopted; no other exception ever escapes (issue 28).

The mutations are seeded (``tests/wire_mutations.py``): a failure names its case, and
``mutate(frames, random.Random(case))`` replays it.
"""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest
import torch
from test_codec import ADAPT, Pair, make_pair  # pytest puts tests/ on sys.path (rootdir conftest, prepend mode)
from wire_mutations import mutate

from evogan.engine.codec import Manifest, Message
from evogan.errors import MessageRejected
from evogan.testing import write_tiny_recipe
from evogan.transport import envelope, zmq_io

CASES = 1500  # per base message: 4,500 in all, a few seconds
BASES = {
    "dense": ("exchange.optimizer_state=false",),
    "sparse": ("exchange.optimizer_state=false", f"sparsity={ADAPT}"),
    "optimizer-state": ("exchange.optimizer_state=true", f"sparsity={ADAPT}"),
}


@pytest.fixture(scope="module", params=list(BASES))
def pair(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Pair]:
    torch.set_num_threads(1)
    path = write_tiny_recipe(tmp_path_factory.mktemp("fuzz"), seed=3)
    return request.param, make_pair(path, BASES[request.param])


def check_decoded(message: Message, expected: Manifest) -> None:
    """What an accepted message must be: the local model's tensors exactly, masks and optimizer state
    shaped like their parameters."""
    for role, model in message.models.items():
        mine = {name.removeprefix(f"{role}/"): spec for name, spec in expected.items() if name.startswith(f"{role}/")}
        assert set(model.weights) == set(mine)
        for name, tensor in model.weights.items():
            assert (tensor.dtype, tuple(tensor.shape)) == mine[name]
        for name, mask in model.masks.items():
            assert mask.dtype == torch.bool and tuple(mask.shape) == mine[name][1]
        for name, entry in (model.optimizer or {}).items():
            for tensor in entry.values():
                assert tensor.is_floating_point() and tuple(tensor.shape) in (mine[name][1], ())


def test_every_mutated_message_is_rejected_or_decodes_to_the_local_model(pair: tuple[str, Pair]) -> None:
    base, p = pair
    outcomes: Counter[str] = Counter()
    for index in range(CASES):
        case = f"{base}-{index}"
        what, frames = mutate(p.good, random.Random(case))
        try:
            try:
                message = p.receiver.codec.decode(0, frames, p.expected)
            except MessageRejected as rejected:
                outcomes[str(rejected).split(":")[0]] += 1
                continue
            check_decoded(message, p.expected)
            assert p.receiver.receive({0: frames}), "decoded once, adopted the second time"
            outcomes["accepted"] += 1
        except Exception as error:
            pytest.fail(f"case {case!r} ({what}): {type(error).__name__}: {error}")
    # The fuzzer reaches every layer: the envelope, the manifest, the meta fields and (for the sparse
    # messages) the bitmaps and the controller state; and bit flips in tensor values decode as values.
    assert outcomes["accepted"] > CASES // 20, outcomes
    assert {"frames", "header", "payload", "topic", "manifest.dtype", "manifest.shape", "meta.lr"} <= set(outcomes)
    if base != "dense":
        assert {"sparse", "meta.sparse"} <= set(outcomes), outcomes
    if base == "optimizer-state":
        assert "optimizer state" in outcomes, outcomes
    p.receiver.step()  # what it adopted last (masks, controller and optimizer state) still trains


def test_the_reported_defect_a_list_for_a_dtype_or_name_is_a_rejection(pair: tuple[str, Pair]) -> None:
    """Issue 28: ``dtype`` or ``name`` given as a JSON list or object raised ``TypeError: unhashable``."""
    _, p = pair
    for key in ("dtype", "name"):
        for odd in (["float32"], {"float32": 1}):
            header = json.loads(p.good[1])
            header["tensors"][0][key] = odd
            frames = [p.good[0], json.dumps(header).encode(), p.good[2]]
            with pytest.raises(MessageRejected, match=rf"^manifest\.{key}: "):
                p.receiver.codec.decode(0, frames, p.expected)


def test_every_mutated_heartbeat_is_rejected_or_well_typed() -> None:
    """The I/O thread reads heartbeats itself (``zmq_io.check``): a bad one is ``MessageRejected`` too."""
    good = [envelope.topic(4, b"H"), json.dumps({"cell": 4, "generation": -1, "incarnation": 2}).encode()]
    kept = 0
    for index in range(500):
        what, frames = mutate([*good, b""], random.Random(f"heartbeat-{index}"))
        try:
            _, kind, body = zmq_io.check(frames[:2] if frames[2:] == [b""] else frames, {4}, 1 << 20)
        except MessageRejected:
            continue
        except Exception as error:
            pytest.fail(f"case heartbeat-{index} ({what}): {type(error).__name__}: {error}")
        assert kind == zmq_io.HEARTBEAT_KIND, what
        assert all(type(body[key]) is int for key in ("cell", "generation", "incarnation")), what
        assert body["cell"] == 4 and body["generation"] >= -1 and body["incarnation"] >= 0
        kept += 1
    assert 0 < kept < 500
