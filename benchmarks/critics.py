"""Every generator against every critic of a run: why a grid's generators get worse with training (issue 35).

For each checkpoint generation of each run directory, each cell's best generator draws the same noise, and
every cell's best discriminator judges the samples: the share it calls real (logit > 0), the
non-saturating generator loss, and the norm of that loss's gradient on the generator's weights with its
cosine to the gradient from the generator's own critic. Critics are grouped as the cell's own, its
neighbours' (the ones it trains against under ``g_neighbourhood``) and the others. One JSON line per
(run, generation) in ``benchmarks/logs/critics/<commit>.jsonl``; ``--summarise`` prints the table again.

    .venv/bin/python benchmarks/critics.py RUN_DIR [RUN_DIR ...] --generations 100 200 400
    .venv/bin/python benchmarks/critics.py --summarise
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import LOGS, append_log, git_commit, log_path, machine, read_logs

import evogan
from evogan.engine.run import build_topology

NAME = "critics"
GROUPS = ("own", "neighbour", "other")


def judge(run_dir: Path, generation: int, samples: int) -> dict[str, Any]:
    """Each generator against each critic at ``generation``: the figures of every (G, D) pair."""
    trained = evogan.load(run_dir, generation=generation, device="cpu")
    topology = trained.topology or build_topology(trained.recipe)
    cells = trained.cells
    noise = trained.problem.noise(samples, torch.Generator().manual_seed(0))
    pairs = []
    for i, cell in enumerate(cells):
        g = cell.best("generator").network
        neighbours = set(topology.neighbours(i)) - {i}
        gradients = []
        for j, other in enumerate(cells):
            d = other.best("discriminator").network
            g.zero_grad()
            logits = d(g(noise)).float().reshape(-1)
            loss = F.softplus(-logits).mean()  # the non-saturating generator loss
            loss.backward()
            gradients.append(torch.cat([p.grad.reshape(-1) for p in g.parameters() if p.grad is not None]))
            group = "own" if j == i else "neighbour" if j in neighbours else "other"
            real = (logits > 0).float().mean().item()
            pairs.append({"g": i, "d": j, "group": group, "loss": loss.item(), "real": real})
        for pair in pairs[-len(cells) :]:
            gradient = gradients[pair["d"]]
            pair["grad_norm"] = gradient.norm().item()
            pair["cos_own"] = F.cosine_similarity(gradient, gradients[i], dim=0).item()
    return {"pairing": trained.recipe.choices["problem"].options.pairing.use, "cells": len(cells), "pairs": pairs}


def by_group(pairs: Sequence[dict[str, Any]]) -> dict[str, dict[str, float]]:
    out = {}
    for group in GROUPS:
        chosen = [p for p in pairs if p["group"] == group]
        if chosen:
            out[group] = {k: statistics.fmean(p[k] for p in chosen) for k in ("real", "loss", "grad_norm", "cos_own")}
    return out


def table(records: Sequence[dict[str, Any]]) -> str:
    lines = [
        "| run | pairing | seed | generation | critics | judged real | G loss | gradient norm | cos to own |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for record in records:
        for group, figures in by_group(record["pairs"]).items():
            lines.append(
                f"| {record['run']} | {record['pairing']} | {record['seed']} | {record['generation']} | {group} | "
                f"{figures['real']:.2f} | {figures['loss']:.3f} | {figures['grad_norm']:.3f} | "
                f"{figures['cos_own']:.2f} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("runs", type=Path, nargs="*", help="run directories with checkpoints")
    parser.add_argument("--generations", type=int, nargs="+", help="checkpoint generations (default: every kept)")
    parser.add_argument("--samples", type=int, default=500)
    parser.add_argument("--log-dir", type=Path, default=LOGS)
    parser.add_argument("--summarise", type=Path, nargs="*", help="print the table of these logs and stop")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.summarise is not None:
        print(table([r for r in read_logs(args.summarise or [args.log_dir / NAME]) if r.get("script") == NAME]))
        return
    log, records = log_path(NAME, args.log_dir), []
    commit, dirty = git_commit()
    for run_dir in args.runs:
        kept = evogan.load(run_dir, device="cpu")
        for generation in args.generations or kept.generations:
            record = {
                "script": NAME,
                "run": run_dir.name,
                "run_dir": str(run_dir),
                "seed": kept.recipe.run.seed,
                "generation": generation,
                **judge(run_dir, generation, args.samples),
                "commit": commit,
                "dirty": dirty,
                "machine": machine(),
                "scored": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
            append_log(log, record)
            records.append(record)
    print(table(records))
    print(f"\nlog: {log}")


if __name__ == "__main__":
    main()
