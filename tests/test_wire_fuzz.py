"""Fuzzed neighbour messages: every structural or bitwise mutation of a valid envelope (a dense, a sparse and
an optimizer-state message of real cells) is rejected with ``MessageRejected`` or decodes to the local
model's dtypes and shapes and is adopted; no other exception ever escapes (issue 28).

The mutations are seeded (``tests/wire_mutations.py``): a failure names its case, and
``mutate(frames, random.Random(case))`` replays it.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch
from test_codec import ADAPT, Pair, make_pair  # pytest puts tests/ on sys.path (rootdir conftest, prepend mode)
from test_distributed import records, timings
from wire_mutations import mutate

from evogan.engine.codec import Manifest, Message
from evogan.errors import MessageRejected
from evogan.runtime.launcher import launch
from evogan.runtime.placement import owner_of
from evogan.runtime.single import prepare, run_in_process
from evogan.testing import write_tiny_recipe
from evogan.transport import envelope, zmq_io

CASES = 1500  # per base message: 4,500 in all, a few seconds
BASES = {
    "dense": ("exchange.optimizer_state=false",),
    "sparse": ("exchange.optimizer_state=false", f"problem.sparsity={ADAPT}"),
    "optimizer-state": ("exchange.optimizer_state=true", f"problem.sparsity={ADAPT}"),
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
                assert torch.isfinite(tensor).all()
        for tensor in (*model.weights.values(), *(model.average or {}).values(), *model.extra.values()):
            assert not tensor.is_floating_point() or torch.isfinite(tensor).all()  # a NaN or Inf is dropped


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


# ------------------------------------------------------------------------------------------ end to end
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_rogue_between_the_workers_changes_no_record_and_every_drop_is_counted(tiny_recipe, tmp_path: Path) -> None:
    """A third process stands between every publisher and its subscribers (CURVE off; the cells advertise
    127.0.0.2, the rogue binds there and forwards to 127.0.0.1) and sends garbage, replays and messages
    older than any kept. The records equal the undisturbed single-process run's, and each rank's last
    timings record counts exactly the drops the rogue caused (duplicates: at least, as a subscriber also
    gets each publisher's latest message again when another subscribes). A forged message that passes
    every check is not sent: without CURVE nothing can tell it from a real one."""
    generations, keep = 5, 2
    path = tiny_recipe(seed=6, generations=generations)
    reference = prepare(path)
    run_in_process(reference)
    sets = ["run.workers=2", 'exchange.options.advertise="127.0.0.2"', f"exchange.options.keep={keep}"]
    prepared = prepare(path, overrides=sets)
    run_dir, stop = prepared.run_dir.path, tmp_path / "stop"
    command = [sys.executable, str(Path(__file__).with_name("rogue_publisher.py")), str(run_dir), "4"]
    rogue = subprocess.Popen([*command, str(generations), str(keep), str(stop)], stdout=subprocess.PIPE, text=True)
    try:
        summary = launch(prepared)
    finally:
        stop.touch()
        out, _ = rogue.communicate(timeout=60)
    assert rogue.returncode == 0, out
    report = json.loads(out.splitlines()[-1])
    assert summary["generations"] == generations
    assert records(run_dir) == records(reference.run_dir.path)  # metrics.jsonl: "dropped" {} in both
    caused: dict[int, Counter[str]] = {0: Counter(), 1: Counter()}
    for subscriber, counts in report["deliveries"].items():
        caused[owner_of(int(subscriber), 2, 4)].update(counts)
    for rank, expected in caused.items():
        last = max(
            (t["transport"]["dropped"] for t in timings(run_dir) if owner_of(t["cell"], 2, 4) == rank),
            key=lambda dropped: sum(dropped.values()),
        )
        assert {reason: last.get(reason, 0) for reason in expected if reason != "duplicate"} == {
            reason: n for reason, n in expected.items() if reason != "duplicate"
        }
        assert last.get("duplicate", 0) >= expected["duplicate"] > 0
        assert expected["stale"] > 0 and sum(expected.values()) > 100, expected
    assert {"manifest", "header_fields", "header_not_json", "frames", "heartbeat"} <= set(caused[0]), caused
