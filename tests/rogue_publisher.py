"""A rogue in the middle of a running 2-worker run, for the end-to-end wire test (tests/test_wire_fuzz.py).

The run advertises 127.0.0.2 while its workers bind 127.0.0.1, so every subscriber connects here: this
process binds each advertised endpoint (an XPUB; a worker's cells share one), connects to the real
publisher behind it (an XSUB) and forwards both ways. Before it forwards a cell's model message of a
generation below LAST, it publishes on that cell's topic garbage (mutations of the message that a
subscriber rejects, and a mangled heartbeat), a replay of the cell's previous message and one of a message
older than any a subscriber keeps. It counts what each
subscribing cell must drop, by the reason the subscriber's own check (``zmq_io.check``) gives: a worker's
cells share one subscriber, so a worker drops what its subscribing cells were sent, once per message (the
test's 2x2 torus on two workers has one subscribing cell per worker and publishing cell).

usage: python tests/rogue_publisher.py RUN_DIR CELLS LAST KEEP STOP_FILE (KEEP: exchange.options.keep)
Prints one JSON line when STOP_FILE appears: ``{"deliveries": {subscriber: {reason: count}}, "sent": n}``.
"""

from __future__ import annotations

import json
import random
import re
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import zmq
from wire_mutations import mutate

from evogan.errors import MessageRejected
from evogan.transport import envelope, zmq_io

GARBAGE = 12  # mutated copies per model message
MAX_BYTES = 256 << 20  # the transport's default payload cap


def endpoints(run_dir: Path, cells: int, timeout: float = 120.0) -> dict[int, str]:
    """Each cell's advertised endpoint, from the workers' start-up lines."""
    deadline = time.monotonic() + timeout
    found: dict[int, str] = {}
    while len(found) < cells:
        if time.monotonic() > deadline:
            raise SystemExit(f"rogue: endpoints of cells {sorted(set(range(cells)) - set(found))} never logged")
        for log in (run_dir / "logs").glob("worker-*.out"):
            for listed, endpoint in re.findall(r"cells ([\d ]+) at (tcp://[^;\s]+)", log.read_text()):
                found.update(dict.fromkeys(map(int, listed.split()), endpoint))
        time.sleep(0.05)
    return found


class Rogue:
    def __init__(self, advertised: dict[int, str], last: int, keep: int) -> None:
        self.context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        self.last, self.keep = last, keep
        self.xpubs: dict[str, zmq.Socket[bytes]] = {}  # advertised endpoint -> the rogue's XPUB there
        self.xsubs: dict[str, zmq.Socket[bytes]] = {}  # advertised endpoint -> the XSUB on the real one
        self.endpoint_of = dict(advertised)  # cell -> its worker's advertised endpoint
        for endpoint in sorted(set(advertised.values())):
            xpub = self.context.socket(zmq.XPUB)
            for option, value in ((zmq.XPUB_VERBOSE, 1), (zmq.XPUB_NODROP, 1), (zmq.SNDHWM, 0), (zmq.LINGER, 0)):
                xpub.setsockopt(option, value)
            xpub.bind(endpoint)
            xsub = self.context.socket(zmq.XSUB)
            xsub.setsockopt(zmq.RCVHWM, 0)
            xsub.setsockopt(zmq.LINGER, 0)
            xsub.connect(endpoint.replace("tcp://127.0.0.2:", "tcp://127.0.0.1:"))
            self.xpubs[endpoint], self.xsubs[endpoint] = xpub, xsub
        self.subscribers: dict[int, set[int]] = defaultdict(set)  # cell -> cells subscribed to it
        self.history: dict[int, dict[int, list[bytes]]] = defaultdict(dict)  # cell -> generation -> frames
        self.seen: set[bytes] = set()
        self.deliveries: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self.sent = 0
        self.rng = random.Random(28)

    def run(self, stop: Path) -> None:
        poller = zmq.Poller()
        for sock in (*self.xpubs.values(), *self.xsubs.values()):
            poller.register(sock, zmq.POLLIN)
        xpubs = {sock: endpoint for endpoint, sock in self.xpubs.items()}
        while not stop.exists():
            for sock, _ in poller.poll(100):
                if sock in xpubs:
                    self.subscription(xpubs[sock], sock.recv())
                else:
                    frames = sock.recv_multipart()
                    self.message(int(frames[0][1 : 1 + envelope.TOPIC_WIDTH]), frames)

    def subscription(self, endpoint: str, frame: bytes) -> None:
        found = envelope.subscribed_cell(frame)
        if found is not None:
            self.subscribers[found[0]].add(found[1])
        self.xsubs[endpoint].send(frame)

    def message(self, cell: int, frames: list[bytes]) -> None:
        xpub = self.xpubs[self.endpoint_of[cell]]
        fresh = frames[0] == envelope.topic(cell) and frames[1] not in self.seen
        if fresh:
            self.seen.add(frames[1])
            generation = json.loads(frames[1])["generation"]
            if generation < self.last:
                self.attack(cell, frames, generation)
            self.history[cell][generation] = frames
        xpub.send_multipart(frames)

    def attack(self, cell: int, frames: list[bytes], generation: int) -> None:
        """Garbage, then replays, all before the real message: a subscriber has counted them by the time it
        can gather that message, so the records written after it hold every count."""
        beat = [envelope.topic(cell, b"H"), json.dumps({"cell": cell, "generation": 0, "incarnation": 0}).encode()]
        garbage = 0
        while garbage < GARBAGE + 1:
            base = frames if garbage < GARBAGE else [*beat, b""]
            _, bad = mutate(base, self.rng)
            if base is not frames and bad[2:] == [b""]:
                bad = bad[:2]
            deliverable = bool(bad) and bad[0].startswith(envelope.topic_prefix(cell))  # else no one subscribes
            if deliverable and self.send(cell, bad, self.rejection(cell, bad)):
                garbage += 1
        held = self.history[cell]
        if generation - 1 in held:
            self.send(cell, held[generation - 1], "duplicate")  # still kept by every subscriber
        if generation - 1 - self.keep in held:
            self.send(cell, held[generation - 1 - self.keep], "stale")  # older than anything kept

    @staticmethod
    def rejection(cell: int, frames: list[bytes]) -> str | None:
        try:
            zmq_io.check(frames, {cell}, MAX_BYTES)
        except MessageRejected as rejected:
            return zmq_io.reason_key(str(rejected))
        return None  # a valid message: a forgery, not garbage; this rogue sends none

    def send(self, cell: int, frames: list[bytes], reason: str | None) -> bool:
        if reason is None:
            return False
        self.xpubs[self.endpoint_of[cell]].send_multipart(frames)
        for subscriber in self.subscribers[cell]:
            self.deliveries[subscriber][reason] += 1
        self.sent += 1
        return True

    def report(self) -> dict[str, Any]:
        return {"deliveries": {str(c): dict(counts) for c, counts in self.deliveries.items()}, "sent": self.sent}

    def close(self) -> None:
        for sock in (*self.xpubs.values(), *self.xsubs.values()):
            sock.close(linger=0)
        self.context.term()


def main() -> None:
    run_dir, stop = Path(sys.argv[1]), Path(sys.argv[5])
    cells, last, keep = (int(arg) for arg in sys.argv[2:5])
    rogue = Rogue(endpoints(run_dir, cells), last, keep)
    try:
        rogue.run(stop)
    finally:
        rogue.close()
    print(json.dumps(rogue.report()), flush=True)


if __name__ == "__main__":
    main()
