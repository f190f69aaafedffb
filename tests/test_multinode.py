"""Several machines for real: which node hosts the rendezvous, the node watch, and runs across network
namespaces (separate network stacks on one bridge, tests/netns.py) that meet a cut link, a killed
agent and a cut head. The namespace tests are ``slow`` and skip, saying why, where namespaces cannot be
made (not root, no iproute2)."""

from __future__ import annotations

import json
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import netns
import pytest
from netns import Cluster, Impairment, audit, completed_generations, wait_for

from evogan.errors import UserError
from evogan.runtime import rendezvous
from evogan.runtime.liveness import NodeWatch

ROOT = Path(__file__).resolve().parents[1]
TOY = ROOT / "recipes" / "toy-ring.toml"
pytestmark = pytest.mark.timeout(300)


# ------------------------------------------------------------------------------ who hosts
@pytest.mark.parametrize("endpoint", ["10.0.0.1", "10.0.0.1:", ":29400", "10.0.0.1:port", "10.0.0.1:70000", "[::1]:0"])
def test_a_malformed_endpoint_is_one_line_naming_the_option(endpoint: str) -> None:
    with pytest.raises(UserError, match=r"^--rdzv-endpoint .*: expected HOST:PORT"):
        rendezvous.parse_endpoint(endpoint)


def test_endpoints_parse_with_ipv6_brackets() -> None:
    assert rendezvous.parse_endpoint("10.231.0.1:29641") == ("10.231.0.1", 29641)
    assert rendezvous.parse_endpoint("[fd00::1]:29400") == ("fd00::1", 29400)


def test_a_loopback_endpoint_leaves_hosting_to_torch() -> None:
    role = rendezvous.decide("127.0.0.1:29400")
    assert role.hosts is None and role.address is None
    assert "the first agent on this machine hosts" in role.describe()


def test_another_machines_address_is_not_hosted_and_the_hint_names_the_expected_host() -> None:
    role = rendezvous.decide("192.0.2.1:29400")  # TEST-NET-1: never a local address
    assert role.hosts is False and role.reason == "no interface here has 192.0.2.1"
    hint = role.failure_hint(2)
    assert "the node with address 192.0.2.1 was expected to host the store, not this one" in hint
    assert "(no interface here has 192.0.2.1)" in hint
    assert "went away mid-run" in role.failure_hint(2, started=True)


def _local_address() -> str:
    address = rendezvous.route_to("192.0.2.1", 9)
    if address is None or address.startswith("127."):
        pytest.skip("this machine has no non-loopback IPv4 address")
    return address


def test_an_address_of_this_machine_is_hosted_unless_overridden() -> None:
    address = _local_address()
    with socket.socket() as probe:
        probe.bind(("", 0))
        port = probe.getsockname()[1]
    role = rendezvous.decide(f"{address}:{port}")
    assert role.hosts is True and role.address == address
    assert role.reason.startswith(f"{address} is the address of ")
    assert "this node hosts the store" in role.failure_hint(2)
    refused = rendezvous.decide(f"{address}:{port}", hosts=False)
    assert refused.hosts is False and refused.reason.startswith("--rdzv-host no; ")
    with socket.socket() as busy:  # another agent on this machine already listens: join it
        busy.bind(("", 0))
        busy.listen()
        taken = rendezvous.decide(f"{address}:{busy.getsockname()[1]}")
    assert taken.hosts is False and "is taken here: another agent on this node hosts it" in taken.reason


def test_local_addresses_and_their_interfaces() -> None:
    assert rendezvous.is_local("127.0.0.1") and not rendezvous.is_local("192.0.2.1")
    if sys.platform == "linux":
        assert rendezvous.interface_of("127.0.0.1") == "lo"
    assert rendezvous.interface_of("192.0.2.1") is None


def test_the_cli_refuses_a_bad_endpoint_in_one_line(tiny_recipe, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from evogan.cli import cli

    args = ["run", str(tiny_recipe()), "--run-dir", str(tmp_path / "r"), "--nnodes", "2"]
    result = CliRunner().invoke(cli, [*args, "--rdzv-endpoint", "head", "--quiet"], catch_exceptions=False)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.output.strip().splitlines() == [
        "error: --rdzv-endpoint 'head': expected HOST:PORT, e.g. 10.0.0.1:29400"
    ]


# ------------------------------------------------------------------------------ the node watch
def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _watch(port: int, me: str, head: bool, limit: float = 1.0) -> NodeWatch:
    return NodeWatch(
        "127.0.0.1", port, "run-a", me, nodes=2, limit=limit, head=head, finished=lambda: False, interval=0.05
    )


def test_the_head_loses_a_silent_node_and_names_it() -> None:
    port = _free_udp_port()
    with _watch(port, "head", True) as head, _watch(port, "node-b", False) as node:
        wait_for(lambda: head.armed and node.armed, 10, poll=0.05, what="both watches armed")
        time.sleep(1.5)  # longer than the limit: beats keep both alive
        assert head.lost() is None and node.lost() is None
        node.stop()
        wait_for(lambda: head.lost() is not None, 10, poll=0.05, what="the head noticing")
    assert (head.lost() or "").startswith("node node-b has not been heard from for 1 s")


def test_a_node_loses_a_silent_head_and_beats_of_another_run_do_not_count() -> None:
    port = _free_udp_port()
    other = NodeWatch(
        "127.0.0.1", port, "run-b", "stranger", nodes=2, limit=1.0, head=False, finished=lambda: False, interval=0.05
    )
    with _watch(port, "head", True) as head, _watch(port, "node-b", False) as node, other:
        wait_for(lambda: head.armed and node.armed, 10, poll=0.05, what="both watches armed")
        assert "stranger" not in head.heard and not other.armed  # run-b's beats go unanswered
        head.stop()
        wait_for(lambda: node.lost() is not None, 10, poll=0.05, what="the node noticing")
    assert (node.lost() or "").startswith("lost the head node 127.0.0.1: no answer to this node's beats for 1 s")


def test_a_finished_run_loses_nobody() -> None:
    port, done = _free_udp_port(), [False]
    head = NodeWatch(
        "127.0.0.1", port, "run-a", "h", nodes=2, limit=0.5, head=True, finished=lambda: done[0], interval=0.05
    )
    with head, _watch(port, "node-b", False, limit=0.5) as node:
        wait_for(lambda: head.armed, 10, poll=0.05, what="armed")
        done[0] = True
        node.stop()
        time.sleep(1.0)
        assert head.lost() is None


# ------------------------------------------------------------------------------ the harness
def test_the_harness_says_in_one_line_why_it_cannot_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(netns.os, "geteuid", lambda: 1000)
    assert netns.unavailable() == "network namespaces need root (uid 1000)"
    monkeypatch.setattr(netns.os, "geteuid", lambda: 0)
    monkeypatch.setattr(netns.shutil, "which", lambda tool: None)
    assert netns.unavailable() == "`ip` (iproute2) is not installed"
    assert Impairment(delay_ms=100, jitter_ms=20).describe() == "100 ms ± 20 ms delay"
    assert Impairment(loss=0.01, rate_mbit=10).describe() == "1% loss, 10 Mbit/s"


def test_audit_finds_what_a_fault_could_break(tiny_recipe) -> None:
    from evogan.testing import run_tiny

    run_dir = run_tiny(tiny_recipe(generations=2))
    assert audit(run_dir, cells=4, generations=2, max_staleness=0) == []
    metrics = run_dir / "metrics.jsonl"
    lines = metrics.read_text().splitlines()
    stale = json.loads(lines[-1])
    stale["staleness"] = {peer: {"generations": 2, "batches": 0} for peer in stale["staleness"]}
    metrics.write_text("\n".join([*lines[:-2], lines[0], json.dumps(stale)]) + "\n")
    (run_dir / "summary.json").unlink()
    problems = audit(run_dir, cells=4, generations=2, max_staleness=1)
    assert any("recorded more than once" in p for p in problems), problems
    assert any("missing" in p and "metrics.jsonl" in p for p in problems), problems
    assert "metrics.jsonl: a model 2 generations stale (bound 1)" in problems
    assert "summary.json: missing" in problems


# ------------------------------------------------------------------------------ separate network stacks
@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    reason = netns.unavailable()
    if reason:
        pytest.skip(reason)
    with Cluster(2, workdir=tmp_path / "cluster") as made:
        yield made


GENERATIONS = 10
TOY_SETTINGS = ["--generations", str(GENERATIONS), "--set", "run.threads=1", "--set", "run.checkpoint_every=2"]


def _start(cluster: Cluster, run_dir: Path, *extra: str) -> list[netns.Agent]:
    return [cluster.start_agent(i, TOY, run_dir, extra=[*TOY_SETTINGS, *extra]) for i in range(cluster.count)]


def _finish(agents: list[netns.Agent], timeout: float = 240) -> None:
    for agent in agents:
        code = agent.wait(timeout)
        assert code == 0, f"node {agent.node} exit {code}:\n{agent.output()[-3000:]}"


def _errors(agent: netns.Agent) -> list[str]:
    return [line for line in agent.output().splitlines() if line.startswith("error:")]


@pytest.mark.slow
def test_nodes_on_separate_stacks_meet_and_wait_out_a_cut_link(cluster: Cluster, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    agents = _start(cluster, run_dir)
    wait_for(lambda: completed_generations(run_dir, 4) >= 3, 180, what="generation 3")
    cluster.link(1, up=False)  # node 1's cable, for 20 s: lockstep cells wait (exchange.timeout 60 s)
    time.sleep(20)
    cluster.link(1, up=True)
    _finish(agents)
    assert audit(run_dir, cells=4, generations=GENERATIONS, max_staleness=0) == []
    log = (run_dir / "logs" / "rendezvous.log").read_text()
    assert "this node 10.231.0.1 (eth0) hosts the store (10.231.0.1 is the address of eth0 here)" in log
    assert "this node 10.231.0.2 (eth0) joins the store hosted by 10.231.0.1 (no interface here has 10.231.0.1)" in log
    waits = [json.loads(line)["exchange"] for line in (run_dir / "timings.jsonl").read_text().splitlines()]
    assert max(waits) > 5, "no cell waited for the cut neighbour: was the link cut mid-run?"


@pytest.mark.slow
def test_a_killed_agent_started_again_rejoins_and_the_run_resumes(cluster: Cluster, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    agents = _start(cluster, run_dir)
    wait_for(lambda: completed_generations(run_dir, 4) >= 4, 180, what="generation 4")
    agents[1].kill()
    time.sleep(2)
    again = cluster.start_agent(1, TOY, run_dir, extra=TOY_SETTINGS)
    _finish([agents[0], again])
    assert audit(run_dir, cells=4, generations=GENERATIONS, max_staleness=0) == []
    out = "".join(p.read_text() for p in (run_dir / "logs").glob("worker-*.out"))
    assert "resuming at generations" in out, out[-2000:]


@pytest.mark.slow
def test_a_cut_head_ends_every_node_in_one_line_and_a_restart_resumes(cluster: Cluster, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    agents = _start(cluster, run_dir, "--node-timeout", "10")
    wait_for(lambda: completed_generations(run_dir, 4) >= 3, 180, what="generation 3")
    cluster.link(0, up=False)
    for agent in agents:
        assert agent.wait(120) == 1, agent.output()[-3000:]
    cluster.link(0, up=True)
    head, node = _errors(agents[0]), _errors(agents[1])
    assert len(head) == 1 and head[0].startswith("error: node 10.231.0.2 has not been heard from for 1"), head
    assert len(node) == 1 and node[0].startswith("error: lost the head node 10.231.0.1: no answer"), node
    for line in (*head, *node):
        assert "every cell has a checkpoint of generation" in line and "on every node to resume" in line
    assert all("Traceback" not in agent.output() for agent in agents)
    _finish(_start(cluster, run_dir))  # the same command on both nodes resumes
    assert audit(run_dir, cells=4, generations=GENERATIONS, max_staleness=0) == []


@pytest.mark.slow
def test_when_nobody_hosts_the_failure_names_the_expected_host(cluster: Cluster, tmp_path: Path) -> None:
    # The start: node 0 does not host (here forced), both wait as clients, both end in one line.
    run_dir, extra = tmp_path / "run", ["--join-timeout", "5", "--node-timeout", "5"]
    agents = [
        cluster.start_agent(0, TOY, run_dir, extra=[*TOY_SETTINGS, *extra, "--rdzv-host", "no"]),
        cluster.start_agent(1, TOY, run_dir, extra=[*TOY_SETTINGS, *extra]),
    ]
    for agent in agents:
        assert agent.wait(180) == 1, agent.output()[-3000:]
    (first,), (second,) = _errors(agents[0]), _errors(agents[1])
    assert "rendezvous at 10.231.0.1:29641 failed" in first and "rendezvous at 10.231.0.1:29641 failed" in second
    expected = "the node with address 10.231.0.1 was expected to host the store, not this one"
    assert f"{expected} (--rdzv-host no; 10.231.0.1 is the address of eth0 here)" in first
    assert f"{expected} (no interface here has 10.231.0.1)" in second


@pytest.mark.slow
def test_a_loopback_bind_across_machines_fails_naming_the_key(cluster: Cluster, tmp_path: Path) -> None:
    # What every multi-node run met before the bind followed --nnodes: now only an explicit loopback bind.
    extra = ["--set", 'exchange.options.bind="127.0.0.1"', "--set", "exchange.options.barrier_timeout=5"]
    agents = _start(cluster, tmp_path / "run", *extra)
    for agent in agents:
        assert agent.wait(180) == 1, agent.output()[-3000:]
    for agent in agents:
        (line,) = _errors(agent)
        assert "transport barrier failed after 5 s" in line, agent.output()[-3000:]
        assert "Likely: this worker's publishers bind to loopback 127.0.0.1" in line, line
        assert 'leave exchange.options.bind out (every interface), or set it, e.g. "0.0.0.0"' in line, line
