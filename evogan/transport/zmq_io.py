"""The single thread that owns every ZeroMQ socket of a :class:`~evogan.transport.zmq.ZmqTransport`.

ZeroMQ sockets are not thread-safe. The transport creates its sockets in the caller's thread during
``bind``/``connect`` and hands them over to this thread when it starts (thread start is a full memory
fence, which is what libzmq asks for when a socket migrates). From then on only this thread touches them:
other threads enqueue outgoing messages and wake it through a non-blocking pipe.

The loop drains the subscriber socket (every valid message goes to the inbox), reads subscription frames
on the process's XPUB (the startup barrier counts them, per subscribing cell), sends queued publications
and a heartbeat per local cell every ``heartbeat_interval`` seconds, so liveness keeps flowing while a
generation trains for minutes. Two sockets and their monitors, whatever the number of local cells.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Container, Sequence
from typing import Any

import zmq
from zmq.utils.monitor import recv_monitor_message

from evogan.errors import MessageRejected
from evogan.transport.envelope import MODEL_KIND, TOPIC_WIDTH, is_count, load_json, parse_header, subscribed_cell, topic

log = logging.getLogger(__name__)

HEARTBEAT_KIND = b"H"
TOPIC_LENGTH = TOPIC_WIDTH + 3  # "c" + digits + "." + kind
MAX_HEARTBEAT_BYTES = 4096
RETRY_MS = 5  # how often a message waiting for a full subscriber pipe is retried
DRAIN_BATCH = 64  # messages read from one socket before the loop looks at the others
# Models resent to a new subscription: after a cut link a lockstep neighbour may still need the model
# before our latest (the one lost with the dead connection; we published the latest after receiving its).
RESEND = 2

SUB_EVENTS = (
    zmq.EVENT_DISCONNECTED
    | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_AUTH
)
PUB_EVENTS = (
    zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
)
EVENT_REASONS: dict[int, str] = {
    zmq.EVENT_DISCONNECTED: "disconnected",
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL: "handshake_failed",
    zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL: "handshake_failed",
    zmq.EVENT_HANDSHAKE_FAILED_AUTH: "auth_rejected",
}

# rejection reasons -> a bounded set of counter names (a reason's detail embeds peer-chosen text); the
# first needle found in the reason wins, so the specific ones come first
_REASONS = (
    ("heartbeat", "heartbeat"),
    ("bad topic", "bad_topic"),
    ("unexpected peer", "unexpected_peer"),
    ("unknown kind", "unknown_kind"),
    ("frames:", "frames"),
    ("header: larger", "header_too_large"),
    ("exceed the cap", "oversize"),
    ("header: not", "header_not_json"),
    ("header.v:", "version"),
    ("header.", "header_fields"),
    ("topic: does not match", "topic_mismatch"),
    ("the manifest says", "length_mismatch"),
    ("manifest", "manifest"),
)


def reason_key(message: str) -> str:
    """A stable counter name for a rejection reason."""
    for needle, key in _REASONS:
        if needle in message:
            return key
    return "invalid"


def check(frames: Sequence[bytes | memoryview], peers: Container[int], max_bytes: int) -> tuple[int, bytes, Any]:
    """``(peer, kind, header or heartbeat body)`` of a message a subscriber received; what is not a valid
    model or heartbeat from one of ``peers`` raises ``MessageRejected``. Reads no payload byte."""
    head = bytes(frames[0]) if frames else b""
    if len(head) != TOPIC_LENGTH or head[:1] != b"c" or not head[1 : TOPIC_WIDTH + 1].isdigit():
        raise MessageRejected("bad topic")
    peer, kind = int(head[1 : TOPIC_WIDTH + 1]), head[TOPIC_LENGTH - 1 :]
    if peer not in peers:
        raise MessageRejected("unexpected peer")
    if kind == HEARTBEAT_KIND:
        return peer, kind, _heartbeat_body(peer, frames)
    if kind != MODEL_KIND:
        raise MessageRejected("unknown kind")
    return peer, kind, parse_header(frames, max_bytes=max_bytes)


def _heartbeat_body(peer: int, frames: Sequence[bytes | memoryview]) -> dict[str, Any]:
    if len(frames) != 2 or len(frames[1]) > MAX_HEARTBEAT_BYTES:
        raise MessageRejected("heartbeat: bad layout")
    body = load_json(frames[1], "heartbeat")
    if not isinstance(body, dict):
        raise MessageRejected("heartbeat: not an object")
    generation = body.get("generation")  # -1: the peer has published nothing yet
    counts = is_count(body.get("cell")) and is_count(body.get("incarnation"))
    if not counts or type(generation) is not int or not is_count(generation + 1):
        raise MessageRejected("heartbeat: fields")
    if body["cell"] != peer:
        raise MessageRejected("heartbeat: topic does not match")
    return body


class Inbox:
    """What the I/O thread reports to; implemented by the transport (thread-safe on its side)."""

    def model(self, peer: int, header: dict[str, Any], frames: list[Any], size: int) -> str | None:
        """A validated model message; return a drop reason or None when kept."""
        raise NotImplementedError

    def heartbeat(self, peer: int, body: dict[str, Any]) -> None:
        raise NotImplementedError

    def subscribed(self, cell: int, subscriber: int) -> None:
        raise NotImplementedError

    def count(self, reason: str, *, sent: int = 0, sent_bytes: int = 0) -> None:
        raise NotImplementedError


class IOThread(threading.Thread):
    """Owns the process's XPUB (every local cell publishes on it), its SUB and their monitors once started."""

    def __init__(
        self,
        *,
        publisher: zmq.Socket[bytes],
        cells: Sequence[int],
        subscriber: zmq.Socket[bytes] | None,
        peers: set[int],
        inbox: Inbox,
        max_bytes: int,
        heartbeat_interval: float,
        heartbeat_state: Callable[[int], tuple[int, int]],
        send_grace: float,
    ) -> None:
        super().__init__(name="evogan-zmq-io", daemon=True)
        self.publisher = publisher
        self.cells = list(cells)
        self.subscriber = subscriber
        self.peers = peers
        self.inbox = inbox
        self.max_bytes = max_bytes
        self.heartbeat_interval = heartbeat_interval
        self.heartbeat_state = heartbeat_state
        self.send_grace = send_grace
        self._local = frozenset(cells)
        self._pending: dict[int, tuple[list[Any], float]] = {}
        # the last RESEND models sent per cell: a late or reconnected subscriber gets them at once
        self._recent: dict[int, deque[list[Any]]] = {}
        self.monitors: list[tuple[zmq.Socket[bytes], zmq.Socket[bytes]]] = []
        if subscriber is not None:
            self.monitors.append((subscriber, subscriber.get_monitor_socket(SUB_EVENTS)))
        self.monitors.append((publisher, publisher.get_monitor_socket(PUB_EVENTS)))
        self._outgoing: deque[tuple[int, list[Any]]] = deque()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._stopping = threading.Event()
        self._fd_lock = threading.Lock()
        self._fds_closed = False
        self.error: BaseException | None = None

    # ------------------------------------------------------------------ called from other threads
    def enqueue(self, cell: int, frames: list[Any]) -> None:
        self._outgoing.append((cell, frames))  # deque.append is atomic
        self.wake()

    def wake(self) -> None:
        with self._fd_lock, contextlib.suppress(BlockingIOError, OSError):
            if not self._fds_closed:  # never write into a closed (possibly reused) descriptor
                os.write(self._wake_w, b"\0")

    def stop(self, timeout: float = 10.0) -> bool:
        self._stopping.set()
        self.wake()
        self.join(timeout)
        return not self.is_alive()

    # ------------------------------------------------------------------ the loop
    def run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # recorded; gather/wait_ready turn it into a RunFailure
            log.exception("zmq I/O thread failed")
            self.error = exc
        finally:
            self._close_sockets()
            with self._fd_lock:
                self._fds_closed = True
                os.close(self._wake_r)
                os.close(self._wake_w)

    def _loop(self) -> None:
        poller = zmq.Poller()
        poller.register(self._wake_r, zmq.POLLIN)
        poller.register(self.publisher, zmq.POLLIN)
        if self.subscriber is not None:
            poller.register(self.subscriber, zmq.POLLIN)
        monitor_of = {}
        for sock, monitor in self.monitors:
            poller.register(monitor, zmq.POLLIN)
            monitor_of[monitor] = sock
        next_beat = time.monotonic()
        while not self._stopping.is_set():
            now = time.monotonic()
            if now >= next_beat:
                for cell in self.cells:
                    self._heartbeat(cell)
                next_beat = max(next_beat + self.heartbeat_interval, now)
            wait_ms = max(0, int((next_beat - time.monotonic()) * 1000) + 1)
            if self._outgoing:
                wait_ms = 0
            elif self._pending:
                wait_ms = min(wait_ms, RETRY_MS)
            for item, _ in poller.poll(wait_ms):
                if item == self._wake_r:
                    with contextlib.suppress(BlockingIOError):
                        os.read(self._wake_r, 4096)
                elif item is self.publisher:
                    self._read_subscriptions()
                elif item in monitor_of:
                    self._read_monitor(item)
                else:
                    self._drain(item)
            self._retry_pending()
            while self._outgoing:
                cell, frames = self._outgoing.popleft()
                self._publish(cell, frames)

    def _publish(self, cell: int, frames: list[Any]) -> None:
        if cell in self._pending:
            self.inbox.count("superseded")  # a newer generation replaces one still waiting for a pipe
            del self._pending[cell]
        if not self._try_send(cell, frames):
            self._pending[cell] = (frames, time.monotonic())

    def _resend(self, cell: int, frames: list[Any]) -> None:
        if not self._try_send(cell, frames):
            self._pending[cell] = (frames, time.monotonic())  # a newer publication supersedes it

    def _retry_pending(self) -> None:
        """A full pipe is usually a burst or a big message still on the wire: retry for ``send_grace``
        seconds, then send lossy so that only the slow subscriber misses it (a frozen neighbour must not
        starve the healthy ones; with XPUB_NODROP one full pipe blocks the send to every subscriber)."""
        now = time.monotonic()
        for cell, (frames, since) in list(self._pending.items()):
            if self._try_send(cell, frames):
                del self._pending[cell]
            elif now - since >= self.send_grace:
                del self._pending[cell]
                self.inbox.count("send_hwm")
                self._try_send(cell, frames, lossy=True)

    def _try_send(self, cell: int, frames: list[Any], *, lossy: bool = False) -> bool:
        """Never blocks: XPUB_NODROP + DONTWAIT turns a full subscriber pipe into EAGAIN."""
        sock = self.publisher
        if lossy:
            sock.setsockopt(zmq.XPUB_NODROP, 0)
        try:
            sock.send_multipart(frames, flags=zmq.DONTWAIT, copy=False)
        except zmq.Again:
            return False
        finally:
            if lossy:
                sock.setsockopt(zmq.XPUB_NODROP, 1)
        if frames[0][TOPIC_LENGTH - 1 : TOPIC_LENGTH] == MODEL_KIND:
            recent = self._recent.setdefault(cell, deque(maxlen=RESEND))
            if not any(frames is held for held in recent):  # a resend is not news
                recent.append(frames)
            self.inbox.count("", sent=1, sent_bytes=sum(len(frame) for frame in frames))
        return True

    def _heartbeat(self, cell: int) -> None:
        generation, incarnation = self.heartbeat_state(cell)
        body = json.dumps({"cell": cell, "generation": generation, "incarnation": incarnation}).encode()
        frames = [topic(cell, HEARTBEAT_KIND), body]
        if not self._try_send(cell, frames):  # tiny; the healthy subscribers must keep hearing us
            self.inbox.count("send_hwm")
            self._try_send(cell, frames, lossy=True)

    def _read_subscriptions(self) -> None:
        """XPUB_VERBOSE surfaces every subscription frame; ``\x01c00003.S00001`` says cell 1 subscribed to
        local cell 3 (the plain ``\x01c00003.`` that comes with it needs nothing)."""
        for _ in range(DRAIN_BATCH):
            try:
                frame = self.publisher.recv(zmq.DONTWAIT)
            except zmq.Again:
                return
            found = subscribed_cell(frame)
            if found is None or found[0] not in self._local:
                continue
            cell, subscriber = found
            self.inbox.subscribed(cell, subscriber)
            self._heartbeat(cell)  # a welcome: the new subscriber hears from us at once
            # Last-value cache: a subscriber that joins (or reconnects) late gets our recent models now,
            # not after our next generation; the others hold them already and keep them idempotently.
            if cell not in self._pending:
                for frames in list(self._recent.get(cell, ())):
                    self._resend(cell, frames)

    def _read_monitor(self, monitor: zmq.Socket[bytes]) -> None:
        for _ in range(DRAIN_BATCH):
            try:
                event = recv_monitor_message(monitor, zmq.DONTWAIT)
            except zmq.Again:
                return
            reason = EVENT_REASONS.get(event["event"])
            if reason:
                self.inbox.count(reason)

    def _drain(self, sock: zmq.Socket[bytes]) -> None:
        for _ in range(DRAIN_BATCH):
            try:
                frames = sock.recv_multipart(zmq.DONTWAIT, copy=False)
            except zmq.Again:
                return
            try:
                self._accept(frames)
            except MessageRejected as exc:  # the one drop-and-count path: anything else is a bug, not a peer
                self.inbox.count(reason_key(str(exc)))

    def _accept(self, raw: list[zmq.Frame]) -> None:
        # the payload stays a view of ZeroMQ's buffer: no copy of the tensor bytes
        frames: list[Any] = [*(frame.bytes for frame in raw[:2]), *(frame.buffer for frame in raw[2:])]
        peer, kind, body = check(frames, self.peers, self.max_bytes)
        if kind == HEARTBEAT_KIND:
            self.inbox.heartbeat(peer, body)
            return
        reason = self.inbox.model(peer, body, frames, sum(len(f) for f in frames))
        if reason:
            self.inbox.count(reason)

    def _close_sockets(self) -> None:
        for sock, monitor in self.monitors:
            with contextlib.suppress(zmq.ZMQError):
                sock.disable_monitor()
            monitor.close(linger=0)
        self.publisher.close(linger=0)
        if self.subscriber is not None:
            self.subscriber.close(linger=0)


__all__ = ["HEARTBEAT_KIND", "IOThread", "Inbox", "check", "reason_key"]
