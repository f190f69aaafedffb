"""Sparse GAN training: masks, dynamic sparse training, the balance ratio, FLOPs and the sparse wire format.

The controllers built on this library (``static``, ``set``, ``rigl``, ``adapt-relax``, ``adapt-strict``)
live in :mod:`evogan_gan.sparsity`; this package is what a third-party controller reuses.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from evogan_gan.sparse.balance import balance_ratio, sample_ratio, window_size
    from evogan_gan.sparse.dst import cosine_fraction, grow, prune_and_grow, prune_magnitude, resize
    from evogan_gan.sparse.flops import NetworkFlops, count_forward_flops
    from evogan_gan.sparse.masks import (
        active_count,
        apply_masks,
        layer_counts,
        layer_densities,
        maskable_parameters,
        overall_density,
        random_masks,
    )
    from evogan_gan.sparse.state import validate_sparse_state
    from evogan_gan.sparse.wire import decode_sparse, encode_sparse

# Where each name lives: imported on first use (PEP 562), so that importing a controller's options
# (evogan_gan.sparse.options, for `evogan validate`) does not import torch through this package.
_HOMES = {
    "balance": ("balance_ratio", "sample_ratio", "window_size"),
    "dst": ("cosine_fraction", "grow", "prune_and_grow", "prune_magnitude", "resize"),
    "flops": ("NetworkFlops", "count_forward_flops"),
    "masks": (
        "active_count",
        "apply_masks",
        "layer_counts",
        "layer_densities",
        "maskable_parameters",
        "overall_density",
        "random_masks",
    ),
    "state": ("validate_sparse_state",),
    "wire": ("decode_sparse", "encode_sparse"),
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}


def __getattr__(name: str) -> Any:
    if name not in _HOME_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOME_OF[name]}"), name)


__all__ = [
    "NetworkFlops",
    "active_count",
    "apply_masks",
    "balance_ratio",
    "cosine_fraction",
    "count_forward_flops",
    "decode_sparse",
    "encode_sparse",
    "grow",
    "layer_counts",
    "layer_densities",
    "maskable_parameters",
    "overall_density",
    "prune_and_grow",
    "prune_magnitude",
    "random_masks",
    "resize",
    "sample_ratio",
    "validate_sparse_state",
    "window_size",
]
