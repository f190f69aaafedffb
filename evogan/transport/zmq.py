"""ZeroMQ transport: one XPUB and one SUB per process, whatever its cells; topics name the cell; latest-wins inbox.

A process serves its local cells through one XPUB (every local cell advertises its endpoint; a message's
topic names the cell that sent it) and receives through one SUB connected once to each distinct endpoint of
its cells' neighbours, subscribed to exactly those neighbours' topics. Sockets, pipes and the I/O thread's
polling then grow with the processes a worker talks to, not with its cells (two sockets per cell stopped a
worker of 512 cells, and polling them cost a 32x32 grid on two workers more than its cells' work).

Lifecycle in a worker: ``t = ZmqTransport(options)``; ``endpoints = t.bind(local_cells)``; exchange the
endpoints (control plane); ``t.connect(all_endpoints, peers)``; ``t.wait_ready()`` (the subscription
barrier: without it PUB/SUB silently loses the first messages, the "slow joiner"); then ``publish`` and
``gather`` each generation; ``close()``. pyzmq is imported lazily so ``import evogan`` stays light.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field

from evogan.api import ComponentOptions, ConnectableTransport, TransportStats
from evogan.errors import RunFailure, UserError
from evogan.transport.addresses import LOOPBACK, NODE_ADDRESS_ENV, WILDCARDS, Addresses, barrier_hint, choose
from evogan.transport.inproc import forget_old, pick

if TYPE_CHECKING:
    import zmq as zmqlib

    from evogan.transport.zmq_io import IOThread

Frames = list[Any]  # [topic bytes, header bytes, payload memoryview]


class _State:
    """Everything the I/O thread reports and ``gather`` reads, behind one condition variable."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.cond = threading.Condition()
        self.held: dict[int, dict[tuple[int, int], Frames]] = {}  # peer -> (generation, substep) -> frames
        self.incarnation: dict[int, int] = {}
        self.seen: dict[int, float] = {}
        self.beats: dict[int, dict[str, Any]] = {}
        self.subscriptions: dict[int, set[int]] = {}
        self.published: dict[int, tuple[int, int]] = {}
        self.stats = TransportStats()

    # -------------------------------------------------------------- Inbox protocol (I/O thread)
    def model(self, peer: int, header: dict[str, Any], frames: Frames, size: int) -> str | None:
        from evogan.transport.envelope import stamp

        with self.cond:
            held = self.held.setdefault(peer, {})
            incarnation = header["incarnation"]
            if incarnation < self.incarnation.get(peer, incarnation):
                return "old_incarnation"
            if incarnation > self.incarnation.get(peer, incarnation):
                held.clear()  # the peer restarted; its new history supersedes the old one
            self.incarnation[peer] = incarnation
            self.seen[peer] = time.monotonic()
            key = stamp(header)
            if key in held and bytes(held[key][1]) == bytes(frames[1]):
                return "duplicate"  # a replay (or the last-value resend to a new subscriber): held already
            held[key] = frames
            forget_old(held, self.keep)
            if key not in held:
                return "stale"  # older than every generation kept: it would never be gathered
            self.stats.received_messages += 1
            self.stats.received_bytes += size
            self.cond.notify_all()
        return None

    def heartbeat(self, peer: int, body: dict[str, Any]) -> None:
        with self.cond:
            self.beats[peer] = body
            self.seen[peer] = time.monotonic()
            self.cond.notify_all()

    def subscribed(self, cell: int, subscriber: int) -> None:
        with self.cond:
            self.subscriptions.setdefault(cell, set()).add(subscriber)
            self.cond.notify_all()

    def count(self, reason: str, *, sent: int = 0, sent_bytes: int = 0) -> None:
        with self.cond:
            if reason:
                self.stats.dropped[reason] = self.stats.dropped.get(reason, 0) + 1
            self.stats.sent_messages += sent
            self.stats.sent_bytes += sent_bytes

    def heartbeat_state(self, cell: int) -> tuple[int, int]:
        with self.cond:
            return self.published.get(cell, (-1, 0))

    # -------------------------------------------------------------- reads (any thread, lock held)
    def pick(self, peer: int, wanted: tuple[int, int]) -> tuple[tuple[int, int], Frames] | None:
        """Exactly ``wanted``; else the newest older message; else the oldest newer one (as inproc)."""
        held = self.held.get(peer, {})
        chosen = pick(held, wanted)
        return None if chosen is None else (chosen, held[chosen])


class ZmqTransport(ConnectableTransport["ZmqTransport.Options"]):
    """Cells in several processes or hosts: XPUB/SUB over tcp or ipc, optional CURVE.

    Serves the cells local to one process. A single I/O thread owns every socket (see
    :mod:`evogan.transport.zmq_io`); ``publish`` only enqueues, so it never blocks the training loop.
    """

    name: ClassVar[str] = "zmq"
    description: ClassVar[str] = "ZeroMQ XPUB/SUB between processes and hosts; latest-wins receiver; CURVE"

    class Options(ComponentOptions):
        bind: str = Field(
            default="",
            description="interface the XPUB binds to (tcp); empty = loopback when every worker is on this machine, "
            "every interface when the run spans machines (--nnodes > 1)",
        )
        advertise: str = Field(
            default="",
            description="address peers connect to; empty = same as bind, or for a wildcard or empty bind this "
            "node's address: $EVOGAN_NODE_ADDRESS, else that of the interface that routes to MASTER_ADDR",
        )
        scheme: Literal["tcp", "ipc"] = Field(default="tcp", description="tcp, or ipc for cells on one host")
        hwm: int = Field(
            default=2,
            ge=1,
            description="send/receive high-water mark, in messages per cell (the shared sockets' marks scale "
            "with the cells they carry)",
        )
        max_message_bytes: int = Field(
            default=256 << 20,
            ge=1024,
            description="payload cap of one message (envelope check; ZMQ MAXMSGSIZE)",
        )
        heartbeat_interval: float = Field(default=1.0, gt=0, description="seconds between heartbeats per cell")
        curve_dir: str = Field(
            default="", description="CURVE certificate directory (evogan keys generate); empty = off"
        )
        curve_name: str = Field(default="client", description="which client keypair of curve_dir this process uses")
        send_grace: float = Field(
            default=1.0,
            ge=0,
            description="seconds a message waits on a full subscriber pipe before going lossy",
        )
        barrier_timeout: float = Field(default=30.0, gt=0, description="seconds wait_ready waits for every peer")
        keep: int = Field(
            default=3,
            ge=1,
            description="generations of messages kept per neighbour (and messages from inside generations)",
        )

    def __init__(self, options: ZmqTransport.Options | None = None) -> None:
        import zmq

        super().__init__(options if options is not None else self.Options())
        self._zmq = zmq
        self._state = _State(self.options.keep)
        self._ctx: zmqlib.Context[zmqlib.Socket[bytes]] = zmq.Context()
        self._publisher: zmqlib.Socket[bytes] | None = None  # the one XPUB of every local cell
        self._endpoints: dict[int, str] = {}  # local cell -> the XPUB's advertised endpoint
        self._subscriber: zmqlib.Socket[bytes] | None = None  # the one SUB on every neighbour
        self._peers: dict[int, tuple[int, ...]] = {}
        self._expected_subscribers: dict[int, tuple[int, ...]] = {}
        self._addresses = Addresses(LOOPBACK, LOOPBACK, "not bound yet")
        self._peer_endpoints: dict[int, str] = {}
        self._io: IOThread | None = None
        self._closed = False
        self._auth: Any = None
        self._curve: Any = None
        if self.options.curve_dir:
            from evogan.transport import curve

            self._curve = curve.load_keys(Path(self.options.curve_dir), self.options.curve_name)
            self._auth = curve.start_authenticator(self._ctx, self._curve)

    # ------------------------------------------------------------------------------ setup
    def bind(self, local_cells: Sequence[int]) -> dict[int, str]:
        """One XPUB for all ``local_cells`` on an ephemeral port; returns each cell's endpoint to advertise
        (the same one)."""
        zmq, opts = self._zmq, self.options
        if self._io is not None:
            raise RuntimeError("bind() after connect()")
        if self._publisher is not None:
            raise RuntimeError("bind() may be called once")
        cells = list(local_cells)
        self._addresses = choose(opts.bind, opts.advertise)
        host, advertise = self._addresses.bind, self._addresses.advertise
        if opts.scheme == "tcp" and advertise in WILDCARDS:
            raise UserError(
                f"exchange.options.advertise is {advertise!r}: set it (or {NODE_ADDRESS_ENV}) to an address peers reach"
            )
        sock = self._socket(zmq.XPUB, cells)
        self._publisher = sock  # from the start: close() closes it whatever fails next
        sock.setsockopt(zmq.LINGER, 0)
        # a subscriber's pipe carries every local cell's models and heartbeats: the mark scales with them
        sock.setsockopt(zmq.SNDHWM, 2 * opts.hwm * max(1, len(cells)))
        sock.setsockopt(zmq.XPUB_VERBOSE, 1)
        sock.setsockopt(zmq.XPUB_NODROP, 1)
        sock.setsockopt(zmq.MAXMSGSIZE, 1 << 16)  # inbound traffic is subscriptions only
        self._heartbeats(sock)
        if self._curve is not None:
            self._curve.server(sock)
        if opts.scheme == "ipc":
            sock.bind("ipc://*")
            endpoint = sock.getsockopt_string(zmq.LAST_ENDPOINT)
        else:
            if ":" in host or ":" in advertise:
                sock.setsockopt(zmq.IPV6, 1)
            sock.bind(f"tcp://{_bracket(host)}:0")
            port = sock.getsockopt_string(zmq.LAST_ENDPOINT).rsplit(":", 1)[1]
            endpoint = f"tcp://{_bracket(advertise)}:{port}"
        self._endpoints = dict.fromkeys(cells, endpoint)
        return dict(self._endpoints)

    @property
    def endpoints(self) -> dict[int, str]:
        """The advertised endpoint of each local cell (what ``bind`` returned)."""
        return dict(self._endpoints)

    def connect(
        self,
        endpoints: Mapping[int, str],
        peers: Mapping[int, Sequence[int]],
        subscribers: Mapping[int, Sequence[int]] | None = None,
    ) -> None:
        """Subscribe each local cell to exactly its distinct neighbours, then start the I/O thread.

        :param endpoints: every cell's advertised endpoint (at least the neighbours').
        :param peers: local cell -> the cells it receives from.
        :param subscribers: local cell -> the cells that subscribe to it, for the barrier; default
            ``peers`` (von Neumann neighbourhoods on a torus are symmetric).
        """
        from evogan.transport.envelope import subscriber_mark, topic_prefix  # torch: not at module import

        zmq, opts = self._zmq, self.options
        if self._io is not None:
            raise RuntimeError("connect() may be called once")
        missing = set(peers) - set(self._endpoints)
        if missing:
            raise RuntimeError(f"connect(): cells {sorted(missing)} were not bound here")
        for cell, neighbours in peers.items():
            self._peers[cell] = tuple(sorted({p for p in neighbours if p != cell}))
            for peer in self._peers[cell]:
                if peer not in endpoints:
                    raise RunFailure(f"no endpoint for cell {peer}, a neighbour of cell {cell}")
                self._peer_endpoints[peer] = endpoints[peer]
        distinct = sorted({p for ps in self._peers.values() for p in ps})
        if distinct:
            sock = self._socket(zmq.SUB, list(peers))
            self._subscriber = sock  # from the start: close() closes it whatever fails next
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.RCVHWM, 2 * opts.hwm * len(distinct))
            # A SUB sends its subscriptions to each publisher it connects under its send mark, and drops
            # silently what does not fit: one per neighbour and one per (neighbour, local cell) pair here.
            subscriptions = len(distinct) + sum(len(ps) for ps in self._peers.values())
            sock.setsockopt(zmq.SNDHWM, 2 * subscriptions + 1000)
            sock.setsockopt(zmq.MAXMSGSIZE, opts.max_message_bytes + (1 << 20))
            self._heartbeats(sock)
            if self._curve is not None:
                self._curve.client(sock)
            if any(endpoints[peer].startswith("tcp://[") for peer in distinct):
                sock.setsockopt(zmq.IPV6, 1)
            for peer in distinct:
                sock.setsockopt(zmq.SUBSCRIBE, topic_prefix(peer))
            for cell, neighbours in self._peers.items():
                for peer in neighbours:
                    # Matches no topic; tells the peer's XPUB exactly which cell subscribed (the barrier).
                    sock.setsockopt(zmq.SUBSCRIBE, subscriber_mark(peer, cell))
            for endpoint in sorted({endpoints[peer] for peer in distinct}):  # once per publishing process
                sock.connect(endpoint)
        source = subscribers if subscribers is not None else peers
        self._expected_subscribers = {
            cell: tuple(sorted({p for p in source.get(cell, ()) if p != cell})) for cell in self._endpoints
        }
        from evogan.transport.zmq_io import IOThread

        assert self._publisher is not None  # bind() came first: connect() checked the cells
        self._io = IOThread(
            publisher=self._publisher,
            cells=list(self._endpoints),
            subscriber=self._subscriber,
            peers={p for ps in self._peers.values() for p in ps},
            inbox=self._state,  # type: ignore[arg-type]  # structural: _State implements Inbox
            max_bytes=opts.max_message_bytes,
            heartbeat_interval=opts.heartbeat_interval,
            heartbeat_state=self._state.heartbeat_state,
            send_grace=opts.send_grace,
        )
        self._io.start()

    def wait_ready(self, timeout: float | None = None) -> None:
        """The startup barrier: every local XPUB has seen one subscription per expected subscriber, and
        every neighbour has been heard from (a heartbeat). Raises ``RunFailure`` naming who is missing."""
        io = self._require_io()
        timeout = self.options.barrier_timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        everyone = {p for ps in self._peers.values() for p in ps}
        with self._state.cond:
            while True:
                short = {
                    cell: sorted(set(expected) - self._state.subscriptions.get(cell, set()))
                    for cell, expected in self._expected_subscribers.items()
                }
                short = {cell: cells for cell, cells in short.items() if cells}
                silent = sorted(everyone - set(self._state.seen))
                if not short and not silent:
                    return
                remaining = deadline - time.monotonic()
                if remaining <= 0 or io.error is not None or not io.is_alive():
                    parts = [f"no subscription to cell {c} from cells {cells}" for c, cells in short.items()]
                    if silent:
                        parts.append(f"no heartbeat from cells {silent}")
                    unheard = {p for cells in short.values() for p in cells} | set(silent)
                    hint = barrier_hint(self._addresses, [self._peer_endpoints.get(p, "") for p in sorted(unheard)])
                    raise RunFailure(
                        f"transport barrier failed after {timeout:g} s: " + "; ".join(parts) + f". Likely: {hint}"
                    )
                self._state.cond.wait(min(remaining, 0.5))

    # ------------------------------------------------------------------------------ data plane
    def publish(self, cell: int, frames: Sequence[bytes | memoryview]) -> None:
        """Hand one encoded message (a fresh buffer, never reused by the caller) to the I/O thread."""
        from evogan.transport.envelope import parse_header

        io = self._require_io()
        if cell not in self._endpoints:
            raise RuntimeError(f"cell {cell} is not served by this transport")
        header = parse_header(frames, max_bytes=self.options.max_message_bytes)
        with self._state.cond:
            self._state.published[cell] = (header["generation"], header["incarnation"])
        io.enqueue(cell, list(frames))

    def gather(
        self,
        cell: int,
        peers: Sequence[int],
        generation: int,
        *,
        max_staleness: int,
        timeout: float,
        substep: int = 0,
    ) -> dict[int, Frames]:
        """Each peer's message for exactly ``(generation, substep)`` when held; otherwise wait up to
        ``timeout`` s for one no older than ``(generation - max_staleness, substep)``; then return the
        newest held (or nothing)."""
        io = self._require_io()
        floor = (generation - max_staleness, substep)
        deadline = time.monotonic() + timeout if math.isfinite(timeout) else math.inf
        with self._state.cond:
            while True:
                picks = {peer: self._state.pick(peer, (generation, substep)) for peer in peers}
                waiting = [peer for peer, got in picks.items() if got is None or got[0] < floor]
                remaining = deadline - time.monotonic()
                if not waiting or remaining <= 0 or self._closed or not io.is_alive():
                    break
                self._state.cond.wait(None if math.isinf(remaining) else remaining)
        if io.error is not None:
            raise RunFailure(f"transport I/O thread failed: {io.error}")
        return {peer: list(got[1]) for peer, got in picks.items() if got is not None}

    # ------------------------------------------------------------------------------ observation
    def liveness(self) -> dict[int, float]:
        """Seconds since each neighbour was last heard from (models or heartbeats); inf if never."""
        now = time.monotonic()
        with self._state.cond:
            return {
                peer: now - self._state.seen[peer] if peer in self._state.seen else math.inf
                for peer in sorted({p for ps in self._peers.values() for p in ps})
            }

    def heartbeats(self) -> dict[int, dict[str, Any]]:
        """The last heartbeat body of each neighbour: ``{cell, generation, incarnation}``."""
        with self._state.cond:
            return {peer: dict(body) for peer, body in self._state.beats.items()}

    def generations(self, peer: int) -> list[int]:
        """Generations currently held from ``peer`` (at most ``keep``)."""
        with self._state.cond:
            return sorted({g for g, _ in self._state.held.get(peer, {})})

    def stats(self) -> TransportStats:
        with self._state.cond:
            s = self._state.stats
            return TransportStats(s.sent_messages, s.sent_bytes, s.received_messages, s.received_bytes, dict(s.dropped))

    def close(self) -> None:
        """Stop the I/O thread (it closes its sockets with linger 0), then the authenticator and context."""
        if self._closed:
            return
        self._closed = True
        with self._state.cond:
            self._state.cond.notify_all()
        stopped = True
        if self._io is not None:
            stopped = self._io.stop()
        else:  # never connected, or connect() failed half-way: term() would wait for these forever
            for sock in (self._publisher, self._subscriber):
                if sock is not None:
                    sock.close(linger=0)
        if self._auth is not None:
            self._auth.stop()
        if stopped:
            self._ctx.term()
        else:  # a wedged I/O thread: do not hang the caller on term()
            self._ctx.destroy(linger=0)

    def __enter__(self) -> ZmqTransport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------------------ helpers
    def _socket(self, kind: int, cells: Sequence[int]) -> zmqlib.Socket[bytes]:
        try:
            return self._ctx.socket(kind)
        except self._zmq.ZMQError as exc:
            raise RunFailure(
                f"{_cells_label(cells)}: cannot open a ZeroMQ socket ({exc}): raise the open-files limit (ulimit -n)"
            ) from None

    def _require_io(self) -> IOThread:
        if self._io is None:
            raise RuntimeError("call bind() and connect() first")
        if self._closed:
            raise RuntimeError("transport is closed")
        return self._io

    def _heartbeats(self, sock: zmqlib.Socket[bytes]) -> None:
        """ZMTP heartbeats close half-open TCP connections; any traffic resets them, big transfers too."""
        zmq, interval = self._zmq, self.options.heartbeat_interval
        sock.setsockopt(zmq.HEARTBEAT_IVL, max(1, int(interval * 1000)))
        sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, max(5000, int(interval * 10_000)))
        # A connect attempt made while the link is down would otherwise wait out the kernel's SYN backoff
        # (1, 2, 4 ... 64 s): give up after 2 s and try again, so a restored link reconnects within seconds.
        sock.setsockopt(zmq.CONNECT_TIMEOUT, 2000)


def _cells_label(cells: Sequence[int]) -> str:
    """``cell 3``, ``cells 0-599`` or ``cells 1, 4, 9``: a process's cells in an error line."""
    ordered = sorted(cells)
    if len(ordered) == 1:
        return f"cell {ordered[0]}"
    if ordered and ordered == list(range(ordered[0], ordered[-1] + 1)):
        return f"cells {ordered[0]}-{ordered[-1]}"
    return "cells " + ", ".join(map(str, ordered[:8])) + (f" ... ({len(ordered)} in all)" if len(ordered) > 8 else "")


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


__all__ = ["ZmqTransport"]
