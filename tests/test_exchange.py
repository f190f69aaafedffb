"""Exchanges inside a generation (``exchange.every_batches``), optimizer state in the envelope
(``exchange.optimizer_state``) and the fitness work the re-evaluations reuse."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from click.testing import CliRunner
from test_run import metrics, run  # pytest puts tests/ on sys.path (rootdir conftest, prepend mode)

from evogan.cli import cli
from evogan.engine.cell import Cell
from evogan.engine.optimizer_state import PREFIX
from evogan.engine.run import build_settings
from evogan.errors import MessageRejected, RunFailure
from evogan.individual import Individual
from evogan.plugins import make_plugin_manager
from evogan.recipe import load as load_recipe
from evogan.registry import Registries
from evogan.runtime.single import prepare, run_in_process
from evogan.transport import envelope
from evogan.transport.inproc import InProcessTransport

SPARSE = '{use="rigl", density_g=0.3, density_d=0.5, g_interval=2, total_steps=16}'


def without(records: Sequence[dict[str, Any]], *keys: str) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k not in keys} for r in records]


@pytest.fixture
def published(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int, int]]:
    """Every (cell, generation, substep) the in-process transport is handed."""
    seen: list[tuple[int, int, int]] = []
    original = InProcessTransport.publish

    def publish(self: InProcessTransport, cell: int, frames: Sequence[bytes | memoryview]) -> None:
        header = envelope.parse_header(frames, max_bytes=1 << 40)
        seen.append((cell, header["generation"], header["substep"]))
        original(self, cell, frames)

    monkeypatch.setattr(InProcessTransport, "publish", publish)
    return seen


# ------------------------------------------------------------------------------------------ cadence
@pytest.mark.parametrize(("every", "inside"), [(1, [1, 2, 3]), (2, [2]), (3, [3]), (4, [])])
def test_exchange_every_k_batches_publishes_at_each_point_in_lockstep(
    tiny_recipe, published, every: int, inside: list[int]
) -> None:
    # 4 batches per generation: points after k, 2k, ... batches, never after the last one
    records = metrics(run(tiny_recipe(generations=2), f"exchange.every_batches={every}"))
    for cell in range(4):
        mine = [(g, s) for c, g, s in published if c == cell]
        expected = [(0, 0)]  # the start; then per generation the points inside it and its end
        for g in (1, 2):
            expected += [(g - 1, s) for s in inside] + [(g, 0)]
        assert mine == expected
    for record in records:
        assert record["exchanges"] == 1 + len(inside)
        assert record["staleness"] == {
            str(p): {"generations": 0, "batches": 0} for p in record["exchange"]
        }  # lockstep: every message used is the one wanted


def test_no_point_inside_the_generation_gives_the_plain_records(tiny_recipe) -> None:
    # k >= batches: the turn-taking path runs, but no exchange happens inside: same numbers
    path = tiny_recipe(seed=2, generations=2)
    plain = metrics(run(path))
    turns = metrics(run(path, "exchange.every_batches=4"))
    assert turns == plain and plain[0]["exchanges"] == 1


@pytest.mark.parametrize("selection", ["true", "false"])
def test_fresher_neighbours_change_training_and_stay_reproducible(tiny_recipe, selection: str) -> None:
    path = tiny_recipe(seed=5, generations=2)
    options = (f"population.selection={selection}", "exchange.every_batches=1")
    first, second = run(path, *options), run(path, *options)
    assert (first / "metrics.jsonl").read_bytes() == (second / "metrics.jsonl").read_bytes()
    once = metrics(run(path, f"population.selection={selection}"))
    if selection == "false":  # the neighbours' discriminators the generators face are newer
        assert without(metrics(first), "exchanges") != without(once, "exchanges")


def test_resume_is_exact_with_the_new_keys(tiny_recipe) -> None:
    path = tiny_recipe(seed=3, generations=4)
    options = ("exchange.every_batches=2", "exchange.optimizer_state=true", f"problem.sparsity={SPARSE}")
    straight = run(path, *options)
    interrupted = run(path, *options, "run.checkpoint_every=2", stop_after=3)
    run_in_process(prepare(None, resume_dir=interrupted))
    assert metrics(interrupted) == metrics(straight)


def test_cells_in_one_process_take_turns_every_round_publishing_before_anyone_gathers(
    tiny_recipe, published, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[tuple[str, int, int]] = []
    original = InProcessTransport.gather

    def gather(self: InProcessTransport, cell: int, *args: Any, substep: int = 0, **kwargs: Any) -> Any:
        events.append(("gather", cell, substep))
        return original(self, cell, *args, substep=substep, **kwargs)

    monkeypatch.setattr(InProcessTransport, "gather", gather)
    monkeypatch.setattr(
        InProcessTransport,
        "publish",
        lambda self, cell, frames, publish=InProcessTransport.publish: (
            events.append(("publish", cell, envelope.parse_header(frames, max_bytes=1 << 40)["substep"])),
            publish(self, cell, frames),
        )[1],
    )
    run(tiny_recipe(generations=1), "exchange.every_batches=2")  # 4 batches: one point inside, after 2
    start = [("publish", c, 0) for c in range(4)]
    first_round = [e for c in range(4) for e in (("gather", c, 0), ("publish", c, 2))]
    second_round = [e for c in range(4) for e in (("gather", c, 2), ("publish", c, 0))]
    expected = start + first_round + second_round
    assert events[: len(expected)] == expected
    assert {e[0] for e in events[len(expected) :]} == {"gather"}  # the end: the last models, for the summary


def test_a_cell_that_fails_inside_its_turn_stops_the_generation_with_its_error(
    tiny_recipe, published, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = Cell.varying

    def varying(self: Cell, job: Any) -> Any:
        steps = original(self, job)
        for step in steps:
            yield step
            if self.index == 1:
                raise ValueError("cell 1 failed after its first exchange")

    monkeypatch.setattr(Cell, "varying", varying)
    with pytest.raises(ValueError, match="cell 1 failed"):
        run(tiny_recipe(generations=2), "exchange.every_batches=2")
    # every cell published at the point inside generation 1; then cell 0 finished, cell 1 failed, and
    # nobody else trained on: no cell published the end of generation 1
    assert [(c, s) for c, g, s in published if s] == [(c, 2) for c in range(4)]
    assert [(c, g) for c, g, s in published if not s] == [(c, 0) for c in range(4)] + [(0, 1)]


# ------------------------------------------------------------------------------------------ recipes
@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("exchange.every_batches=-1", "exchange.every_batches: must be >= 0"),
        ("exchange.every_batches=2.5", "exchange.every_batches: must be a valid integer"),
        ('exchange.optimizer_state="sometimes"', 'exchange.optimizer_state: must be "auto", true or false'),
        ("exchange.optimizer_state=1", 'exchange.optimizer_state: must be "auto", true or false'),
    ],
)
def test_bad_exchange_keys_are_one_line_errors_with_exit_2(tiny_recipe, setting: str, message: str) -> None:
    path = tiny_recipe()
    result = CliRunner().invoke(cli, ["run", str(path), "--set", setting, "--quiet"], catch_exceptions=False)
    assert result.exit_code == 2 and "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and f"{path}: {message}" in lines[0]


def test_optimizer_state_defaults_follow_selection(tiny_recipe) -> None:
    registries = Registries.from_plugin_manager(make_plugin_manager())
    path = tiny_recipe()

    def carries(*sets: str) -> bool:
        recipe = load_recipe(path, registries, list(sets))
        return recipe.exchange.carries_optimizer(recipe.population.selection)

    assert carries() and not carries("population.selection=false")
    assert carries("population.selection=false", "exchange.optimizer_state=true")
    assert not carries("exchange.optimizer_state=false")


# ------------------------------------------------------------------------------------------ envelope
def two_cells(path: Path, *sets: str) -> tuple[Cell, Cell]:
    registries = Registries.from_plugin_manager(make_plugin_manager())
    recipe = load_recipe(path, registries, list(sets))
    settings = build_settings(recipe, registries, None, torch.device("cpu"))
    sender, receiver = Cell(0, (1,), settings), Cell(1, (0,), settings)
    sender.initialise()
    receiver.initialise()
    sender.step()  # Adam has taken steps: moments and step counts exist
    return sender, receiver


@pytest.mark.parametrize("sparse", [False, True])
def test_optimizer_state_round_trips_through_the_envelope(tiny_recipe, sparse: bool) -> None:
    sets = ["exchange.optimizer_state=true", *([f"problem.sparsity={SPARSE}"] if sparse else [])]
    sender, receiver = two_cells(tiny_recipe(), *sets)
    frames = sender.message()
    header = envelope.parse_header(frames, max_bytes=1 << 30)
    names = [entry["name"] for entry in header["tensors"]]
    assert any(name.startswith(PREFIX) for name in names)
    assert receiver.receive({0: frames}) and not receiver.exchange.dropped
    for role in ("generator", "discriminator"):
        theirs, ours = sender.best(role), receiver.foreign[0][role]
        params = dict(theirs.network.named_parameters())
        received = dict(ours.network.named_parameters())
        masks = theirs.extra.get("sparse", {}).get("masks") or {}
        assert bool(masks) == sparse
        for name, param in params.items():
            sent, got = theirs.optimizer.state[param], ours.optimizer.state[received[name]]
            assert set(sent) == set(got) == {"step", "exp_avg", "exp_avg_sq"}
            for key in sent:
                assert got[key].dtype == sent[key].dtype and torch.equal(got[key], sent[key])
            assert float(got["step"]) == float(sent["step"]) > 0
            if name in masks:
                assert torch.equal(ours.extra["sparse"]["masks"][name], masks[name])
                assert not got["exp_avg"][~masks[name]].any() and not got["exp_avg_sq"][~masks[name]].any()
                sparse_names = {n for n in names if n.startswith(f"{PREFIX}{role}/{name}/exp_avg")}
                assert f"{PREFIX}{role}/{name}/exp_avg.__bitmap__" in sparse_names
    if sparse:  # the moments of masked weights travel as values plus bitmap, like the weights
        dense_sender, _ = two_cells(tiny_recipe(), "exchange.optimizer_state=true")
        assert len(frames[2]) < len(dense_sender.message()[2])  # tensor bytes


def test_without_optimizer_state_a_neighbour_starts_fresh(tiny_recipe) -> None:
    sender, receiver = two_cells(tiny_recipe(), "exchange.optimizer_state=false")
    frames = sender.message()
    names = [entry["name"] for entry in envelope.parse_header(frames, max_bytes=1 << 30)["tensors"]]
    assert not [name for name in names if name.startswith(PREFIX)]
    receiver.receive({0: frames})
    assert not receiver.foreign[0]["generator"].optimizer.state


def test_bad_optimizer_tensors_are_dropped_and_counted(tiny_recipe) -> None:
    sender, receiver = two_cells(tiny_recipe(), "exchange.optimizer_state=true")
    received = envelope.decode(sender.message(), max_bytes=1 << 30)
    name = next(k for k in received.tensors if k.startswith(PREFIX) and k.endswith("/exp_avg"))
    for bad in (
        {**received.tensors, name: received.tensors[name][..., :1]},  # wrong shape
        {**received.tensors, f"{PREFIX}generator/no.such/exp_avg": torch.zeros(1)},  # no such parameter
        {k: v for k, v in received.tensors.items() if k != name},  # one parameter lacks a key
    ):
        frames = envelope.encode(bad, run="run", cell=0, generation=1, meta=received.header["meta"])
        assert receiver.receive({0: frames}) == {}
    assert receiver.exchange.dropped == {"optimizer state": 3}


def test_a_neighbour_that_never_sent_this_recipe_stops_the_run(tiny_recipe) -> None:
    sender, receiver = two_cells(tiny_recipe())
    good = sender.message()
    received = envelope.decode(good, max_bytes=1 << 30)
    meta = {**received.header["meta"], "recipe": "another"}
    other = envelope.encode(received.tensors, run=received.header["run"], cell=0, generation=1, meta=meta)
    with pytest.raises(RunFailure, match=r"cell 1: neighbour cell 0 runs recipe another, this node .*differs"):
        receiver.receive({0: other})
    assert receiver.receive({0: good}) and not receiver.exchange.dropped
    assert receiver.receive({0: other}) == {}  # once it agreed, a stray message is only dropped
    assert receiver.exchange.dropped == {"recipe hash differs": 1}


def test_a_clone_owns_its_optimizer_state(tiny_recipe) -> None:
    sender, _ = two_cells(tiny_recipe())
    parent = sender.best("generator")
    child: Individual = parent.clone(sender.problem.make_optimizer)
    param, copy = next(parent.network.parameters()), next(child.network.parameters())
    before = parent.optimizer.state[param]["exp_avg"].clone()
    copy.grad = torch.ones_like(copy)
    child.optimizer.step()
    assert torch.equal(parent.optimizer.state[param]["exp_avg"], before)
    assert float(parent.optimizer.state[param]["step"]) + 1 == float(child.optimizer.state[copy]["step"])


# ------------------------------------------------------------------------------------------ fitness reuse
def test_fitness_memo_reuses_d_real_and_gives_the_same_losses(tiny_recipe) -> None:
    sender, _ = two_cells(tiny_recipe())
    problem = sender.problem
    gens = [ind.network for ind in sender.population("generator")]
    discs = [ind.network for ind in sender.population("discriminator")]
    real = problem.fitness_batch(generator=torch.Generator().manual_seed(1))
    calls: list[bool] = []
    hook = discs[0].register_forward_pre_hook(lambda _m, args: calls.append(args[0] is real))
    try:
        memo: dict[torch.nn.Module, Any] = {}
        g_full, d_full = problem.fitness(
            gens, discs, real, generator=torch.Generator().manual_seed(2), memo=memo
        )
        assert calls.count(True) == 1
        g_only, _ = problem.fitness(
            gens, discs, real, generator=torch.Generator().manual_seed(2), score=("generator",), memo=memo
        )
        _, d_only = problem.fitness(
            gens, discs, real, generator=torch.Generator().manual_seed(2), score=("discriminator",), memo=memo
        )
        assert calls.count(True) == 1  # D(real) came from the memo; scoring G never needs it
    finally:
        hook.remove()
    assert torch.equal(g_full, g_only) and torch.equal(d_full, d_only)


def test_a_neighbour_model_received_inside_a_generation_leaves_the_memo(tiny_recipe) -> None:
    sender, receiver = two_cells(tiny_recipe())
    receiver.receive({0: sender.message()})
    foreign = receiver.foreign[0]["discriminator"].network
    receiver._memo[foreign] = torch.zeros(1)
    receiver.receive({0: sender.message()})
    assert foreign not in receiver._memo


def test_substep_is_validated(tiny_recipe) -> None:
    frames = envelope.encode({}, run="r", cell=0, generation=1, substep=3)
    assert envelope.stamp(envelope.parse_header(frames, max_bytes=10)) == (1, 3)
    header = json.loads(bytes(frames[1]))
    for bad in (-1, "2", True):
        header["substep"] = bad
        with pytest.raises(MessageRejected, match="substep"):
            envelope.parse_header([frames[0], json.dumps(header).encode(), frames[2]], max_bytes=10)


def test_transports_hold_a_bounded_number_of_messages_from_inside_generations() -> None:
    transport = InProcessTransport(InProcessTransport.Options(keep=3))
    for generation in range(4):
        for substep in range(0, 50, 5):
            transport.publish(0, envelope.encode({}, run="r", cell=0, generation=generation, substep=substep))
    held = sorted(transport._messages[0])
    assert held == [(1, 0), (2, 0), (3, 0), (3, 35), (3, 40), (3, 45)]

    def got(generation: int, substep: int) -> tuple[int, int]:
        frames = transport.gather(1, [0], generation, max_staleness=0, timeout=1, substep=substep)[0]
        return envelope.stamp(envelope.parse_header(frames, max_bytes=1 << 20))

    assert got(3, 40) == (3, 40) and got(2, 0) == (2, 0) and got(3, 20) == (3, 0) and got(9, 0) == (3, 45)


def test_moments_of_a_masked_weight_must_come_with_its_mask(tiny_recipe) -> None:
    sender, receiver = two_cells(tiny_recipe(), "exchange.optimizer_state=true", f"problem.sparsity={SPARSE}")
    received = envelope.decode(sender.message(), max_bytes=1 << 30)
    values = next(k for k in received.tensors if k.startswith(PREFIX) and k.endswith("/exp_avg.__values__"))
    name = values.removesuffix(".__values__")
    dense = {k: v for k, v in received.tensors.items() if not k.startswith(name + ".__")}
    shape = [int(d) for d in received.tensors[name + ".__shape__"].tolist()]
    dense[name] = torch.ones(shape)  # sent dense: nonzero where the weight is masked
    frames = envelope.encode(dense, run="run", cell=0, generation=1, meta=received.header["meta"])
    assert receiver.receive({0: frames}) == {}
    assert receiver.exchange.dropped == {"optimizer state": 1}
