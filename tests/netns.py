"""A cluster on one machine: network namespaces on a bridge, one ``evogan run --nnodes N`` agent per namespace on
a shared run directory, and faults on their links (``link``, ``impair``). Needs root and iproute2.

Nodes reach each other only through a switch namespace of their own, so nothing touches the host's network. Without
``tc netem``, loss and delay act on incoming traffic (iptables and :mod:`nfqueue`, beside this file): delayed outgoing
packets would count against the sender's TCP small-queue budget and throttle it far below the link. Teardown always
runs (``close``, also at exit), and a new cluster first deletes namespaces whose creating process is gone.

Lives with the tests (``tests/test_multinode.py``) and serves ``benchmarks/multinode.py`` too; it is not
shipped in the package (root-only tooling no plugin author needs).
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PREFIX = "evgn"
SUBNET = "10.231.0"
HEAD_PORT = 29641
_counter = itertools.count()


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


def unavailable() -> str | None:
    """Why namespaces cannot be made here (one line), or ``None`` when they can."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return f"network namespaces need root (uid {os.geteuid() if hasattr(os, 'geteuid') else '?'})"
    for tool, package in (("ip", "iproute2"), ("unshare", "util-linux")):
        if shutil.which(tool) is None:
            return f"`{tool}` ({package}) is not installed"
    probe = f"{PREFIX}{os.getpid()}probe"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"`ip netns add` failed: {made.stderr.strip() or made.returncode}"
    _ip("netns", "del", probe, check=False)
    return None


def netem_available() -> bool:
    """Whether this kernel has the netem qdisc (probed on a namespace's loopback)."""
    probe = f"{PREFIX}{os.getpid()}netem"
    if _ip("netns", "add", probe, check=False).returncode != 0:
        return False
    try:
        added = subprocess.run(
            ["ip", "netns", "exec", probe, "tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"],
            capture_output=True,
            check=False,
            timeout=30,
        )
        return added.returncode == 0
    finally:
        _ip("netns", "del", probe, check=False)


def shaping_unavailable(delay_or_loss: bool) -> str | None:
    """Why ``impair`` cannot shape links here: a rate cap needs only tc; delay and loss need netem,
    or iptables with NFQUEUE."""
    if shutil.which("tc") is None:
        return "`tc` (iproute2) is not installed"
    if delay_or_loss and not netem_available() and shutil.which("iptables") is None:
        return "this kernel has no netem qdisc and `iptables` (for the NFQUEUE fallback) is not installed"
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_namespace_processes(namespace: str) -> None:
    """SIGKILL every process inside ``namespace`` (all of them were started in it by a cluster)."""
    for _ in range(50):
        listed = _ip("netns", "pids", namespace, check=False)
        pids = [int(p) for p in listed.stdout.split() if p.isdigit()]
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)


def cleanup_stale(prefix: str = PREFIX) -> list[str]:
    """Delete namespaces named ``<prefix><pid>x...`` whose creating process ``pid`` is gone."""
    removed = []
    for line in _ip("netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.strip() else ""
        owner = name[len(prefix) :].split("x", 1)[0]
        if name.startswith(prefix) and owner.isdigit() and not _alive(int(owner)):
            _kill_namespace_processes(name)
            _ip("netns", "del", name, check=False)
            removed.append(name)
    return removed


@dataclass(frozen=True)
class Impairment:
    """What ``Cluster.impair`` does to each node's link: one-way delay (uniform jitter), loss, a rate cap."""

    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    loss: float = 0.0  # fraction of packets, e.g. 0.01
    rate_mbit: float = 0.0

    def describe(self) -> str:
        parts = []
        if self.delay_ms:
            parts.append(f"{self.delay_ms:g} ms ± {self.jitter_ms:g} ms delay")
        if self.loss:
            parts.append(f"{self.loss:.0%} loss")
        if self.rate_mbit:
            parts.append(f"{self.rate_mbit:g} Mbit/s")
        return ", ".join(parts) or "no impairment"


@dataclass
class Agent:
    """One node's ``evogan run`` process (its own session) and its output file."""

    node: int
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait(self, timeout: float | None = None) -> int:
        return self.process.wait(timeout)

    def kill(self) -> None:
        """SIGKILL the agent only; its workers follow (they exit when their parent dies)."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


class Cluster:
    """``nodes`` namespaces on one bridge; node i has address ``<subnet>.<i+1>``, node 0 is the head."""

    def __init__(
        self, nodes: int = 2, *, workdir: Path, prefix: str = PREFIX, subnet: str = SUBNET, port: int = HEAD_PORT
    ) -> None:
        if not 2 <= nodes <= 9:
            raise ValueError("a cluster has 2 to 9 nodes")
        self.count, self.workdir, self.prefix, self.subnet, self.port = nodes, Path(workdir), prefix, subnet, port
        self.tag = f"{prefix}{os.getpid()}x{next(_counter)}"
        self.switch = f"{self.tag}-sw"
        self.names = [f"{self.tag}-n{i}" for i in range(nodes)]
        self.agents: list[Agent] = []
        self._delayers: dict[int, subprocess.Popen[bytes]] = {}
        self._netem: bool | None = None
        self._made: list[str] = []
        self._closed = False

    # -------------------------------------------------------------------------- life cycle
    def __enter__(self) -> Cluster:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def open(self) -> None:
        """Create the switch and node namespaces, the veth links and the addresses."""
        reason = unavailable()
        if reason:
            raise RuntimeError(reason)
        cleanup_stale(self.prefix)
        atexit.register(self.close)
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            self._create()
        except BaseException:
            self.close()
            raise

    def _create(self) -> None:
        for name in (self.switch, *self.names):
            _ip("netns", "add", name)
            self._made.append(name)
            _ip(*f"-n {name} link set lo up".split())
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip(*f"-n {self.switch} link set br0 up".split())
        for i, name in enumerate(self.names):
            _ip("link", "add", "eth0", "netns", name, "type", "veth", "peer", "name", f"p{i}", "netns", self.switch)
            _ip(*f"-n {self.switch} link set p{i} master br0".split())
            _ip(*f"-n {self.switch} link set p{i} up".split())
            _ip("-n", name, "addr", "add", f"{self.address(i)}/24", "dev", "eth0")
            _ip(*f"-n {name} link set eth0 up".split())

    def close(self) -> None:
        """Kill every process in the nodes, delete the namespaces (idempotent)."""
        if self._closed:
            return
        self._closed = True
        for name in reversed(self._made):
            _kill_namespace_processes(name)
        for agent in self.agents:
            with contextlib.suppress(Exception):
                agent.process.wait(timeout=5)
        for process in self._delayers.values():
            with contextlib.suppress(Exception):
                process.wait(timeout=5)
        for name in reversed(self._made):
            _ip("netns", "del", name, check=False)
        with contextlib.suppress(ValueError):
            atexit.unregister(self.close)

    # -------------------------------------------------------------------------- nodes
    def address(self, node: int) -> str:
        return f"{self.subnet}.{node + 1}"

    @property
    def endpoint(self) -> str:
        """The rendezvous endpoint: the head's (node 0's) address."""
        return f"{self.address(0)}:{self.port}"

    def command(self, node: int, argv: Sequence[str]) -> list[str]:
        return ["ip", "netns", "exec", self.names[node], *argv]

    def run(self, node: int, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.command(node, argv), capture_output=True, text=True, check=True, timeout=60)

    def hostname(self, node: int) -> str:
        return f"node{node}"

    def popen(
        self, node: int, argv: Sequence[str], log: Path, *, own_hostname: bool = False
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` in node ``node`` (``ip netns exec`` and ``unshare`` exec it: the pid is the
        command's). ``own_hostname``: in a UTS namespace named ``node<i>``, as on separate machines (the
        watchdog tells machines apart by hostname)."""
        log.parent.mkdir(parents=True, exist_ok=True)
        if own_hostname:
            argv = ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', self.hostname(node), *argv]
        with open(log, "ab") as out:
            return subprocess.Popen(
                self.command(node, argv), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def keys(self) -> Path:
        """A CURVE certificate directory with one client key per node (``n0``, ``n1``, ...)."""
        from evogan.transport.curve import generate_keys

        return generate_keys(self.workdir / "keys", [f"n{i}" for i in range(self.count)])

    def agent_command(
        self, node: int, recipe: Path | str, run_dir: Path, *, workers: int = 1, extra: Sequence[str] = ()
    ) -> list[str]:
        """``evogan run`` as node ``node`` of this cluster, CURVE on; ZeroMQ binds where a user's run would
        (no ``exchange.options.bind``: every interface, advertising the node's address)."""
        keys = self.keys()
        return [
            sys.executable, "-m", "evogan", "run", str(recipe), "--run-dir", str(run_dir),
            "--nnodes", str(self.count), "--rdzv-endpoint", self.endpoint, "--workers", str(workers), "--plain",
            "--set", f'exchange.options.curve_dir="{keys}"',
            "--set", f'exchange.options.curve_name="n{node}"',
            *extra,
        ]  # fmt: skip

    def start_agent(
        self, node: int, recipe: Path | str, run_dir: Path, *, workers: int = 1, extra: Sequence[str] = ()
    ) -> Agent:
        """Start node ``node``'s agent; its output goes to ``workdir/agent-n<node>.log`` (appended)."""
        log = self.workdir / f"agent-n{node}.log"
        argv = self.agent_command(node, recipe, run_dir, workers=workers, extra=extra)
        process = self.popen(node, argv, log, own_hostname=True)
        agent = Agent(node, process, log)
        self.agents.append(agent)
        return agent

    # -------------------------------------------------------------------------- faults
    def link(self, node: int, *, up: bool) -> None:
        """Plug or pull node ``node``'s cable: its port on the switch goes up or down."""
        _ip(*f"-n {self.switch} link set p{node} {'up' if up else 'down'}".split())

    @property
    def netem(self) -> bool:
        if self._netem is None:
            self._netem = netem_available()
        return self._netem

    @property
    def backend(self) -> str:
        """How ``impair`` shapes links on this kernel."""
        return "tc netem" if self.netem else "tc tbf (rate), iptables statistic (loss) + NFQUEUE (delay)"

    def impair(self, impairment: Impairment, nodes: Iterable[int] | None = None) -> None:
        """Apply ``impairment`` to the links of ``nodes`` (default: every node)."""
        for node in self._nodes(nodes):
            self.heal([node])
            if self.netem:
                self._netem_qdisc(node, impairment)
                continue
            if impairment.rate_mbit:
                self._tbf(node, impairment.rate_mbit)
            if impairment.loss:
                self.run(node, ["iptables", "-A", "INPUT", "-i", "eth0", "-m", "statistic", "--mode", "random",
                                "--probability", f"{impairment.loss:g}", "-j", "DROP"])  # fmt: skip
            if impairment.delay_ms:
                self._delay(node, impairment.delay_ms, impairment.jitter_ms)

    def heal(self, nodes: Iterable[int] | None = None) -> None:
        """Remove every impairment from the links of ``nodes`` (default: every node)."""
        for node in self._nodes(nodes):
            subprocess.run(self.command(node, ["tc", "qdisc", "del", "dev", "eth0", "root"]), capture_output=True)
            if shutil.which("iptables"):
                subprocess.run(self.command(node, ["iptables", "-F", "INPUT"]), capture_output=True)
            delayer = self._delayers.pop(node, None)
            if delayer is not None:
                delayer.send_signal(signal.SIGTERM)  # it accepts what it still holds, then exits
                delayer.wait(timeout=10)

    def _nodes(self, nodes: Iterable[int] | None) -> list[int]:
        return list(range(self.count)) if nodes is None else list(nodes)

    def _netem_qdisc(self, node: int, impairment: Impairment) -> None:
        spec = []
        if impairment.delay_ms:
            spec += ["delay", f"{impairment.delay_ms:g}ms", f"{impairment.jitter_ms:g}ms"]
        if impairment.loss:
            spec += ["loss", f"{impairment.loss * 100:g}%"]
        if impairment.rate_mbit:
            spec += ["rate", f"{impairment.rate_mbit:g}mbit"]
        if spec:
            self.run(node, ["tc", "qdisc", "replace", "dev", "eth0", "root", "netem", *spec, "limit", "100000"])

    def _tbf(self, node: int, rate_mbit: float) -> None:
        burst = max(16, int(rate_mbit * 1e6 / 8 / 250 / 1024))  # kB: at least a 4 ms burst, as tc advises
        self.run(node, ["tc", "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate", f"{rate_mbit:g}mbit",
                        "burst", f"{burst}kb", "latency", "200ms"])  # fmt: skip

    def _delay(self, node: int, delay_ms: float, jitter_ms: float) -> None:
        log = self.workdir / f"delayer-n{node}.log"
        argv = [
            sys.executable,
            str(Path(__file__).with_name("nfqueue.py")),
            "--delay-ms",
            f"{delay_ms:g}",
            "--jitter-ms",
            f"{jitter_ms:g}",
        ]
        process = self.popen(node, argv, log)
        deadline = time.monotonic() + 20
        while "ready" not in log.read_text(errors="replace"):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the NFQUEUE delayer of node {node} did not start: {log.read_text()[-500:]}")
            time.sleep(0.05)
        self._delayers[node] = process
        self.run(node, ["iptables", "-A", "INPUT", "-i", "eth0", "-j", "NFQUEUE", "--queue-num", "0", "--queue-bypass"])

    # -------------------------------------------------------------------------- observation
    def link_bytes(self, node: int) -> tuple[int, int]:
        """Bytes node ``node``'s interface sent and received (frames, all traffic)."""
        shown = json.loads(_ip("-n", self.names[node], "-j", "-s", "link", "show", "dev", "eth0").stdout)
        stats = shown[0]["stats64"]
        return int(stats["tx"]["bytes"]), int(stats["rx"]["bytes"])

    def round_trip(self, source: int, target: int, port: int = 9) -> float:
        """Seconds for a TCP connect from ``source`` to ``target`` (SYN out, SYN-ACK or RST back): one
        round trip through whatever ``impair`` set up. The port need not be open."""
        probe = (
            "import socket, time\n"
            "s = socket.socket(); s.settimeout(10); t = time.perf_counter()\n"
            f"try: s.connect(({self.address(target)!r}, {port}))\n"
            "except ConnectionRefusedError: pass\n"
            "print(time.perf_counter() - t)"
        )
        return float(self.run(source, [sys.executable, "-c", probe]).stdout.strip())

    def wire_bytes(self) -> int:
        """Bytes sent by all nodes so far: what crossed the switch."""
        return sum(self.link_bytes(i)[0] for i in range(self.count))


def completed_generations(run_dir: Path, cells: int) -> int:
    """The newest generation every one of ``cells`` has recorded in metrics.jsonl (0 if none)."""
    seen: dict[int, set[int]] = {}
    with contextlib.suppress(OSError):
        for line in (run_dir / "metrics.jsonl").read_text().splitlines():
            with contextlib.suppress(ValueError, KeyError, TypeError):
                record = json.loads(line)
                seen.setdefault(int(record["generation"]), set()).add(int(record["cell"]))
    return max((g for g, got in seen.items() if len(got) == cells), default=0)


def audit(run_dir: Path, *, cells: int, generations: int, max_staleness: int) -> list[str]:
    """What must hold after a run that met faults, as a list of problems (empty: all held): every
    (cell, generation) recorded exactly once in metrics.jsonl and timings.jsonl; no model used staler
    than ``max_staleness`` generations; and nothing a finished run holds is missing: the recipe, the
    summary, the plots, each cell's log and a verified checkpoint of each cell at the last generation."""
    from evogan.engine.rundir import RunDirectory

    problems = []
    wanted = {(c, g) for c in range(cells) for g in range(1, generations + 1)}
    for name in ("metrics.jsonl", "timings.jsonl"):
        try:
            records = [json.loads(line) for line in (run_dir / name).read_text().splitlines() if line.strip()]
        except (OSError, ValueError) as exc:
            problems.append(f"{name}: unreadable ({exc})")
            continue
        keys = [(int(r["cell"]), int(r["generation"])) for r in records]
        twice = sorted({k for k in keys if keys.count(k) > 1})
        missing, extra = sorted(wanted - set(keys)), sorted(set(keys) - wanted)
        for what, found in (("recorded more than once", twice), ("missing", missing), ("unexpected", extra)):
            if found:
                problems.append(f"{name}: (cell, generation) {what}: {found[:8]}")
        if name == "metrics.jsonl":
            lags = [lag["generations"] for r in records for lag in r.get("staleness", {}).values()]
            if lags and max(lags) > max_staleness:
                problems.append(f"metrics.jsonl: a model {max(lags)} generations stale (bound {max_staleness})")
    for name in ("recipe.toml", "summary.json", "plots/metrics.png"):
        if not (run_dir / name).is_file():
            problems.append(f"{name}: missing")
    directory = RunDirectory(run_dir)
    for cell in range(cells):
        if not (run_dir / "logs" / f"cell-{cell:04d}.log").is_file():
            problems.append(f"logs/cell-{cell:04d}.log: missing")
        if generations not in directory.valid_generations(cell):
            problems.append(f"cell {cell}: no valid checkpoint of generation {generations}")
    return problems


def wait_for(condition: Any, timeout: float, poll: float = 0.2, what: str = "condition") -> None:
    """Poll ``condition()`` until true; ``TimeoutError`` naming ``what`` otherwise."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not reached within {timeout:g} s")
        time.sleep(poll)


__all__ = [
    "HEAD_PORT",
    "PREFIX",
    "SUBNET",
    "Agent",
    "Cluster",
    "Impairment",
    "audit",
    "cleanup_stale",
    "completed_generations",
    "netem_available",
    "shaping_unavailable",
    "unavailable",
    "wait_for",
]
