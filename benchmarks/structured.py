"""Structured sparsity on a CPU: what it takes to turn ADAPT's saved FLOPs into seconds (issue 41, item 4).

Masked (unstructured) training runs the dense matmuls and multiplies the masks in after each step, so its
saved FLOPs stay on paper (RESULTS, "Seconds"). Sparsity at the neuron level removes whole rows and columns
of the weight matrices, which a dense kernel can skip by working on the active ones only. This script times
whole training steps of the MNIST MLP pair (G 64-h-h-784, D 784-h-h-1, LeakyReLU, BCE, Adam, batch 100: the
shape of ``problem.network.use = "mnist_mlp"``, without spectral norm) at width ``--hidden`` (640, the sparse
benchmark's), each step one D update on real and fake samples and one G update, in five forms:

- ``dense``: every neuron, no masks;
- ``masked``: weights masked at random to ``--density`` and the masks applied after every step (what
  evogan's sparse training does; the optimizer's moments are not masked here, so this is a lower bound);
- ``neuron, full optimizer``: ``k`` of the ``h`` hidden neurons of every hidden layer active, the forward
  and backward on the active rows and columns (``index_select``), the parameters and Adam's state kept at
  full size: the form that leaves every parameter shape (and so checkpoints, messages, stacking) as it is;
- ``neuron, compact optimizer``: the same, with the active block gathered into small leaf tensors each step
  and Adam stepping only them (state gathered and scattered back): what keeping full-size tensors but
  touching only the active ones costs;
- ``narrow``: a dense pair ``k`` wide, built that way (the limit: nothing inactive exists).

``k`` is chosen so the hidden layers' training FLOPs match ``--density`` of the dense pair's (a pair ``k``
wide), the comparison of equal FLOPs; every form runs the same number of steps on the same data, the rounds
interleaved so load hits all alike, and the table gives the median milliseconds per step and the ratio to
``narrow``. Usage:

    OMP_NUM_THREADS=1 nice -n 5 .venv/bin/python benchmarks/structured.py [--hidden 640] [--density 0.3] [--rounds 5]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

LATENT, PIXELS, BATCH = 64, 784, 100
Step = Callable[[], None]


def mlp(sizes: Sequence[int], generator: torch.Generator) -> list[nn.Linear]:
    layers = [nn.Linear(a, b) for a, b in itertools.pairwise(sizes)]
    with torch.no_grad():
        for layer in layers:
            bound = 1.0 / layer.in_features**0.5
            layer.weight.uniform_(-bound, bound, generator=generator)
            layer.bias.uniform_(-bound, bound, generator=generator)
    return layers


def forward(weights: Sequence[tuple[torch.Tensor, torch.Tensor]], x: torch.Tensor) -> torch.Tensor:
    for i, (weight, bias) in enumerate(weights):
        x = F.linear(x, weight, bias)
        if i < len(weights) - 1:
            x = F.leaky_relu(x, 0.2)
    return x


def sliced(layers: Sequence[nn.Linear], active: Sequence[torch.Tensor]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Each layer's weight and bias on the active neurons: rows of its own hidden output (every layer but
    the last), columns of the previous layer's (every layer but the first). ``index_select`` keeps the
    autograd link to the full-size parameters."""
    out = []
    for i, layer in enumerate(layers):
        weight, bias = layer.weight, layer.bias
        if i < len(layers) - 1:
            weight, bias = weight.index_select(0, active[i]), bias.index_select(0, active[i])
        if i > 0:
            weight = weight.index_select(1, active[i - 1])
        out.append((weight, bias))
    return out


def pair_step(
    g_weights: Callable[[], list[tuple[torch.Tensor, torch.Tensor]]],
    d_weights: Callable[[], list[tuple[torch.Tensor, torch.Tensor]]],
    g_update: Callable[[torch.Tensor], None],
    d_update: Callable[[torch.Tensor], None],
    real: torch.Tensor,
    generator: torch.Generator,
) -> Step:
    """One D update on real and fake samples, then one G update (the non-saturating loss)."""
    ones, zeros = torch.ones(BATCH, 1), torch.zeros(BATCH, 1)

    def step() -> None:
        z = torch.randn(BATCH, LATENT, generator=generator)
        d = d_weights()
        fake = torch.tanh(forward(g_weights(), z))
        loss = F.binary_cross_entropy_with_logits(forward(d, real), ones)
        d_update(loss + F.binary_cross_entropy_with_logits(forward(d, fake.detach()), zeros))
        loss = F.binary_cross_entropy_with_logits(forward(d_weights(), torch.tanh(forward(g_weights(), z))), ones)
        g_update(loss)

    return step


def adam_update(parameters: Sequence[torch.Tensor]) -> Callable[[torch.Tensor], None]:
    optimizer = torch.optim.Adam(parameters, lr=2e-4, betas=(0.5, 0.999))

    def update(loss: torch.Tensor) -> None:
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return update


def plain(layers: Sequence[nn.Linear]) -> Callable[[], list[tuple[torch.Tensor, torch.Tensor]]]:
    return lambda: [(layer.weight, layer.bias) for layer in layers]


def neurons(
    layers: Sequence[nn.Linear], active: Sequence[torch.Tensor]
) -> Callable[[], list[tuple[torch.Tensor, torch.Tensor]]]:
    return lambda: sliced(layers, active)


def dense_step(g: Sequence[nn.Linear], d: Sequence[nn.Linear], real: torch.Tensor, seed: int) -> Step:
    g_adam, d_adam = adam_update(parameters(g)), adam_update(parameters(d))
    return pair_step(plain(g), plain(d), g_adam, d_adam, real, torch.Generator().manual_seed(seed))


def compact_step(
    g: Sequence[nn.Linear], d: Sequence[nn.Linear], active: Sequence[torch.Tensor], real: torch.Tensor, seed: int
) -> Step:
    g_compact, d_compact = CompactAdam(g, active), CompactAdam(d, active)
    updates = (g_compact.update, d_compact.update)
    return pair_step(g_compact.weights, d_compact.weights, *updates, real, torch.Generator().manual_seed(seed))


def full_step(
    g: Sequence[nn.Linear], d: Sequence[nn.Linear], active: Sequence[torch.Tensor], real: torch.Tensor, seed: int
) -> Step:
    g_adam, d_adam = adam_update(parameters(g)), adam_update(parameters(d))
    return pair_step(neurons(g, active), neurons(d, active), g_adam, d_adam, real, torch.Generator().manual_seed(seed))


def parameters(layers: Sequence[nn.Linear]) -> list[torch.Tensor]:
    return [p for layer in layers for p in (layer.weight, layer.bias)]


class CompactAdam:
    """Adam on the active block only: each step gathers the active rows and columns of every parameter into
    small leaf tensors (and of Adam's moments), and after backward steps them and scatters them back."""

    def __init__(self, layers: Sequence[nn.Linear], active: Sequence[torch.Tensor]) -> None:
        self.layers, self.active = layers, active
        self.state = [(torch.zeros_like(p), torch.zeros_like(p)) for p in parameters(layers)]
        self.steps = 0
        self.leaves: list[torch.Tensor] = []

    def _where(self, i: int, is_weight: bool) -> tuple[torch.Tensor | slice, ...]:
        last = i == len(self.layers) - 1
        rows: torch.Tensor | slice = slice(None) if last else self.active[i]
        if not is_weight:
            return (rows,)
        cols: torch.Tensor | slice = slice(None) if i == 0 else self.active[i - 1]
        if isinstance(rows, torch.Tensor) and isinstance(cols, torch.Tensor):
            return (rows.unsqueeze(1), cols)
        return (rows, cols)

    def _places(self) -> list[tuple[torch.Tensor, tuple[torch.Tensor | slice, ...]]]:
        return [
            (p, self._where(i, j == 0))
            for i, layer in enumerate(self.layers)
            for j, p in enumerate((layer.weight, layer.bias))
        ]

    def weights(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        with torch.no_grad():
            self.leaves = [p[where].clone().requires_grad_() for p, where in self._places()]
        return [(self.leaves[2 * i], self.leaves[2 * i + 1]) for i in range(len(self.layers))]

    def update(self, loss: torch.Tensor) -> None:
        loss.backward()
        self.steps += 1
        beta1, beta2, lr, eps = 0.5, 0.999, 2e-4, 1e-8
        with torch.no_grad():
            for leaf, (p, where), (m, v) in zip(self.leaves, self._places(), self.state, strict=True):
                grad = leaf.grad
                assert grad is not None
                m_a, v_a = m[where].mul_(beta1).add_(grad, alpha=1 - beta1), v[where].mul_(beta2)
                v_a.addcmul_(grad, grad, value=1 - beta2)
                m[where], v[where] = m_a, v_a
                denominator = (v_a / (1 - beta2**self.steps)).sqrt_().add_(eps)
                p[where] = leaf.detach() - lr / (1 - beta1**self.steps) * m_a / denominator


def builds(hidden: int, density: float, narrow: int, seed: int) -> dict[str, Step]:
    """Each form's step, from the same initial draws where the shapes agree."""
    real = torch.rand(BATCH, PIXELS, generator=torch.Generator().manual_seed(seed)) * 2 - 1
    draw = torch.Generator().manual_seed(seed + 1)

    def pair(width: int) -> tuple[list[nn.Linear], list[nn.Linear]]:
        sizes = (LATENT, width, width, PIXELS), (PIXELS, width, width, 1)
        return mlp(sizes[0], torch.Generator().manual_seed(seed)), mlp(sizes[1], torch.Generator().manual_seed(seed))

    g, d = pair(hidden)
    masks = [(layer.weight, torch.rand(layer.weight.shape, generator=draw) < density) for layer in (*g, *d)]

    def masked_update(update: Callable[[torch.Tensor], None]) -> Callable[[torch.Tensor], None]:
        def run(loss: torch.Tensor) -> None:
            update(loss)
            with torch.no_grad():
                for weight, mask in masks:
                    weight.mul_(mask)

        return run

    g_adam, d_adam = masked_update(adam_update(parameters(g))), masked_update(adam_update(parameters(d)))
    active = [torch.randperm(hidden, generator=draw)[:narrow].sort().values for _ in range(2)]
    return {
        "dense": dense_step(*pair(hidden), real, seed),
        "masked": pair_step(plain(g), plain(d), g_adam, d_adam, real, torch.Generator().manual_seed(seed)),
        "neuron, full optimizer": full_step(*pair(hidden), active, real, seed),
        "neuron, compact optimizer": compact_step(*pair(hidden), active, real, seed),
        "narrow": dense_step(*pair(narrow), real, seed),
    }


def compact_matches_full(hidden: int, narrow: int, steps: int = 5) -> float:
    """The largest difference between the two neuron forms' parameters after ``steps`` steps from the same
    draws: the compact optimizer must compute what Adam over the full-size tensors computes."""
    real = torch.rand(BATCH, PIXELS, generator=torch.Generator().manual_seed(7)) * 2 - 1
    active = [torch.randperm(hidden, generator=torch.Generator().manual_seed(8))[:narrow].sort().values] * 2
    pairs = [
        (mlp((LATENT, hidden, hidden, PIXELS), torch.Generator().manual_seed(9)),
         mlp((PIXELS, hidden, hidden, 1), torch.Generator().manual_seed(9)))
        for _ in range(2)
    ]  # fmt: skip
    full, compact = full_step(*pairs[0], active, real, 10), compact_step(*pairs[1], active, real, 10)
    for _ in range(steps):
        full()
        compact()
    ours, theirs = (parameters(g) + parameters(d) for g, d in pairs)
    return max(float((a - b).detach().abs().max()) for a, b in zip(ours, theirs, strict=True))


def equal_flops_width(hidden: int, density: float) -> int:
    """The width whose dense pair's weights (so training FLOPs) are closest to ``density`` of the ``hidden``-
    wide pair's."""

    def weights(h: int) -> int:
        return LATENT * h + h * h + h * PIXELS + PIXELS * h + h * h + h

    target = density * weights(hidden)
    return min(range(1, hidden + 1), key=lambda h: abs(weights(h) - target))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hidden", type=int, default=640, help="the full pair's width (default 640)")
    parser.add_argument("--density", type=float, default=0.3, help="share of the dense pair's FLOPs (default 0.3)")
    parser.add_argument("--steps", type=int, default=40, help="timed steps per form and round (default 40)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds; the median is reported (default 5)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    narrow = equal_flops_width(args.hidden, args.density)
    difference = compact_matches_full(args.hidden, narrow)
    forms = builds(args.hidden, args.density, narrow, seed=1)
    for step in forms.values():  # warm-up: allocations, Adam's state
        for _ in range(3):
            step()
    times: dict[str, list[float]] = {name: [] for name in forms}
    for _ in range(args.rounds):
        for name, step in forms.items():
            started = time.perf_counter()
            for _ in range(args.steps):
                step()
            times[name].append(1000 * (time.perf_counter() - started) / args.steps)
    base = statistics.median(times["narrow"])
    print(f"MNIST MLP pair, width {args.hidden}; {args.density:.0%} of its FLOPs = {narrow} neurons a hidden layer;")
    print(f"batch {BATCH}, {args.threads} thread(s), {args.rounds} rounds of {args.steps} steps, median ms per step")
    print(f"the two neuron forms' parameters after 5 steps differ by at most {difference:.1e}\n")
    print("| form | active hidden neurons | ms / step (median) | min - max over rounds | / narrow |")
    print("|---|---|---|---|---|")
    for name, values in times.items():
        neurons = args.hidden if name in ("dense", "masked") else narrow
        note = f"{neurons} (weights at {args.density:.0%})" if name == "masked" else str(neurons)
        median = statistics.median(values)
        print(f"| {name} | {note} | {median:.1f} | {min(values):.1f} - {max(values):.1f} | {median / base:.2f} |")


if __name__ == "__main__":
    main()
