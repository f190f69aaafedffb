"""Worker processes under torch elastic: placement, control plane, lockstep equality, faults, security,
two agents forming one run, and bad input. Launching tests are ``slow`` (tens of seconds each)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from rich.console import Console
from test_ada import ADA  # pytest puts tests/ on sys.path (rootdir conftest, prepend mode)

from evogan.builtin.reporter import TerminalReporter
from evogan.engine.rundir import RunDirectory
from evogan.errors import RecipeError, RunFailure, UserError
from evogan.hookspecs import hookimpl
from evogan.plugins import make_plugin_manager
from evogan.recipe import load as load_recipe
from evogan.recipe import transport_choice
from evogan.registry import Registries
from evogan.runtime import launcher
from evogan.runtime.control import from_row, to_rows
from evogan.runtime.faults import Fault
from evogan.runtime.launcher import PORT_ENV, Tail, launch
from evogan.runtime.placement import cells_of, owner_of, workers_for
from evogan.runtime.single import prepare, run_in_process
from evogan.transport.zmq import ZmqTransport

ROOT = Path(__file__).resolve().parents[1]
PY = str(Path(sys.executable))
pytestmark = pytest.mark.timeout(240)


def records(run_dir: Path) -> list[dict[str, Any]]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return sorted((json.loads(line) for line in lines), key=lambda r: (r["generation"], r["cell"]))


def timings(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "timings.jsonl").read_text().splitlines()]


def launched(
    path: Path, *overrides: str, stop: Callable[[], bool] = lambda: False, resume: Path | None = None
) -> tuple[Path, dict[str, Any]]:
    prepared = prepare(None if resume else path, resume_dir=resume, overrides=["run.workers=2", *overrides])
    summary = launch(prepared, stop=stop)
    return prepared.run_dir.path, summary


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# ------------------------------------------------------------------------------------------ fast
def test_the_old_worker_module_still_starts_a_worker_with_one_warning() -> None:
    """``-m evogan.worker`` (cluster scripts before 0.3.0) is ``-m evogan.start_worker``, with one
    DeprecationWarning that Python shows (it is attributed to ``__main__``)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    done = subprocess.run(
        [PY, "-m", "evogan.worker", "--help"], capture_output=True, text=True, timeout=120, env=env, check=False
    )
    assert done.returncode == 0 and done.stdout.startswith("usage: evogan.start_worker"), done
    assert done.stderr.count("DeprecationWarning: evogan.worker is deprecated") == 1, done.stderr
    assert "use evogan.start_worker" in done.stderr


@pytest.mark.parametrize(("cells", "world"), [(4, 1), (4, 2), (9, 2), (9, 4), (5, 5)])
def test_cells_are_spread_in_contiguous_blocks(cells: int, world: int) -> None:
    blocks = [list(cells_of(rank, world, cells)) for rank in range(world)]
    assert [c for block in blocks for c in block] == list(range(cells))
    assert max(map(len, blocks)) - min(map(len, blocks)) <= 1
    assert all(owner_of(c, world, cells) == r for r, block in enumerate(blocks) for c in block)


def test_more_workers_than_cells_is_refused() -> None:
    with pytest.raises(UserError, match="5 workers for 4 cells"):
        cells_of(0, 5, 4)
    # What a recipe's count is cut to (per node): one cell each at least, never below one worker.
    assert [workers_for(2, 1), workers_for(5, 4), workers_for(2, 4, 2), workers_for(2, 1, 2)] == [1, 4, 2, 1]


def test_fault_spec() -> None:
    assert Fault.parse("3:2:kill") == Fault(3, 2, "kill", 5.0)
    assert Fault.parse("1:4:stop:2.5") == Fault(1, 4, "stop", 2.5)
    for bad in ("1:2", "a:2:kill", "1:2:explode", "1:2:stop:x"):
        with pytest.raises(UserError, match="EVOGAN_FAULT"):
            Fault.parse(bad)


def test_endpoint_rows_round_trip_without_pickle() -> None:
    texts = ["tcp://127.0.0.1:5555", "", "ipc:///tmp/é"]
    rows = to_rows(texts)
    assert rows.dtype == torch.uint8 and rows.shape[0] == 3
    assert [from_row(row) for row in rows] == texts
    with pytest.raises(UserError, match="longer than"):
        to_rows(["x" * 600])


def test_truncation_touches_only_the_given_cells_while_others_append(tmp_path: Path) -> None:
    run_dir = RunDirectory(tmp_path)
    for generation in (1, 2, 3):
        for cell in (0, 1):
            run_dir.append_metrics({"cell": cell, "generation": generation})
    stop = threading.Event()

    def append() -> None:  # another worker keeps appending its own cell's records meanwhile
        generation = 10
        while not stop.is_set():
            run_dir.append_metrics({"cell": 1, "generation": generation})
            generation += 1

    thread = threading.Thread(target=append)
    thread.start()
    try:
        for _ in range(30):
            run_dir.truncate_records({0: 1})
    finally:
        stop.set()
        thread.join()
    kept = run_dir.read_metrics()
    assert [r["generation"] for r in kept if r["cell"] == 0] == [1]
    ones = [r["generation"] for r in kept if r["cell"] == 1]
    assert ones[:3] == [1, 2, 3] and ones[3:] == list(range(10, 10 + len(ones) - 3))  # none lost


def test_exchange_options_are_validated_and_not_hashed(tiny_recipe) -> None:
    registries = Registries.from_plugin_manager(make_plugin_manager())
    path = tiny_recipe()
    plain = load_recipe(path, registries)
    bound = load_recipe(path, registries, ['exchange.transport="zmq"', 'exchange.options.bind="0.0.0.0"'])
    assert bound.exchange.options == {"bind": "0.0.0.0"}
    assert load_recipe(path, registries, ['exchange.options.bind="10.0.0.1"']).digest == plain.digest
    with pytest.raises(RecipeError, match=r"exchange\.options\.nonsense: unknown key"):
        load_recipe(path, registries, ['exchange.transport="zmq"', "exchange.options.nonsense=1"])
    with pytest.raises(RecipeError, match=r"exchange\.options\.hwm: must be >= 1"):
        launcher.check_launch(prepare(path, overrides=["run.workers=2", "exchange.options.hwm=0"]))


def test_the_transport_is_chosen_by_what_it_can_connect(tiny_recipe) -> None:
    registries = Registries.from_plugin_manager(make_plugin_manager())
    path = tiny_recipe()

    def chosen(processes: int, *sets: str) -> str:
        recipe = load_recipe(path, registries, list(sets))
        return transport_choice(recipe, registries, processes=processes).component.name

    assert chosen(1) == "inproc" and chosen(2) == "zmq"
    assert chosen(1, 'exchange.options.bind="0.0.0.0"') == "inproc"  # node settings of the zmq default
    with pytest.raises(RecipeError, match=rf"{path}: exchange\.transport: 'zmq' needs run\.workers > 1"):
        chosen(1, 'exchange.transport="zmq"')
    with pytest.raises(RecipeError, match=r"'inproc' cannot connect worker processes"):
        chosen(2, 'exchange.transport="inproc"')

    class Another(ZmqTransport):
        name = "another"

    class Provider:
        @hookimpl
        def evogan_register_transports(self, register: Callable[[type], None]) -> None:
            register(Another)

    crowded = Registries.from_plugin_manager(make_plugin_manager(extra=[Provider()]))
    recipe = load_recipe(path, crowded)
    with pytest.raises(RecipeError, match=r"transport for run\.workers > 1: several fit \(another, zmq\): name one"):
        transport_choice(recipe, crowded, processes=2)
    assert transport_choice(recipe, crowded, processes=1).component.name == "inproc"


def test_launch_refuses_bad_setups_before_starting_anything(tiny_recipe, monkeypatch) -> None:
    path = tiny_recipe()
    with pytest.raises(UserError, match="5 workers for 4 cells"):
        launcher.check_launch(prepare(path, overrides=["run.workers=5"]))
    with pytest.raises(UserError, match="cannot connect worker processes"):
        launcher.check_launch(prepare(path, overrides=["run.workers=2", 'exchange.transport="inproc"']))
    if torch.cuda.device_count() < 64:
        with pytest.raises(UserError, match=r"run\.device"):
            launcher.check_launch(
                prepare(path, overrides=["run.workers=64", 'run.device="cuda"', "topology.rows=8", "topology.cols=8"])
            )
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        monkeypatch.setenv(PORT_ENV, str(busy.getsockname()[1]))
        with pytest.raises(UserError, match=r"rendezvous port .* is not free"):
            launcher.rendezvous_endpoint()


def test_tail_joins_timings_and_follows_a_rewrite(tmp_path: Path) -> None:
    run_dir = RunDirectory(tmp_path)
    tail = Tail(run_dir)
    run_dir.append_metrics({"cell": 0, "generation": 1, "g_loss": 1.0})
    assert tail.poll() == []  # waits for the timings line
    run_dir.append_timings({"cell": 0, "generation": 1, "training": 0.5, "liveness": {"1": 0.2}})
    (got,) = tail.poll()
    assert got["timings"] == {"training": 0.5, "liveness": {"1": 0.2}}
    run_dir.append_metrics({"cell": 0, "generation": 2, "g_loss": 1.0})
    run_dir.truncate_records({0: 2})  # a resume rewrites the file (new inode)
    run_dir.append_timings({"cell": 0, "generation": 2})
    assert [r["generation"] for r in tail.poll()] == [2]
    run_dir.append_metrics({"cell": 1, "generation": 1})
    assert [r["cell"] for r in tail.poll(final=True)] == [1]


def test_a_resumed_tail_reports_only_what_is_new_and_holds_no_record_per_generation(tmp_path: Path) -> None:
    run_dir = RunDirectory(tmp_path)
    for generation in range(1, 201):
        for cell in (0, 1):
            run_dir.append_metrics({"cell": cell, "generation": generation})
            run_dir.append_timings({"cell": cell, "generation": generation})
    tail = Tail(run_dir)
    tail.skip_existing()
    run_dir.truncate_records({0: 200, 1: 150})  # the resume's rewrite: cell 1 goes back to 150
    for generation in range(151, 202):  # cell 1's redone generations are not reported twice
        run_dir.append_metrics({"cell": 1, "generation": generation})
        run_dir.append_timings({"cell": 1, "generation": generation})
    assert [(r["cell"], r["generation"]) for r in tail.poll()] == [(1, 201)]
    assert tail.reported == {0: 200, 1: 201} and not tail.pending and not tail.timings


def test_reporter_shows_peer_age_when_present() -> None:
    console = Console(record=True, width=200)
    reporter = TerminalReporter(console, "plain")
    record = {
        "g_loss": 1.0,
        "d_loss": 1.0,
        "lr_g": 1e-3,
        "lr_d": 1e-3,
        "mixture_score": 0.5,
        "generation": 1,
        "timings": {"liveness": {"1": 0.25, "2": 1.5}},
    }

    class Run:
        generations = 2

    reporter.evogan_generation_end(run=Run(), cell=0, generation=1, record=record)  # type: ignore[arg-type]
    assert "peer_age=1.5" in console.export_text()
    table_console = Console(record=True, width=200)
    table_console.print(reporter.table())
    assert "peer age s" in table_console.export_text()


# ------------------------------------------------------------------------------------------ slow
# cells that train their own pairs, share half the discriminator steps and take a better
# neighbour's pair every generation: the validation scores must agree across processes too
MIGRATING = (
    "population.selection=false",
    'problem.pairing={use="neighbour_share", discriminator_share=0.5}',
    "population.migration_every=1",
)


@pytest.mark.slow
@pytest.mark.parametrize(
    "inside",
    [
        (),
        ("exchange.every_batches=1", "exchange.optimizer_state=true"),
        (*ADA, "exchange.every_batches=1"),
        MIGRATING,
    ],
    ids=["per-generation", "every-batch-with-optimizer-state", "ada-every-batch", "migration-neighbour-share"],
)
def test_lockstep_workers_match_the_single_process_run_exactly(tiny_recipe, inside: tuple[str, ...]) -> None:
    from test_vectorized import assert_real_choices

    path = tiny_recipe(seed=7, generations=3, varied=True)  # mixture ES steps and a best cell to agree on
    reference = prepare(path, overrides=inside)
    run_in_process(reference)
    assert_real_choices(reference.run_dir.path)
    run_dir, summary = launched(path, "run.threads=0", *inside)  # threads are operational: same numbers
    assert records(run_dir) == records(reference.run_dir.path)
    expected = max(1, len(os.sched_getaffinity(0)) // 2)  # cores / local workers, never all cores each
    for rank in (0, 1):
        log = (run_dir / "logs" / f"worker-{rank:04d}.out").read_text()
        assert f": {expected} torch threads (" in log
    # 4 batches: 3 exchanges inside each generation when every batch; lockstep: nothing stale
    assert {r["exchanges"] for r in records(run_dir)} == {4 if "exchange.every_batches=1" in inside else 1}
    lags = [lag for r in records(run_dir) for lag in r["staleness"].values()]
    assert lags and all(lag == {"generations": 0, "batches": 0} for lag in lags)
    single = json.loads((reference.run_dir.path / "summary.json").read_text())
    assert summary["cells"] == single["cells"] and summary["best_cell"] == single["best_cell"]
    assert (run_dir / "plots" / "metrics.png").exists()
    assert len(list((run_dir / "samples").glob("final-best-cell-*.png"))) == 1
    if ADA[0] in inside:  # each D's augmentation probability moved, and travelled with it, as in one process
        assert any(r["individual_metrics"]["d_aug_p"] > 0 for r in records(run_dir))
    neighbours = {0: {"1", "2"}, 1: {"0", "3"}, 2: {"0", "3"}, 3: {"1", "2"}}
    assert all(set(t["liveness"]) == neighbours[t["cell"]] for t in timings(run_dir))


@pytest.mark.slow
def test_interrupt_stops_every_worker_at_one_generation_and_resume_completes(tiny_recipe) -> None:
    path = tiny_recipe(seed=4, generations=5, varied=True)
    reference = prepare(path)
    run_in_process(reference)
    marker: dict[str, Path] = {}

    def stop() -> bool:  # "Ctrl-C" once the first generation is on disk
        found = list((path.parent / "runs").glob("*/metrics.jsonl"))
        return any(p.parent != reference.run_dir.path and p.stat().st_size for p in found)

    run_dir, summary = launched(path, stop=stop)
    marker["dir"] = run_dir
    assert summary["interrupted"] is True
    stopped = {RunDirectory(run_dir).checkpoint_generations(c)[0] for c in range(4)}
    assert len(stopped) == 1 and stopped.pop() < 5
    _, resumed = launched(path, resume=run_dir)
    assert resumed["interrupted"] is False and resumed["generations"] == 5
    assert records(run_dir) == records(reference.run_dir.path)


@pytest.mark.slow
def test_sigkill_restarts_the_group_and_every_cell_resumes(tiny_recipe, monkeypatch) -> None:
    monkeypatch.setenv("EVOGAN_FAULT", "1:2:kill")
    run_dir, summary = launched(tiny_recipe(seed=2, generations=4), "run.max_restarts=1")
    pairs = [(r["cell"], r["generation"]) for r in records(run_dir)]
    assert sorted(pairs) == sorted({(c, g) for c in range(4) for g in range(1, 5)})  # each exactly once
    assert summary["generations"] == 4 and not summary["interrupted"]
    starts = "".join(p.read_text() for p in (run_dir / "logs").glob("worker-*.out"))
    assert starts.count("restart 0 ") == 2 and starts.count("restart 1 ") == 2
    directory = RunDirectory(run_dir)
    incarnations = [directory.load_checkpoint(c, 4)["incarnation"] for c in range(4)]
    assert all(i >= 1 for i in incarnations)  # every cell was loaded from its checkpoint


@pytest.mark.slow
def test_a_kill_between_checkpoints_resumes_every_cell_from_one_generation(tiny_recipe, monkeypatch) -> None:
    """Worker 0 dies after cell 1's generation 3 while worker 1 has already checkpointed generation 4:
    all cells go back to generation 2, the newest they share, and the run equals the uninterrupted one."""
    path = tiny_recipe(seed=5, generations=6, varied=True)
    reference = prepare(path, overrides=["run.checkpoint_every=2"])
    run_in_process(reference)
    monkeypatch.setenv("EVOGAN_FAULT", "1:3:kill")
    run_dir, summary = launched(path, "run.checkpoint_every=2", "run.max_restarts=1", "exchange.timeout=20")
    assert summary["generations"] == 6
    assert records(run_dir) == records(reference.run_dir.path)
    assert max(t["exchange"] for t in timings(run_dir)) < 20  # no generation waited out the time-out


@pytest.mark.slow
def test_cells_resuming_from_different_generations_catch_up_without_time_outs(tiny_recipe, monkeypatch) -> None:
    """With one checkpoint kept, worker 0's cells resume at 2 and worker 1's at 4: the cells behind step
    first, so nobody waits out the exchange time-out, and every generation is recorded once."""
    monkeypatch.setenv("EVOGAN_FAULT", "1:3:kill")
    run_dir, summary = launched(
        tiny_recipe(seed=5, generations=6),
        "run.checkpoint_every=2",
        "run.keep_checkpoints=1",
        "run.max_restarts=1",
        "exchange.timeout=20",
    )
    pairs = [(r["cell"], r["generation"]) for r in records(run_dir)]
    assert sorted(pairs) == sorted({(c, g) for c in range(4) for g in range(1, 7)})
    assert summary["generations"] == 6
    assert max(t["exchange"] for t in timings(run_dir)) < 20


@pytest.mark.slow
def test_a_worker_whose_cells_resume_apart_steps_the_one_behind_first(tiny_recipe) -> None:
    """Cell 0 resumes at generation 4 and cell 1, in the same worker, at 2: stepping cell 0 would block
    the process on cell 1's generation-4 model until the time-out, every generation."""
    path = tiny_recipe(seed=8, generations=2)
    timeout = ("exchange.timeout=5", "run.checkpoint_every=2", "run.keep_checkpoints=1")
    run_dir, _ = launched(path, *timeout)
    saved = {p.name: p.read_bytes() for p in (run_dir / "checkpoints").glob("cell-0001-g000002.*")}
    launched(path, *timeout, "run.generations=4", resume=run_dir)
    for name in [p.name for p in (run_dir / "checkpoints").glob("cell-0001-*")]:
        (run_dir / "checkpoints" / name).unlink()
    for name, data in saved.items():
        (run_dir / "checkpoints" / name).write_bytes(data)
    _, summary = launched(path, *timeout, "run.generations=6", resume=run_dir)
    assert summary["generations"] == 6
    pairs = [(r["cell"], r["generation"]) for r in records(run_dir)]
    assert sorted(pairs) == sorted({(c, g) for c in range(4) for g in range(1, 7)})
    assert max(t["exchange"] for t in timings(run_dir)) < 5


@pytest.mark.slow
def test_a_frozen_worker_is_killed_by_the_watchdog_and_the_run_completes(tiny_recipe, monkeypatch) -> None:
    monkeypatch.setenv("EVOGAN_FAULT", "2:2:freeze")  # SIGSTOP, never continued
    run_dir, summary = launched(
        tiny_recipe(seed=6, generations=5), "run.watchdog=3", "exchange.timeout=1", "run.max_restarts=1"
    )
    assert summary["generations"] == 5 and not summary["interrupted"]
    pairs = [(r["cell"], r["generation"]) for r in records(run_dir)]
    assert sorted(pairs) == sorted({(c, g) for c in range(4) for g in range(1, 6)})
    logs = "".join(p.read_text() for p in (run_dir / "logs").glob("worker-*.out"))
    assert "watchdog: worker 1 " in logs and "restart 1 " in logs


@pytest.mark.slow
def test_sigstop_neighbours_train_on_stale_models(tiny_recipe, monkeypatch) -> None:
    monkeypatch.setenv("EVOGAN_FAULT", "2:2:stop:4")
    run_dir, summary = launched(
        tiny_recipe(seed=3, generations=8), "exchange.max_staleness=1", "exchange.timeout=0.5", "run.max_restarts=0"
    )
    assert summary["generations"] == 8
    got = records(run_dir)
    assert len(got) == 32
    stale = [
        (r["cell"], r["generation"], r["exchange"])
        for r in got
        if r["cell"] in (0, 1) and any(g < r["generation"] - 2 for g in r["exchange"].values())
    ]
    assert stale, "no neighbour of the stopped worker used a stale model"
    assert max(a or 0 for t in timings(run_dir) for a in t["liveness"].values()) > 2.0


@pytest.mark.slow
def test_exchanges_inside_generations_record_staleness_when_a_neighbour_stalls(tiny_recipe, monkeypatch) -> None:
    monkeypatch.setenv("EVOGAN_FAULT", "2:2:stop:4")
    run_dir, summary = launched(
        tiny_recipe(seed=3, generations=6),
        "exchange.every_batches=1",
        "exchange.max_staleness=1",
        "exchange.timeout=0.5",
        "run.max_restarts=0",
    )
    got = records(run_dir)
    assert summary["generations"] == 6 and len(got) == 24
    assert {r["exchanges"] for r in got} == {4}  # 4 batches: the generation's exchange and 3 inside
    lagging = [
        (r["cell"], r["generation"], r["staleness"])
        for r in got
        if r["cell"] in (0, 1) and any(lag != {"generations": 0, "batches": 0} for lag in r["staleness"].values())
    ]
    assert lagging, "no neighbour of the stopped worker recorded a stale model"
    # after the time-out the newest model held is used, however old: a lag of generations is recorded
    assert max(lag["generations"] for _, _, staleness in lagging for lag in staleness.values()) >= 1, lagging


@pytest.mark.slow
def test_a_worker_that_never_comes_up_fails_the_barrier_naming_its_cells(tiny_recipe, monkeypatch) -> None:
    monkeypatch.setenv("EVOGAN_FAULT", "3:0:stop:8")
    with pytest.raises(RunFailure, match=r"transport barrier failed.*cells \[2"):
        launched(tiny_recipe(generations=2), "run.max_restarts=0", "exchange.options.barrier_timeout=3")


@pytest.mark.slow
def test_curve_keys_run(tiny_recipe, tmp_path: Path) -> None:
    from evogan.transport.curve import generate_keys

    keys = generate_keys(tmp_path / "keys")
    run_dir, summary = launched(tiny_recipe(generations=2), f'exchange.options.curve_dir="{keys}"')
    assert summary["generations"] == 2 and len(records(run_dir)) == 8


def torchrun(recipe: Path, run_dir: Path, port: int, rdzv_id: str, *extra: str) -> subprocess.Popen[str]:
    command = [
        PY,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        "2",
        "--nproc-per-node",
        "1",
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        f"127.0.0.1:{port}",
        "--rdzv-id",
        rdzv_id,
        "--max-restarts",
        "0",
        *extra,
        "-m",
        "evogan.start_worker",
        str(recipe),
        "--run-dir",
        str(run_dir),
    ]
    env = {**os.environ, "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    return subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )


def finish(processes: list[subprocess.Popen[str]], timeout: float = 150) -> list[tuple[int, str]]:
    out = []
    try:
        for process in processes:
            text, _ = process.communicate(timeout=timeout)
            out.append((process.returncode, text))
    finally:
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
    return out


@pytest.mark.slow
def test_two_agents_on_loopback_form_one_run(tiny_recipe, tmp_path: Path) -> None:
    recipe, run_dir, port = tiny_recipe(generations=2), tmp_path / "shared-run", free_port()
    results = finish([torchrun(recipe, run_dir, port, "two-nodes") for _ in range(2)])
    assert [code for code, _ in results] == [0, 0], results
    assert len(records(run_dir)) == 8
    assert json.loads((run_dir / "summary.json").read_text())["generations"] == 2


@pytest.mark.slow
def test_nodes_with_different_recipes_refuse_to_run(tiny_recipe, tmp_path: Path) -> None:
    run_dir, port = tmp_path / "mixed", free_port()
    results = finish(
        [torchrun(tiny_recipe(seed=1), run_dir, port, "mixed"), torchrun(tiny_recipe(seed=2), run_dir, port, "mixed")]
    )
    assert all(code != 0 for code, _ in results)
    assert "every node must use the same --run-dir name and recipe" in "".join(text for _, text in results)


@pytest.mark.slow
def test_unreachable_rendezvous_exits_instead_of_hanging(tiny_recipe, tmp_path: Path) -> None:
    ((code, text),) = finish(
        [torchrun(tiny_recipe(), tmp_path / "alone", free_port(), "alone", "--rdzv-conf", "join_timeout=5")], timeout=90
    )
    assert code != 0 and "RendezvousTimeoutError" in text


def agent(recipe: Path, run_dir: Path, port: int, *extra: str) -> subprocess.Popen[str]:
    """``evogan run`` as one node of a two-node run on loopback."""
    command = [PY, "-m", "evogan", "run", str(recipe), "--run-dir", str(run_dir), "--nnodes", "2"]
    command += ["--rdzv-endpoint", f"127.0.0.1:{port}", "--workers", "1", "--quiet", *extra]
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )


@pytest.mark.slow
def test_two_evogan_agents_form_one_run_and_a_second_start_resumes(tiny_recipe, tmp_path: Path) -> None:
    recipe, run_dir = tiny_recipe(generations=2), tmp_path / "two-nodes"
    port = free_port()
    results = finish([agent(recipe, run_dir, port) for _ in range(2)])
    assert [code for code, _ in results] == [0, 0], results
    assert len(records(run_dir)) == 8 and json.loads((run_dir / "summary.json").read_text())["generations"] == 2
    port = free_port()
    results = finish([agent(recipe, run_dir, port, "--generations", "3") for _ in range(2)])
    assert [code for code, _ in results] == [0, 0], results
    assert sorted((r["cell"], r["generation"]) for r in records(run_dir)) == [
        (c, g) for c in range(4) for g in (1, 2, 3)
    ]


@pytest.mark.slow
def test_a_lonely_agent_ends_with_one_line_naming_the_rendezvous(tiny_recipe, tmp_path: Path) -> None:
    port = free_port()
    ((code, text),) = finish([agent(tiny_recipe(), tmp_path / "alone", port, "--join-timeout", "4")], timeout=90)
    lines = [line for line in text.splitlines() if line.strip()]
    assert code == 1 and "Traceback" not in text, text
    assert len(lines) == 1 and f"rendezvous at 127.0.0.1:{port} failed" in lines[0], text
    assert "Traceback" in (tmp_path / "alone" / "logs" / "launcher-error.txt").read_text()


@pytest.mark.slow
def test_agents_with_different_recipes_end_with_one_line_each(tiny_recipe, tmp_path: Path) -> None:
    run_dir, port = tmp_path / "mixed-agents", free_port()
    results = finish([agent(tiny_recipe(seed=1), run_dir, port), agent(tiny_recipe(seed=2), run_dir, port)])
    for code, text in results:
        lines = [line for line in text.splitlines() if line.strip()]
        assert code != 0 and len(lines) == 1 and "Traceback" not in text, text
        assert "every node must use the same --run-dir name and recipe" in lines[0]
