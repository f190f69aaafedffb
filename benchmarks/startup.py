"""Start-up time of the quick commands (``--help``, ``validate``, ``plugins``, ``components``).

    nice -n 15 .venv/bin/python benchmarks/startup.py                 # 7 repeats per command
    nice -n 15 .venv/bin/python benchmarks/startup.py --repeats 11 --importtime
    nice -n 15 .venv/bin/python benchmarks/startup.py --networks      # building networks instead

Each command runs in a fresh interpreter (``python -m evogan ...``), as a user's shell would start it; the
table gives the median, minimum and maximum wall seconds and whether torch ended up imported (checked in a
separate run that prints ``sys.modules``). ``--importtime`` adds, per command, the cumulative import time
``python -X importtime`` reports for the packages that matter (evogan itself, torch, numpy, pydantic...),
which says where the time goes. ``python -m`` puts the working directory first on ``sys.path``: to time
another checkout, run the script from that checkout's directory, with its ``PYTHONPATH``.

``--networks`` times instead what a run pays to build its networks (issue 39): in a fresh interpreter with
torch already imported, the first and the second build of each network below, and whether building
imported ``torch._dynamo`` (the meta device's operations do).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMANDS: dict[str, list[str]] = {
    "--help": ["--help"],
    "validate toy-ring": ["validate", str(ROOT / "recipes" / "toy-ring.toml")],
    "validate mnist": ["validate", str(ROOT / "recipes" / "mnist.toml")],
    "plugins": ["plugins"],
    "components": ["components"],
}
NOTABLE = ("evogan", "torch", "numpy", "pydantic", "click", "rich", "pluggy", "deap.tools", "zmq", "matplotlib")
PROBE = (
    "import sys, runpy\n"
    "sys.argv = ['evogan', *sys.argv[1:]]\n"
    "try:\n"
    "    runpy.run_module('evogan', run_name='__main__')\n"
    "except SystemExit:\n"
    "    pass\n"
    "print('TORCH', 'torch' in sys.modules, file=sys.stderr)\n"
)


# label: (module, class, options, sample shape)
NETWORKS: dict[str, tuple[str, str, dict[str, object], tuple[int, ...]]] = {
    "mnist_mlp, the demo's (hidden 384, spectral norm)": (
        "evogan_gan.image_networks", "MnistMlp", {"hidden": 384, "spectral_norm": True}, (1, 28, 28)
    ),
    "sngan32 (spectral norm on 8 layers)": ("evogan_gan.sngan", "Sngan32", {}, (3, 32, 32)),
}
BUILD = (
    "import importlib, json, sys, time, torch\n"
    "module, name, options, shape = json.loads(sys.argv[1])\n"
    "cls = getattr(importlib.import_module(module), name)\n"
    "networks = cls(cls.Options(**options))\n"
    "out = {}\n"
    "for label, role in (('first D', 'discriminator'), ('second D', 'discriminator'), ('first G', 'generator')):\n"
    "    started = time.perf_counter()\n"
    "    networks.build(role, tuple(shape), generator=torch.Generator().manual_seed(0))\n"
    "    out[label] = time.perf_counter() - started\n"
    "out['dynamo'] = 'torch._dynamo' in sys.modules\n"
    "print(json.dumps(out))\n"
)


def build_times(spec: tuple[str, str, dict[str, object], tuple[int, ...]]) -> dict[str, float]:
    """Seconds of the first and second discriminator build and the first generator build, in a fresh
    interpreter, and whether ``torch._dynamo`` ended up imported."""
    done = subprocess.run(
        [sys.executable, "-c", BUILD, json.dumps(spec)], capture_output=True, text=True, check=True
    )
    result: dict[str, float] = json.loads(done.stdout)
    return result


def networks(repeats: int) -> None:
    print("\n| network | first D s | second D s | first G s | torch._dynamo imported |  (median of fresh interpreters)")
    print("|---|---|---|---|---|")
    for label, spec in NETWORKS.items():
        runs = [build_times(spec) for _ in range(repeats)]
        keys = ("first D", "second D", "first G")
        cells = " | ".join(f"{statistics.median(r[key] for r in runs):.3f}" for key in keys)
        print(f"| {label} | {cells} | {'yes' if any(r['dynamo'] for r in runs) else 'no'} |")


def wall(args: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "evogan", *args], check=True, capture_output=True)
    return time.perf_counter() - started


def imports_torch(args: list[str]) -> bool:
    done = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, check=True)
    return "TORCH True" in done.stderr


def import_costs(args: list[str]) -> dict[str, float]:
    """Cumulative milliseconds ``-X importtime`` reports for the packages that matter at start-up."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "evogan", *args], capture_output=True, text=True, check=True
    )
    costs: dict[str, float] = {}
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cumulative, name = (part.strip() for part in line.removeprefix("import time:").split("|"))
        if name in NOTABLE:
            costs[name] = max(costs.get(name, 0.0), int(cumulative) / 1000)
    return costs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--importtime", action="store_true", help="where the import time goes, per command")
    parser.add_argument("--networks", action="store_true", help="time building networks instead (issue 39)")
    args = parser.parse_args()
    print(f"load before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; python {sys.version.split()[0]}")
    if args.networks:
        networks(args.repeats)
        print(f"\nload after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        return
    wall(["--help"])  # warm the file cache once
    print("\n| command | median s | min s | max s | torch imported |")
    print("|---|---|---|---|---|")
    for command in COMMANDS.values():
        times = [wall(command) for _ in range(args.repeats)]
        print(
            f"| `evogan {' '.join(command).replace(str(ROOT) + '/', '')}` | {statistics.median(times):.2f} "
            f"| {min(times):.2f} | {max(times):.2f} | {'yes' if imports_torch(command) else 'no'} |"
        )
    if args.importtime:
        print(f"\n| command | {' | '.join(NOTABLE)} |  (cumulative import ms, -X importtime; - = not imported)")
        print("|---|" + "---|" * len(NOTABLE))
        for label, command in COMMANDS.items():
            costs = import_costs(command)
            cells = " | ".join(f"{costs[name]:.0f}" if name in costs else "-" for name in NOTABLE)
            print(f"| {label} | {cells} |")
    print(f"\nload after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
