"""Node liveness across machines: a node unheard for ``--node-timeout`` seconds ends the run on every node.

Workers do not fail when a neighbour goes quiet (they train on the newest model they hold), so torch's elastic agent
would never notice a lost node, and TCPStore calls can block for minutes on a dead link. So agents beat over UDP on
the rendezvous port: a datagram carries nothing worth trusting (nothing is unpickled) and no TCP back-off delays
the first beat after a link returns. The watch is armed from the first beat of every node until the summary exists;
an outage shorter than the limit passes (the workers wait in their exchange).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

BEAT_SECONDS = 1.0
BEAT, ACK = "evogan-beat", "evogan-ack"


class NodeWatch:
    """Beat as ``me`` towards ``host:port`` (or answer there, on the head); decide when a node is lost.

    :param nodes: how many nodes the run has (``--nnodes``).
    :param limit: seconds a node may go unheard (``--node-timeout``).
    :param head: ``True``: answer beats (this node hosts the store); ``False``: send them; ``None``
        (loopback, several agents on one machine): answer if the port is free, else send.
    :param finished: true once the run no longer needs every node (its summary is written).
    """

    def __init__(
        self,
        host: str,
        port: int,
        run_id: str,
        me: str,
        *,
        nodes: int,
        limit: float,
        head: bool | None,
        finished: Callable[[], bool],
        interval: float = BEAT_SECONDS,
    ) -> None:
        self.host, self.port, self.run_id, self.me = host, port, run_id, me
        self.nodes, self.limit, self.finished, self.interval = nodes, limit, finished, interval
        self.heard: dict[str, float] = {}  # node -> monotonic time of its last beat (head) or ack (others)
        self.armed = False
        self.reason: str | None = None
        self._stop = threading.Event()
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._sock = socket.socket(family, socket.SOCK_DGRAM)
        self._sock.settimeout(interval)
        self.head = bool(head)
        if head is not False:
            try:
                self._sock.bind(("::" if family == socket.AF_INET6 else "0.0.0.0", port))
                self.head = True
            except OSError:
                if head:
                    raise
        self._thread = threading.Thread(target=self._run, name="evogan-node-watch", daemon=True)

    def start(self) -> NodeWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def lost(self) -> str | None:
        """Why the run must end (one line), once decided; ``None`` while every node is heard."""
        return self.reason

    # ------------------------------------------------------------------------------ the loop
    def _run(self) -> None:
        try:
            while not self._stop.is_set() and self.reason is None:
                if self.head:
                    self._answer()
                else:
                    self._beat()
                if not self.finished():
                    self._judge(time.monotonic())
        finally:
            self._sock.close()

    def _datagrams(self, size: int) -> Iterator[tuple[list[str], Any]]:
        """This run's datagrams (their words, and the sender) until the next beat is due."""
        deadline = time.monotonic() + self.interval
        while (left := deadline - time.monotonic()) > 0:
            self._sock.settimeout(left)
            try:
                data, sender = self._sock.recvfrom(size)
            except (TimeoutError, OSError):
                return
            words = data.decode(errors="replace").split()
            if len(words) >= 2 and words[1] == self.run_id:
                yield words, sender

    def _answer(self) -> None:
        """Head: note every beat of this run and answer with the nodes heard within the limit."""
        for words, sender in self._datagrams(512):
            if len(words) == 3 and words[0] == BEAT:
                now = time.monotonic()
                self.heard[words[2]] = now
                alive = ",".join(sorted(n for n, t in self.heard.items() if now - t < self.limit))
                with contextlib.suppress(OSError):
                    self._sock.sendto(f"{ACK} {self.run_id} {alive}".encode(), sender)

    def _beat(self) -> None:
        """Other nodes: one beat, then take the head's answers until the next beat is due."""
        with contextlib.suppress(OSError):  # no route while a link is down: a missed beat
            self._sock.sendto(f"{BEAT} {self.run_id} {self.me}".encode(), (self.host, self.port))
        for words, _ in self._datagrams(4096):
            if words[0] == ACK:
                now = time.monotonic()
                self.heard[self.host] = now
                for name in words[2].split(",") if len(words) > 2 else []:
                    self.heard[name] = now

    def _judge(self, now: float) -> None:
        alive = {n for n, t in self.heard.items() if now - t < self.limit} | {self.me}
        if not self.armed:  # head: every other node beat; others: the head answered, listing every other
            self.armed = len(alive) >= self.nodes
            return
        if self.head:
            silent = sorted(n for n in self.heard if n not in alive)
            if len(alive) < self.nodes and silent:
                quiet = max(now - self.heard[n] for n in silent)
                self.reason = (
                    f"node {', '.join(silent)} has not been heard from for {quiet:.0f} s (its link, or its agent, "
                    "is down)"
                )
        elif self.host not in alive:
            quiet = now - self.heard.get(self.host, now)
            self.reason = f"lost the head node {self.host}: no answer to this node's beats for {quiet:.0f} s"

    def __enter__(self) -> NodeWatch:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self._thread.join(timeout=self.interval * 3)


__all__ = ["BEAT_SECONDS", "NodeWatch"]
