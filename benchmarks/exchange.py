"""Exchange cost: envelope vs raw tensor bytes vs the original Lipizzaner encoding; latency over tcp/ipc.

    .venv/bin/python benchmarks/exchange.py                # about a minute on 2 shared cores
    .venv/bin/python benchmarks/exchange.py --bytes-only   # only the bytes table (optimizer state, fp32/bf16 wire)

For the MNIST MLP pair and the DCGAN-64 pair (one bundle = best G + best D, weights and buffers, fp32) it
prints: raw tensor bytes, bytes of the envelope on the wire (frames plus ZMTP framing) and the overhead
ratio; encode and decode time next to a plain memory copy of the same bytes; Lipizzaner's encoding
(torch.save of state_dict and Adam state -> base64 -> JSON) time and bytes; the per-exchange latency
(``publish`` here -> ``gather`` returns in a second process) over tcp and ipc; and the bytes moved into a
cell per generation on the 2x2 MNIST settings; and the bytes of one message with and without the optimizer
state (``exchange.optimizer_state``), dense and at 30 % density.
"""

from __future__ import annotations

import base64
import io
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from evogan.engine.codec import Codec  # noqa: E402
from evogan.individual import SPARSE, Individual  # noqa: E402
from evogan.transport import envelope  # noqa: E402
from evogan.transport.zmq import ZmqTransport  # noqa: E402

MB = 1e6


def mnist_pair() -> tuple[nn.Module, nn.Module]:
    g = nn.Sequential(
        nn.Linear(64, 256),
        nn.LeakyReLU(0.2),
        nn.Linear(256, 256),
        nn.LeakyReLU(0.2),
        nn.Linear(256, 784),
        nn.Tanh(),
    )
    d = nn.Sequential(
        nn.Linear(784, 256),
        nn.LeakyReLU(0.2),
        nn.Linear(256, 256),
        nn.LeakyReLU(0.2),
        nn.Linear(256, 1),
        nn.Sigmoid(),
    )
    return g, d


def dcgan_pair() -> tuple[nn.Module, nn.Module]:
    def up(cin: int, cout: int) -> list[nn.Module]:
        return [nn.ConvTranspose2d(cin, cout, 4, 2, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(True)]

    def down(cin: int, cout: int) -> list[nn.Module]:
        return [nn.Conv2d(cin, cout, 4, 2, 1, bias=False), nn.BatchNorm2d(cout), nn.LeakyReLU(0.2, True)]

    g = nn.Sequential(
        nn.ConvTranspose2d(100, 512, 4, 1, 0, bias=False), nn.BatchNorm2d(512), nn.ReLU(True),
        *up(512, 256), *up(256, 128), *up(128, 64),
        nn.ConvTranspose2d(64, 3, 4, 2, 1, bias=False), nn.Tanh(),
    )  # fmt: skip
    d = nn.Sequential(
        nn.Conv2d(3, 64, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, True),
        *down(64, 128), *down(128, 256), *down(256, 512),
        nn.Conv2d(512, 1, 4, 1, 0, bias=False), nn.Sigmoid(),
    )  # fmt: skip
    return g, d


def bundle(g: nn.Module, d: nn.Module) -> dict[str, torch.Tensor]:
    tensors = {f"G.{k}": v for k, v in g.state_dict().items()}
    tensors.update({f"D.{k}": v for k, v in d.state_dict().items()})
    return tensors


@dataclass
class Row:
    name: str
    tensors: dict[str, torch.Tensor]
    raw: int
    wire: int
    encode: tuple[float, float]
    decode: tuple[float, float]
    copy: tuple[float, float]
    lipizzaner_bytes: list[int]  # G, D
    lipizzaner_encode: tuple[float, float]
    lipizzaner_decode: tuple[float, float]


def ms(best_median: tuple[float, float], digits: int = 2) -> str:
    return f"{best_median[0] * 1e3:.{digits}f} / {best_median[1] * 1e3:.{digits}f} ms"


def zmtp_bytes(frames: list) -> int:
    """Frame bytes plus ZMTP 3 framing: 1 flag byte + 1 (short) or 8 (long) size bytes per frame."""
    return sum(len(f) + (2 if len(f) < 256 else 9) for f in frames)


def best_and_median(fn: Callable[[], object], reps: int) -> tuple[float, float]:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times), statistics.median(times)


def adam_for(net: nn.Module) -> torch.optim.Adam:
    """An Adam optimizer with populated moments, as Lipizzaner ships it."""
    opt = torch.optim.Adam(net.parameters(), lr=2e-4)
    for p in net.parameters():
        p.grad = torch.randn_like(p) * 1e-3
    opt.step()
    return opt


def lipizzaner_encode(net: nn.Module, opt: torch.optim.Optimizer) -> str:
    """state_encoder.py: torch.save -> bytes -> base64, for weights and optimizer state, in JSON."""

    def b64(obj: object) -> str:
        buf = io.BytesIO()
        torch.save(obj, buf)
        return base64.b64encode(buf.getvalue()).decode()

    body = {"id": 0, "parameters": b64(net.state_dict()), "learning_rate": 2e-4,
            "optimizer_state": b64(opt.state_dict()), "iteration": 1}  # fmt: skip
    return json.dumps([body])


def lipizzaner_decode(text: str) -> None:
    for item in json.loads(text):
        torch.load(io.BytesIO(base64.b64decode(item["parameters"])), weights_only=True)
        torch.load(io.BytesIO(base64.b64decode(item["optimizer_state"])), weights_only=True)


# ------------------------------------------------------------------------------------------ optimizer state
def trained_individual(role: str, net: nn.Module, density: float | None) -> Individual:
    """An individual after one Adam step; with ``density``, every weight matrix masked at random to that
    density (weights and moments zero where masked, as the sparse trainers keep them)."""
    optimizer = adam_for(net)
    masks: dict[str, torch.Tensor] = {}
    if density is not None:
        generator = torch.Generator().manual_seed(0)
        for name, param in net.named_parameters():
            if param.dim() >= 2:
                masks[name] = torch.rand(param.shape, generator=generator) < density
                with torch.no_grad():
                    param.mul_(masks[name])
                    for value in optimizer.state[param].values():
                        if value.shape == param.shape:
                            value.mul_(masks[name])
    return Individual(role=role, network=net, optimizer=optimizer, hyper={"lr": 2e-4}, origin=0, uid="0/X",  # type: ignore[arg-type]
                      extra={SPARSE: {"masks": masks}} if masks else {})  # fmt: skip


def codec_bytes(g: nn.Module, d: nn.Module, *, optimizer: bool, density: float | None, wire: str) -> int:
    """Bytes on the wire of one message as a cell's codec sends it with ``exchange.wire = wire``."""
    best = {role: trained_individual(role, net, density) for role, net in (("generator", g), ("discriminator", d))}
    codec = Codec(0, run_id="bench", recipe="r", optimizer_state=optimizer, max_bytes=1 << 30, wire=wire)
    return zmtp_bytes(codec.encode(best, generation=0, substep=0, sequence=0, incarnation=0))  # type: ignore[arg-type]


def optimizer_state_table() -> None:
    print("\n## Bytes per exchange with and without optimizer state (one message: best G + best D)\n")
    print("| pair | weights only | with Adam state (moments + step) | ratio "
          "| exchange.wire = bf16: weights only | bf16: with Adam state | bf16 / fp32 |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for name, make, density in (
        ("MNIST MLP", mnist_pair, None),
        ("MNIST MLP, weight matrices at 30 % density (sparse wire format)", mnist_pair, 0.3),
        ("DCGAN-64", dcgan_pair, None),
    ):
        sizes = {}
        for optimizer, wire in ((False, "fp32"), (True, "fp32"), (False, "bf16"), (True, "bf16")):
            torch.manual_seed(0)
            sizes[optimizer, wire] = codec_bytes(*make(), optimizer=optimizer, density=density, wire=wire)
        without, with_state = sizes[False, "fp32"], sizes[True, "fp32"]
        print(f"| {name} | {without / MB:.3f} MB | {with_state / MB:.3f} MB | {with_state / without:.2f}x "
              f"| {sizes[False, 'bf16'] / MB:.3f} MB | {sizes[True, 'bf16'] / MB:.3f} MB "
              f"| {sizes[False, 'bf16'] / without:.3f} |")  # fmt: skip


# ------------------------------------------------------------------------------------------ latency
CHILD = """
import sys, time
sys.path.insert(0, sys.argv[3])
from evogan.transport import envelope
from evogan.transport.zmq import ZmqTransport
t = ZmqTransport(ZmqTransport.Options(scheme=sys.argv[2]))
mine = t.bind([1])
print(mine[1], flush=True)
t.connect({0: sys.argv[1], 1: mine[1]}, {1: [0]})
t.wait_ready(60)
g = 0
while True:
    got = t.gather(1, [0], g, max_staleness=0, timeout=60)
    arrived = time.monotonic()
    if 0 not in got:
        break
    header = envelope.parse_header(got[0], max_bytes=1 << 30)
    t.publish(1, envelope.encode({}, run="bench", cell=1, generation=g, meta={"t": arrived}))
    if header["meta"].get("stop"):
        break
    g += 1
t.close()
"""


def latency(
    scheme: str, bundles: dict[str, dict[str, torch.Tensor]], reps: dict[str, int]
) -> dict[str, list[float]]:
    """Seconds from ``publish`` to the moment ``gather`` returns in the other process (same host, so
    CLOCK_MONOTONIC is shared)."""
    parent = ZmqTransport(ZmqTransport.Options(scheme=scheme))
    mine = parent.bind([0])
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, mine[0], scheme, str(ROOT)], stdout=subprocess.PIPE, text=True
    )
    results: dict[str, list[float]] = {}
    try:
        assert child.stdout is not None
        theirs = child.stdout.readline().strip()
        parent.connect({0: mine[0], 1: theirs}, {0: [1]})
        parent.wait_ready(60)
        g = 0
        for name, tensors in bundles.items():
            results[name] = []
            for _ in range(reps[name] + 1):  # the first exchange warms up both sides
                frames = envelope.encode(tensors, run="bench", cell=0, generation=g)
                start = time.monotonic()
                parent.publish(0, frames)
                reply = parent.gather(0, [1], g, max_staleness=0, timeout=60)[1]
                results[name].append(envelope.parse_header(reply, max_bytes=1 << 20)["meta"]["t"] - start)
                g += 1
            results[name] = results[name][1:]
        parent.publish(0, envelope.encode({}, run="bench", cell=0, generation=g, meta={"stop": True}))
        parent.gather(0, [1], g, max_staleness=0, timeout=30)
        child.wait(30)
    finally:
        child.kill()
        child.wait()
        if child.stdout:
            child.stdout.close()
        parent.close()
    return results


def measure(name: str, g: nn.Module, d: nn.Module, reps: int) -> Row:
    """Sizes and encode/decode/copy times of one bundle, and the same for Lipizzaner's encoding."""
    tensors = bundle(g, d)
    raw = sum(t.numel() * t.element_size() for t in tensors.values())
    frames = envelope.encode(tensors, run="bench", cell=0, generation=0)
    enc = best_and_median(lambda: envelope.encode(tensors, run="bench", cell=0, generation=0), reps)
    dec = best_and_median(lambda: envelope.decode(frames, max_bytes=1 << 30), reps)
    flat = torch.empty(raw, dtype=torch.uint8)
    src = torch.cat([t.reshape(-1).view(torch.uint8) for t in tensors.values()])
    cpy = best_and_median(lambda: flat.copy_(src), reps)
    opt_g, opt_d = adam_for(g), adam_for(d)
    texts = [lipizzaner_encode(g, opt_g), lipizzaner_encode(d, opt_d)]
    lreps = max(3, reps // 5)
    lenc = best_and_median(lambda: [lipizzaner_encode(g, opt_g), lipizzaner_encode(d, opt_d)], lreps)
    ldec = best_and_median(lambda: [lipizzaner_decode(t) for t in texts], lreps)
    return Row(name, tensors, raw, zmtp_bytes(frames), enc, dec, cpy, [len(t) for t in texts], lenc, ldec)


def main() -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    if "--bytes-only" in sys.argv:
        optimizer_state_table()
        return
    reps = {"MNIST MLP": 30, "DCGAN-64": 10}
    rows = [measure("MNIST MLP", *mnist_pair(), reps["MNIST MLP"]), measure("DCGAN-64", *dcgan_pair(), 10)]

    print("\n## Bundle (best G + best D, fp32, weights and buffers)\n")
    print(
        "| pair | raw tensor bytes | envelope on the wire | overhead | encode best/median "
        "| decode best/median | memcpy best/median | Lipizzaner JSON bytes | Lipizzaner encode "
        "| Lipizzaner decode |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        lbytes, overhead = sum(r.lipizzaner_bytes), 100 * (r.wire - r.raw) / r.raw
        print(
            f"| {r.name} | {r.raw / MB:.3f} MB | {r.wire / MB:.3f} MB | {overhead:.3f} % "
            f"| {ms(r.encode)} | {ms(r.decode)} | {ms(r.copy)} "
            f"| {lbytes / MB:.2f} MB ({lbytes / r.raw:.2f}x raw) "
            f"| {ms(r.lipizzaner_encode, 1)} | {ms(r.lipizzaner_decode, 1)} |"
        )

    print("\n## Per-exchange latency (publish -> gather returns in another process; min / median)\n")
    print("| pair | tcp 127.0.0.1 | ipc |")
    print("|---|---|---|")
    bundles = {r.name: r.tensors for r in rows}
    lat = {scheme: latency(scheme, bundles, reps) for scheme in ("tcp", "ipc")}
    for r in rows:
        cells = []
        for scheme in ("tcp", "ipc"):
            values = lat[scheme][r.name]
            med = statistics.median(values)
            cells.append(f"{ms((min(values), med), 1)} ({r.raw / med / 1e9:.2f} GB/s at the median)")
        print(f"| {r.name} | {' | '.join(cells)} |")

    mnist = rows[0]
    ours = 2 * mnist.wire
    g_json, d_json = mnist.lipizzaner_bytes
    theirs = 2 * (2 * g_json + d_json)  # per neighbour: GET all G, all D, best G (population 1)
    print("\n## Bytes into one cell per generation, 2x2 MNIST (2 distinct neighbours)\n")
    print(f"- evogan: 2 x one bundle (best G + best D, weights only) = {ours / MB:.2f} MB")
    print(
        "- original, measured here: 2 x (all G + all D + best G) JSON with Adam state = "
        f"{theirs / MB:.2f} MB ({theirs / ours:.1f}x)"
    )
    print(f"- original, figure from the issue: 27.5 MB ({27.5e6 / ours:.1f}x)")
    optimizer_state_table()


if __name__ == "__main__":
    main()
