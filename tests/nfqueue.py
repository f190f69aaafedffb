"""A link delay in user space, for kernels without ``tc netem``: packets queued by an iptables
``NFQUEUE`` rule are released after ``delay ± jitter`` milliseconds.

    ip netns exec NS python tests/nfqueue.py --queue 0 --delay-ms 100 --jitter-ms 20

Speaks nfnetlink_queue (``linux/netfilter/nfnetlink_queue.h``) over a raw netlink socket: no library.
Each packet draws its delay uniformly from ``[delay - jitter, delay + jitter]``; packets leave in the
order they came (netem's jitter reorders them), so the delay a packet sees is at least its draw. Only
metadata crosses to user space (``NFQNL_COPY_META``), segmentation offload stays on (``F_GSO``), and the
queue fails open: if this process falls behind, packets pass undelayed rather than being dropped.
Prints ``ready`` once bound; stops on SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import select
import signal
import socket
import struct
import sys
import time
from collections.abc import Sequence

NETLINK_NETFILTER = 12
SOL_NETLINK = 270
NETLINK_NO_ENOBUFS = 5
SO_RCVBUFFORCE = 33
NLM_F_REQUEST, NLM_F_ACK = 1, 4
NLMSG_ERROR = 2
QUEUE_SUBSYS = 3 << 8  # NFNL_SUBSYS_QUEUE
MSG_PACKET, MSG_CONFIG, MSG_VERDICT_BATCH = 0, 2, 3
CFG_CMD, CFG_PARAMS, CFG_QUEUE_MAXLEN, CFG_MASK, CFG_FLAGS = 1, 2, 3, 4, 5
CMD_BIND, COPY_META = 1, 1
F_FAIL_OPEN, F_GSO = 1, 4
PACKET_HDR, VERDICT_HDR = 1, 2
NF_ACCEPT = 1


def _attr(kind: int, payload: bytes) -> bytes:
    header = struct.pack("=HH", 4 + len(payload), kind)
    return header + payload + b"\0" * (-len(payload) % 4)


def _message(kind: int, queue: int, attrs: bytes, flags: int = NLM_F_REQUEST, seq: int = 0) -> bytes:
    body = struct.pack("=BB", socket.AF_UNSPEC, 0) + struct.pack(">H", queue) + attrs
    return struct.pack("=IHHII", 16 + len(body), QUEUE_SUBSYS | kind, flags, seq, 0) + body


def _attrs(data: bytes) -> dict[int, bytes]:
    found, offset = {}, 0
    while offset + 4 <= len(data):
        length, kind = struct.unpack_from("=HH", data, offset)
        if length < 4:
            break
        found[kind & 0x7FFF] = data[offset + 4 : offset + length]
        offset += (length + 3) & ~3
    return found


class Delayer:
    """Holds each queued packet's id until its release time, then accepts it (in arrival order)."""

    def __init__(self, queue: int, delay: float, jitter: float, seed: int | None = None) -> None:
        self.queue, self.delay, self.jitter = queue, delay, jitter
        self.random = random.Random(seed)
        self.held: collections.deque[tuple[float, int]] = collections.deque()
        self.last_release = 0.0
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        self.sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 16 << 20)
        self.sock.setsockopt(SOL_NETLINK, NETLINK_NO_ENOBUFS, 1)
        self.sock.bind((0, 0))
        self.seq = 0

    def _request(self, attrs: bytes) -> None:
        self.seq += 1
        self.sock.send(_message(MSG_CONFIG, self.queue, attrs, NLM_F_REQUEST | NLM_F_ACK, self.seq))
        while True:  # the ack (an error message with code 0) or the error
            data = self.sock.recv(65536)
            _, kind, _, seq, _ = struct.unpack_from("=IHHII", data)
            if kind == NLMSG_ERROR and seq == self.seq:
                code = struct.unpack_from("=i", data, 16)[0]
                if code:
                    raise OSError(-code, f"nfqueue config: {os.strerror(-code)}")
                return

    def bind(self) -> None:
        self._request(_attr(CFG_CMD, struct.pack("=BB", CMD_BIND, 0) + struct.pack(">H", socket.AF_INET)))
        flags = struct.pack(">I", F_FAIL_OPEN | F_GSO)
        self._request(
            _attr(CFG_PARAMS, struct.pack(">IB", 0, COPY_META))
            + _attr(CFG_QUEUE_MAXLEN, struct.pack(">I", 1 << 16))
            + _attr(CFG_MASK, flags)
            + _attr(CFG_FLAGS, flags)
        )
        self.sock.setblocking(False)

    def _receive(self) -> None:
        now = time.monotonic()
        while True:
            try:
                data = self.sock.recv(1 << 16)
            except BlockingIOError:
                return
            offset = 0
            while offset + 16 <= len(data):
                length, kind, _, _, _ = struct.unpack_from("=IHHII", data, offset)
                if length < 16:
                    break
                if kind == QUEUE_SUBSYS | MSG_PACKET:
                    header = _attrs(data[offset + 20 : offset + length]).get(PACKET_HDR)
                    if header is not None:
                        packet_id = struct.unpack_from(">I", header)[0]
                        wanted = now + max(0.0, self.delay + self.random.uniform(-self.jitter, self.jitter))
                        self.last_release = max(self.last_release, wanted)
                        self.held.append((self.last_release, packet_id))
                offset += (length + 3) & ~3

    def _release(self) -> None:
        now, last = time.monotonic(), None
        while self.held and self.held[0][0] <= now:
            last = self.held.popleft()[1]
        if last is not None:  # every id up to ``last`` (ids grow with arrival)
            verdict = _attr(VERDICT_HDR, struct.pack(">II", NF_ACCEPT, last))
            self.sock.send(_message(MSG_VERDICT_BATCH, self.queue, verdict))

    def serve(self, running: list[bool]) -> None:
        while running[0]:
            wait = max(0.0, self.held[0][0] - time.monotonic()) if self.held else 0.5
            readable, _, _ = select.select([self.sock], [], [], wait)
            if readable:
                self._receive()
            self._release()
        if self.held:  # hand back whatever is still held
            verdict = _attr(VERDICT_HDR, struct.pack(">II", NF_ACCEPT, self.held[-1][1]))
            self.sock.send(_message(MSG_VERDICT_BATCH, self.queue, verdict))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="evogan.testing.nfqueue", description=__doc__.split("\n")[0])
    parser.add_argument("--queue", type=int, default=0)
    parser.add_argument("--delay-ms", type=float, required=True)
    parser.add_argument("--jitter-ms", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args(argv)
    delayer = Delayer(args.queue, args.delay_ms / 1000, args.jitter_ms / 1000, args.seed)
    delayer.bind()
    running = [True]

    def stop(*_: object) -> None:
        running[0] = False

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print("ready", flush=True)
    delayer.serve(running)
    return 0


if __name__ == "__main__":
    sys.exit(main())
