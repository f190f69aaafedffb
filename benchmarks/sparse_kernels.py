"""Do sparse kernels make masked GAN layers faster on a CPU? Dense vs CSR / COO / 2:4 at 5-50 % density.

The question ADAPT leaves open (its savings are FLOPs on paper; adapt.md section 7). For the MNIST MLP
layers (G 64xh, hxh, hx784; D 784xh, hxh; ``--hidden`` h, default 256) at batch 100, and one DCGAN conv (conv32's D
64->128, 4x4 stride 2, on 16x16 maps, as im2col + sparse matmul), each weight is masked at random to the
given density and timed as:

- ``dense``: ``F.linear(x, w)`` with the masked weight (what evogan does: simulated sparsity);
- ``csr`` / ``coo``: ``torch.sparse.mm(w_sparse, x.T).T``, format built once (``+conv``: rebuilt from the
  dense weight every call, as training must after each optimizer step changes the values);
- ``2:4``: ``torch.sparse.to_sparse_semi_structured`` (reported if unsupported on this device);

forward, and forward + backward (gradients for the input and for the weight's active values, as
training needs). Median of ``torch.utils.benchmark.Timer.blocked_autorange`` at 1 and 2 threads. Usage:

    nice -n 5 .venv/bin/python benchmarks/sparse_kernels.py [--threads 1 2] [--min-time 0.2]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.benchmark import Timer


def linear_layers(hidden: int) -> tuple[tuple[str, int, int], ...]:
    """The MNIST MLP pair's layers at width ``hidden``: (name, in, out), the weight is (out, in)."""
    h = hidden
    return (
        (f"G 64x{h}", 64, h), (f"G {h}x{h}", h, h), (f"G {h}x784", h, 784),
        (f"D 784x{h}", 784, h), (f"D {h}x{h}", h, h),
    )  # fmt: skip

DENSITIES = (0.05, 0.1, 0.2, 0.3, 0.5)
BATCH = 100


def masked(shape: tuple[int, ...], density: float, generator: torch.Generator) -> torch.Tensor:
    weight = torch.randn(shape, generator=generator)
    keep = torch.rand(shape, generator=generator) < density
    return weight * keep


def median_ms(fn: Callable[[], Any], threads: int, min_time: float) -> float:
    timer = Timer(stmt="fn()", globals={"fn": fn}, num_threads=threads)
    return timer.blocked_autorange(min_run_time=min_time).median * 1e3


def linear_candidates(weight: torch.Tensor, x: torch.Tensor, backward: bool) -> dict[str, Callable[[], Any]]:
    """Callables computing y = x @ weight.T in each format (with backward when asked)."""
    out: dict[str, Callable[[], Any]] = {}
    csr, coo = weight.to_sparse_csr(), weight.to_sparse().coalesce()
    if not backward:
        out["dense"] = lambda: F.linear(x, weight)
        out["csr"] = lambda: torch.sparse.mm(csr, x.T).T
        out["csr+conv"] = lambda: torch.sparse.mm(weight.to_sparse_csr(), x.T).T
        out["coo"] = lambda: torch.sparse.mm(coo, x.T).T
        return out
    xg = x.clone().requires_grad_(True)
    wd = weight.clone().requires_grad_(True)
    csr_g = csr.clone().requires_grad_(True)
    coo_g = coo.clone().requires_grad_(True)

    def dense_step() -> None:
        F.linear(xg, wd).sum().backward()
        xg.grad = wd.grad = None

    def sparse_step(w: torch.Tensor) -> Callable[[], None]:
        def step() -> None:
            torch.sparse.mm(w, xg.T).T.sum().backward()
            xg.grad = w.grad = None

        return step

    out["dense"] = dense_step
    out["csr"] = sparse_step(csr_g)
    out["coo"] = sparse_step(coo_g)
    return out


def semi_structured_note(weight: torch.Tensor, x: torch.Tensor) -> str:
    """Whether 2:4 semi-structured sparsity runs here; the error text when it does not."""
    try:
        pruned = weight.clone()
        groups = pruned.view(-1, 4)
        keep = groups.abs().topk(2, dim=1).indices
        mask = torch.zeros_like(groups, dtype=torch.bool).scatter_(1, keep, True)
        pruned = (groups * mask).view_as(weight)
        semi = torch.sparse.to_sparse_semi_structured(pruned)
        F.linear(x, semi)
        return "runs"
    except Exception as error:  # any failure is the finding
        return f"unsupported: {type(error).__name__}: {str(error).splitlines()[0][:150]}"


def bench_linear(
    layers: tuple[tuple[str, int, int], ...], threads: list[int], min_time: float, rows: list[dict[str, Any]]
) -> None:
    generator = torch.Generator().manual_seed(0)
    for name, fan_in, fan_out in layers:
        x = torch.randn(BATCH, fan_in, generator=generator)
        for density in DENSITIES:
            weight = masked((fan_out, fan_in), density, generator)
            for backward in (False, True):
                try:
                    candidates = linear_candidates(weight, x, backward)
                except RuntimeError as error:
                    print(f"{name} d={density} backward={backward}: {error}", flush=True)
                    continue
                for n in threads:
                    row = {"layer": name, "density": density, "pass": "fwd+bwd" if backward else "fwd",
                           "threads": n}
                    for method, fn in candidates.items():
                        try:
                            row[method] = median_ms(fn, n, min_time)
                        except RuntimeError as error:
                            row[method] = float("nan")
                            print(f"{name} {method} backward={backward}: {str(error)[:120]}", flush=True)
                    rows.append(row)
                    print(fmt_row(row), flush=True)


def bench_conv(threads: list[int], min_time: float, rows: list[dict[str, Any]]) -> None:
    """conv32's second D conv (64 -> 128, 4x4, stride 2, 16x16 -> 8x8) as dense conv vs im2col + CSR."""
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(BATCH, 64, 16, 16, generator=generator)
    for density in DENSITIES:
        weight = masked((128, 64, 4, 4), density, generator)
        csr = weight.reshape(128, -1).to_sparse_csr()

        def dense(weight: torch.Tensor = weight) -> torch.Tensor:
            return F.conv2d(x, weight, stride=2, padding=1)

        def im2col_csr(csr: torch.Tensor = csr) -> torch.Tensor:
            cols = F.unfold(x, 4, padding=1, stride=2)  # (N, 64*16, 64)
            flat = cols.transpose(0, 1).reshape(cols.shape[1], -1)  # (1024, N*64)
            out = torch.sparse.mm(csr, flat)  # (128, N*64)
            return out.reshape(128, BATCH, 8, 8).transpose(0, 1)

        def im2col_dense(weight: torch.Tensor = weight) -> torch.Tensor:
            cols = F.unfold(x, 4, padding=1, stride=2)
            return (weight.reshape(128, -1) @ cols).reshape(BATCH, 128, 8, 8)

        assert torch.allclose(dense(), im2col_csr(), atol=1e-3) and torch.allclose(dense(), im2col_dense(), atol=1e-3)
        for n in threads:
            row = {"layer": "conv 64->128 4x4 s2 16x16", "density": density, "pass": "fwd", "threads": n,
                   "dense": median_ms(dense, n, min_time), "im2col": median_ms(im2col_dense, n, min_time),
                   "csr": median_ms(im2col_csr, n, min_time)}
            rows.append(row)
            print(fmt_row(row), flush=True)


def fmt_row(row: dict[str, Any]) -> str:
    methods = [k for k in row if k not in ("layer", "density", "pass", "threads")]
    cells = " ".join(f"{m}={row[m]:.3f}" for m in methods)
    return f"{row['layer']:<26} d={row['density']:.2f} {row['pass']:<7} t={row['threads']} {cells} ms"


def table(rows: list[dict[str, Any]], layers: tuple[tuple[str, int, int], ...]) -> str:
    """Markdown: per layer / pass / threads, dense ms and each sparse method's speed-up at each density."""
    lines = [
        "| layer | pass | thr | dense ms | " + " | ".join(f"{d:.0%}" for d in DENSITIES) + " | crossover |",
        "|---|---|---|---|" + "---|" * len(DENSITIES) + "---|",
    ]
    keys = sorted({(r["layer"], r["pass"], r["threads"]) for r in rows}, key=lambda k: (
        [name for name, *_ in layers].index(k[0]) if k[0].startswith(("G", "D")) else 99, k[1], k[2]))
    for layer, pas, n in keys:
        group = {r["density"]: r for r in rows if (r["layer"], r["pass"], r["threads"]) == (layer, pas, n)}
        methods = [m for m in group[DENSITIES[0]] if m not in ("layer", "density", "pass", "threads", "dense")]
        dense_ms = sum(group[d]["dense"] for d in DENSITIES) / len(DENSITIES)
        cells = []
        for d in DENSITIES:
            cells.append(" / ".join(f"{group[d]['dense'] / group[d][m]:.2f}x" for m in methods))
        wins = 0.0  # the highest density up to which CSR beats dense at every tested density
        for d in DENSITIES:
            if not group[d]["dense"] / group[d]["csr"] > 1.0:
                break
            wins = d
        crossover = f"csr faster up to {wins:.0%}" if wins else "csr never faster"
        lines.append(f"| {layer} | {pas} ({'/'.join(methods)}) | {n} | {dense_ms:.3f} | " + " | ".join(cells)
                     + f" | {crossover} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--min-time", type=float, default=0.2, help="seconds per blocked_autorange")
    parser.add_argument("--no-conv", action="store_true")
    parser.add_argument("--hidden", type=int, default=256, help="width of the MLP pair (benchmarks/sparse.py: 640)")
    args = parser.parse_args()
    layers = linear_layers(args.hidden)
    print("command:", " ".join(["python", *sys.argv]), f"torch {torch.__version__}", flush=True)
    generator = torch.Generator().manual_seed(2)
    print("2:4 semi-structured on CPU:", semi_structured_note(masked((256, 256), 0.5, generator),
                                                            torch.randn(BATCH, 256, generator=generator)))
    rows: list[dict[str, Any]] = []
    bench_linear(layers, args.threads, args.min_time, rows)
    if not args.no_conv:
        bench_conv(args.threads, args.min_time, rows)
    print()
    print("Speed-up over dense (dense ms / method ms; > 1 means the sparse kernel is faster):")
    print()
    print(table(rows, layers))


if __name__ == "__main__":
    main()
