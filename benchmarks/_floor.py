"""The floor under evogan's training phase: a plain PyTorch loop doing exactly a cell's arithmetic.

Same networks (built by the recipe's problem, so the same architecture and initialisation), loss (BCE),
optimizer (Adam, fused, the problem's betas and learning rate), batch, data, steps and thread count; no
engine: no individuals, pairing, mutation or hooks. Two variants of the discriminator step: ``separate``
(D on the real batch, then on the fake one, as evogan's reference path) and ``joint`` (one forward of both
batches concatenated, valid only without batch-dependent layers). ``precision`` ``bf16`` autocasts the
forwards as ``run.precision`` does (losses on float32 logits), the plain way: ``torch.autocast`` around them.
"""

from __future__ import annotations

import contextlib
import time

import torch
import torch.nn.functional as F
from evogan_gan.problem import GanProblem


def floor_generation(
    problem: GanProblem,
    *,
    batches: int,
    d_skip: int,
    joint: bool,
    seed: int,
    warmup: int = 10,
    precision: str = "fp32",
) -> float:
    """Seconds for ``batches`` steps (G every step, D every ``d_skip + 1``-th), after ``warmup`` steps."""

    def forwards() -> contextlib.AbstractContextManager[object]:
        if precision == "fp32":
            return contextlib.nullcontext()
        return torch.autocast("cpu", dtype={"bf16": torch.bfloat16, "fp16": torch.float16}[precision])

    options = problem.options
    data: torch.Tensor = problem.source.samples  # type: ignore[attr-defined]  # a TensorSource
    latent = problem.networks.latent_shape()
    size = options.batch_size
    generator = torch.Generator().manual_seed(seed)
    g_net = problem.create("generator", generator=generator)
    d_net = problem.create("discriminator", generator=generator)
    adam = {"lr": options.learning_rate, "betas": options.betas, "fused": True}
    g_opt = torch.optim.Adam(g_net.parameters(), **adam)
    d_opt = torch.optim.Adam(d_net.parameters(), **adam)
    ones, zeros = torch.ones(size), torch.zeros(size)
    per_pass = data.shape[0] // size
    order = torch.randperm(data.shape[0], generator=generator)
    started = 0.0
    for step in range(warmup + batches):
        if step == warmup:
            started = time.perf_counter()
        if step % per_pass == 0:
            order = torch.randperm(data.shape[0], generator=generator)
        start = (step % per_pass) * size
        real = data.index_select(0, order[start : start + size])
        z = torch.randn(size, *latent, generator=generator)
        d_net.requires_grad_(False)
        g_opt.zero_grad(set_to_none=True)
        with forwards():
            logits = d_net(g_net(z)).float()
        F.binary_cross_entropy_with_logits(logits, ones).backward()
        g_opt.step()
        d_net.requires_grad_(True)
        if step % (d_skip + 1):
            continue
        z = torch.randn(size, *latent, generator=generator)
        with torch.no_grad(), forwards():
            fake = g_net(z).float()
        d_opt.zero_grad(set_to_none=True)
        with forwards():
            if joint:
                real_logits, fake_logits = d_net(torch.cat((real, fake))).float().split(size)
            else:
                real_logits, fake_logits = d_net(real).float(), d_net(fake).float()
        loss = F.binary_cross_entropy_with_logits(real_logits, ones)
        loss = loss + F.binary_cross_entropy_with_logits(fake_logits, zeros)
        loss.backward()
        d_opt.step()
    return time.perf_counter() - started
