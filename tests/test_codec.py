"""A cell's codec: the meta fields, the optimizer state and the controller state of a neighbour's message are
type-checked before use, and a failure is a ``MessageRejected`` counted under the field it names."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from evogan_gan import sparsity

from evogan.adversarial.contracts import SparsityController
from evogan.api import ComponentOptions
from evogan.engine.cell import Cell
from evogan.engine.codec import Codec, Manifest, Message
from evogan.engine.optimizer_state import PREFIX
from evogan.engine.run import build_settings
from evogan.errors import MessageRejected
from evogan.individual import AVERAGE, SPARSE, Individual
from evogan.plugins import make_plugin_manager
from evogan.recipe import load as load_recipe
from evogan.registry import Registries
from evogan.testing import write_tiny_recipe
from evogan.transport import envelope

# ADAPT with short windows, so the discriminator's balance state (window, calibration, band) is filled
ADAPT = (
    '{use="adapt-relax", density_g=0.5, density_d=0.5, br_freq=1, da_iters=2, d_interval=2, g_interval=2, '
    'total_steps=16, calibrate={warmup=2}, verify="both"}'
)


@dataclass
class Pair:
    """A trained sender's valid message and a receiver that has published its own (as a run's cells do
    before they first gather) and agreed on the recipe with the sender."""

    good: list[bytes]
    receiver: Cell
    expected: Manifest


def make_pair(path: Path, sets: tuple[str, ...]) -> Pair:
    """Two cells of the recipe at ``path`` with ``sets``, one generation trained each."""
    registries = Registries.from_plugin_manager(make_plugin_manager())
    settings = build_settings(load_recipe(path, registries, list(sets)), registries, None, torch.device("cpu"))
    sender, receiver = Cell(0, (1,), settings), Cell(1, (0,), settings)
    for cell in (sender, receiver):
        cell.initialise()
        cell.step()  # optimizer state and controller state exist
    receiver.message()
    good = [bytes(frame) for frame in sender.message()]
    assert receiver.receive({0: good}) and not receiver.exchange.dropped, "the valid message must be adopted"
    return Pair(good, receiver, receiver._expected_manifest())


@pytest.fixture(scope="module")
def sparse(tmp_path_factory: pytest.TempPathFactory) -> Pair:
    torch.set_num_threads(1)
    path = write_tiny_recipe(tmp_path_factory.mktemp("codec"), seed=5)
    return make_pair(path, ("exchange.optimizer_state=true", f"problem.sparsity={ADAPT}"))


@pytest.fixture(scope="module")
def dense(tmp_path_factory: pytest.TempPathFactory) -> Pair:
    torch.set_num_threads(1)
    return make_pair(write_tiny_recipe(tmp_path_factory.mktemp("codec"), seed=5), ("exchange.optimizer_state=true",))


def with_meta(p: Pair, change: Callable[[dict[str, Any]], None]) -> list[bytes]:
    header = json.loads(p.good[1])
    change(header["meta"])
    return [p.good[0], json.dumps(header).encode(), p.good[2]]


def setter(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """Set ``meta[a][b]...`` (a dotted path) to ``value``."""

    def change(meta: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        for key in parents:
            meta = meta[key]
        meta[last] = value

    return change


def rejected(p: Pair, frames: list[bytes], reason: str) -> None:
    with pytest.raises(MessageRejected, match=reason):
        p.receiver.codec.decode(0, frames, p.expected)
    before = dict(p.receiver.exchange.dropped)
    assert p.receiver.receive({0: frames}) == {}
    key = reason.lstrip("^").split(":")[0].replace("\\", "")
    assert p.receiver.exchange.dropped[key] == before.get(key, 0) + 1  # counted under the field


@pytest.mark.parametrize(
    ("path", "value", "reason"),
    [
        ("recipe", ["a"], "^meta.recipe: not a string"),
        ("lr", [0.1], "^meta.lr: not an object of roles"),
        ("lr", {"generator": 0.1, "critic": 0.1}, "^meta.lr: not an object of roles"),
        ("lr.generator", -0.001, "^meta.lr: the generator's learning rate is not a finite number >= 0"),
        ("lr.generator", float("nan"), "^meta.lr: "),
        ("lr.discriminator", "0.1", "^meta.lr: "),
        ("lr.discriminator", True, "^meta.lr: "),
        ("uid.generator", 7, "^meta.uid: the generator's id is not a string"),
        ("fitness.generator", "low", "^meta.fitness: the generator's loss is not a number"),
        ("fitness", None, "^meta.fitness: not an object of roles"),
        ("sparse", [], "^meta.sparse: not an object of roles"),
        ("sparse.generator", "dense", "^meta.sparse: the generator's state is not an object"),
        ("sparse.generator.sema", {"0.weight": [1.0]}, "^meta.sparse: the generator's state carries 'sema'"),
        ("sparse.generator.masks", {}, "^meta.sparse: the generator's state carries 'masks'"),
        ("sparse.generator.controller", "rigl", "^meta.sparse: the generator's controller is not this cell's"),
        ("sparse.generator.format", 1, "^meta.sparse: the generator's format is not this cell's"),
        ("sparse.generator.role", "discriminator", "^meta.sparse: the generator's state names another role"),
        ("sparse.generator.steps", -1, "^meta.sparse: the generator's field 'steps' is malformed"),
        ("sparse.generator.density", 1.5, "^meta.sparse: the generator's field 'density' is malformed"),
        ("sparse.generator.ledger", {"train": 0.0}, "^meta.sparse: the generator's field 'ledger.dense' is malformed"),
        ("sparse.discriminator.balance.window", [[1.0, 2.0]], "^meta.sparse: .*'balance.window' is malformed"),
        ("sparse.discriminator.balance.pending", 0, "^meta.sparse: .*'balance.pending' is malformed"),
        ("sparse.discriminator.balance.band", "auto", "^meta.sparse: .*'balance.band' is malformed"),
        ("sparse.discriminator.balance.fell_back", "yes", "^meta.sparse: .*'balance.fell_back' is malformed"),
        ("sparse.discriminator.balance.undos", -1, "^meta.sparse: .*'balance.undos' is malformed"),
        ("sparse.discriminator.keep_dense", [None], "^meta.sparse: .*'keep_dense' is malformed"),
    ],
)
def test_bad_meta_fields_are_rejected_naming_the_field(sparse: Pair, path: str, value: Any, reason: str) -> None:
    rejected(sparse, with_meta(sparse, setter(path, value)), reason)


def test_masks_without_controller_state_and_state_without_masks_are_rejected(sparse: Pair, dense: Pair) -> None:
    unmasked = with_meta(sparse, lambda meta: meta["sparse"].pop("generator"))
    rejected(sparse, unmasked, "^meta.sparse: the generator has masks")
    state = json.loads(sparse.good[1])["meta"]["sparse"]
    rejected(dense, with_meta(dense, setter("sparse", state)), "^meta.sparse: the generator has a controller state")


def test_unknown_state_keys_pass_and_the_message_is_adopted(sparse: Pair) -> None:
    frames = with_meta(sparse, setter("sparse.discriminator.note", {"added": "by a later version"}))
    assert sparse.receiver.receive({0: frames})


def reencoded(p: Pair, change: Callable[[dict[str, torch.Tensor]], None]) -> list[bytes]:
    received = envelope.decode(p.good, max_bytes=1 << 30)
    tensors = dict(received.tensors)
    change(tensors)
    frames = envelope.encode(tensors, run=received.header["run"], cell=0, generation=1, meta=received.header["meta"])
    return [bytes(frame) for frame in frames]


def test_optimizer_state_must_have_this_optimizers_keys_and_shapes(dense: Pair) -> None:
    """Without the receiver's own layout, a scalar ``exp_avg`` or a renamed key would load and then fail
    the first Adam step (a worker crash, not a drop)."""
    def scalar(tensors: dict[str, torch.Tensor]) -> None:
        for key in [k for k in tensors if k.endswith("/exp_avg")]:
            tensors[key] = tensors[key].flatten()[0].clone()

    def renamed(tensors: dict[str, torch.Tensor]) -> None:
        for key in [k for k in tensors if k.startswith(PREFIX) and k.endswith("/exp_avg_sq")]:
            tensors[key.replace("/exp_avg_sq", "/momentum")] = tensors.pop(key)

    rejected(dense, reencoded(dense, scalar), "^optimizer state: .*'exp_avg' of .* is not shaped as here")
    rejected(dense, reencoded(dense, renamed), "^optimizer state: the .*'s keys are not this optimizer's")


def test_sparse_moments_are_checked_against_their_parameter_before_densifying(sparse: Pair) -> None:
    def grown(tensors: dict[str, torch.Tensor]) -> None:
        key = next(k for k in tensors if k.startswith(PREFIX) and k.endswith("/exp_avg.__shape__"))
        shape = tensors[key]
        tensors[key] = shape * 1000  # a bitmap of this size would densify to 10^6 times the elements
        bitmap = key.replace("__shape__", "__bitmap__")
        tensors[bitmap] = torch.zeros(-(-int(tensors[key].prod()) // 8), dtype=torch.uint8)

    rejected(sparse, reencoded(sparse, grown), "^manifest: tensor .* differs from the local model in dtype or shape")


def test_a_moment_of_no_local_parameter_is_rejected(sparse: Pair) -> None:
    def extra(tensors: dict[str, torch.Tensor]) -> None:
        key = next(k for k in tensors if k.startswith(PREFIX) and k.endswith("/exp_avg.__values__"))
        stem = key.removesuffix("/exp_avg.__values__")
        for suffix in (".__values__", ".__bitmap__", ".__shape__"):
            tensors[f"{PREFIX}generator/nothing/exp_avg{suffix}"] = tensors[f"{stem}/exp_avg{suffix}"]

    rejected(sparse, reencoded(sparse, extra), "^optimizer state: tensor .*nothing/exp_avg' names no local parameter")


def test_a_tensor_sent_both_dense_and_sparse_is_rejected(sparse: Pair) -> None:
    def both(tensors: dict[str, torch.Tensor]) -> None:
        key = next(k for k in tensors if not k.startswith(PREFIX) and k.endswith(".__values__"))
        name = key.removesuffix(".__values__")
        tensors[name] = torch.zeros([int(d) for d in tensors[name + ".__shape__"].tolist()])

    rejected(sparse, reencoded(sparse, both), "^sparse: tensor .* is sent both dense and as values")


def test_bf16_on_the_wire_halves_the_bytes_and_arrives_as_the_rounded_float32_model(tmp_path: Path) -> None:
    """``exchange.wire = "bf16"``: weights, the optimizer's moments and their average travel in bf16 and
    are float32 again on arrival, each the bf16 rounding of what was sent; Adam's step count (a scalar)
    keeps its exact value."""
    torch.set_num_threads(1)
    path = write_tiny_recipe(tmp_path, seed=5)
    sets = ("exchange.optimizer_state=true", "problem.g_ema=0.9")
    fp32 = make_pair(path, sets)
    bf16 = make_pair(path, (*sets, 'exchange.wire="bf16"'))
    assert 0.5 <= len(bf16.good[2]) / len(fp32.good[2]) < 0.52  # the tensors' frame (scalars stay fp32)

    sent = envelope.decode(fp32.good, max_bytes=1 << 30).tensors  # the same sender's float32 tensors
    wire = envelope.decode(bf16.good, max_bytes=1 << 30).tensors
    floats = [name for name, t in sent.items() if t.dtype == torch.float32]
    assert floats and all(wire[n].dtype == (torch.bfloat16 if sent[n].dim() else torch.float32) for n in floats)
    arrived = bf16.receiver.foreign[0]
    for role, individual in arrived.items():
        for name, value in individual.network.state_dict().items():
            assert value.dtype == torch.float32
            assert torch.equal(value, sent[f"{role}/{name}"].to(torch.bfloat16).float()), name
        assert "average" in individual.extra or role != "generator"
    steps = [n for n in floats if n.startswith(PREFIX) and n.endswith("/step")]
    assert steps and all(torch.equal(wire[n], sent[n]) for n in steps)


def test_a_bf16_tensor_is_refused_where_the_wire_is_fp32(dense: Pair) -> None:
    tensors = dict(envelope.decode(dense.good, max_bytes=1 << 30).tensors)
    name = next(n for n, t in tensors.items() if t.dtype == torch.float32 and t.dim() and not n.startswith(PREFIX))
    tensors[name] = tensors[name].to(torch.bfloat16)
    header = envelope.parse_header(dense.good, max_bytes=1 << 30)
    frames = envelope.encode(tensors, run=header["run"], cell=header["cell"], generation=header["generation"],
                             substep=header.get("substep", 0), sequence=header["sequence"],
                             incarnation=header["incarnation"], meta=header["meta"])  # fmt: skip
    with pytest.raises(MessageRejected, match="differs from the local model in dtype or shape") as refused:
        dense.receiver.codec.decode(0, [bytes(f) for f in frames], dense.expected)
    rejected(dense, [bytes(f) for f in frames], "^" + re.escape(str(refused.value)))


# ------------------------------------------------------------------------ the state's seam (issue 38)
def _individuals(controller: Any) -> dict[str, Individual]:
    torch.manual_seed(0)
    made = {}
    for role, sizes in (("generator", (4, 8, 2)), ("discriminator", (2, 8, 1))):
        network = torch.nn.Sequential(torch.nn.Linear(*sizes[:2]), torch.nn.ReLU(), torch.nn.Linear(*sizes[1:]))
        optimizer = torch.optim.Adam(network.parameters(), lr=1e-3)
        made[role] = Individual(role, network, optimizer, {"lr": 1e-3}, 0, f"0/{role[0].upper()}")
        if controller is not None:
            controller.prepare(made[role], stream=torch.Generator().manual_seed(1))
    made["generator"].extra[AVERAGE] = {n: p.detach() + 1 for n, p in made["generator"].network.named_parameters()}
    return made


def _round_trip(sender: Codec, receiver: Codec, best: dict[str, Individual]) -> Message:
    expected = {
        f"{role}/{k}": (v.dtype, tuple(v.shape)) for role, i in best.items() for k, v in i.network.state_dict().items()
    }
    parameters = {f"{role}/{n}" for role, i in best.items() for n, _ in i.network.named_parameters()}
    receiver.encode(best, generation=1, substep=0, sequence=1, incarnation=0)  # learns its own state's layout
    frames = sender.encode(best, generation=1, substep=0, sequence=1, incarnation=0)
    return receiver.decode(0, frames, expected, parameters)


def test_the_codec_carries_masks_controller_state_and_average_through_the_seam() -> None:
    controller = sparsity.Static(sparsity.Static.Options(density_g=0.5, density_d=0.5))
    best = _individuals(controller)
    codec = lambda cell: Codec(cell, run_id="r", recipe="x", optimizer_state=False, max_bytes=1 << 20,  # noqa: E731
                               sparsity=controller)  # fmt: skip
    message = _round_trip(codec(0), codec(1), best)
    for role, individual in best.items():
        model, state = message.models[role], individual.extra[SPARSE]
        assert model.masks.keys() == state["masks"].keys()
        assert all(torch.equal(model.masks[n], m) for n, m in state["masks"].items())
        assert model.sparse == controller.wire_state(state) and "masks" not in model.sparse
        assert all(torch.equal(model.weights[k], v) for k, v in individual.network.state_dict().items())
    average = best["generator"].extra[AVERAGE]
    received = message.models["generator"].average
    assert received is not None and all(torch.equal(received[k], v) for k, v in average.items())
    assert message.models["discriminator"].average is None


class _Noting(SparsityController[ComponentOptions]):
    """A controller of another plugin: its state says what travels and what it accepts."""

    name = "noting"

    def prepare(self, individual: Individual, *, stream: torch.Generator) -> None:
        individual.extra[SPARSE] = {"note": 1, "private": 2}

    def wire_state(self, state: Mapping[str, Any]) -> dict[str, Any]:
        return {"note": state["note"]}

    def check_wire_state(self, state: Any, role: str, local: Mapping[str, Any] | None) -> dict[str, Any]:
        if not isinstance(state, dict) or state.get("note") != 1:
            raise MessageRejected(f"meta.sparse: the {role}'s note is not 1")
        return state


def test_a_controllers_own_wire_state_and_check_are_what_the_codec_uses() -> None:
    controller = _Noting(ComponentOptions())
    best = _individuals(controller)
    codec = lambda cell: Codec(cell, run_id="r", recipe="x", optimizer_state=False, max_bytes=1 << 20,  # noqa: E731
                               sparsity=controller)  # fmt: skip
    message = _round_trip(codec(0), codec(1), best)
    assert message.models["generator"].sparse == {"note": 1} and message.models["generator"].masks == {}
    for individual in best.values():
        individual.extra[SPARSE]["note"] = 2
    with pytest.raises(MessageRejected, match=r"^meta\.sparse: the generator's note is not 1"):
        _round_trip(codec(0), codec(1), best)
