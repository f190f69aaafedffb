"""The GAN mixture as one module for ``evogan export``: noise and a uniform number in, samples out.

Row ``i`` of the output is ``G_k(z[i])`` where ``k`` is the bucket ``u[i]`` falls in among the cumulative
mixture weights: with ``z`` standard normal and ``u`` uniform on [0, 1), a draw from the ensemble (each
sample's generator drawn independently; evogan's own ``exact_proportion`` sampling instead fixes how many
samples each generator gives). Every generator runs on every row and the chosen row is kept: a batch
costs ``len(generators)`` forward passes, so that the module has no data-dependent shapes and
``torch.export`` can take it with any batch size.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from torch import nn


class MixtureSampler(nn.Module):
    edges: torch.Tensor

    def __init__(self, generators: Sequence[nn.Module], weights: Sequence[float]) -> None:
        super().__init__()
        self.generators = nn.ModuleList(copy.deepcopy(network).cpu().eval() for network in generators)
        self.generators.requires_grad_(False)  # a sampler: its outputs need no graph
        # The upper edge of every bucket but the last; the last takes what rounding leaves up to 1.
        self.register_buffer("edges", edges(weights)[:-1].clone())

    def forward(self, z: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        choice = torch.bucketize(u, self.edges, right=True)
        outputs = torch.stack([network(z) for network in self.generators])
        return outputs[choice, torch.arange(z.shape[0])]


def edges(weights: Sequence[float]) -> torch.Tensor:
    """Cumulative weights in float32, as the exported module compares them."""
    return torch.cumsum(torch.tensor(list(weights), dtype=torch.float32), 0)


def uniform_for(choice: torch.Tensor, weights: Sequence[float]) -> torch.Tensor:
    """For each row's generator index, the middle of its bucket: a ``u`` that picks exactly that one."""
    upper = edges(weights)
    lower = torch.cat([torch.zeros(1), upper[:-1]])
    return ((lower + upper) / 2)[choice]


__all__ = ["MixtureSampler", "edges", "uniform_for"]
