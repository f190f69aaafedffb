"""Theoretical training FLOPs of masked networks (adapt.md section 5), counted as the reference does.

Per-sample forward cost comes once from forward hooks on a probe batch: each layer's weight term (times its density
when masked; a ConvTranspose, which the reference skips, scatters a kernel per input pixel) plus dense biases and
affine norms. Training follows RigL/ADAPT: backward = 2 x forward, so a trained network costs 3 x, one that only
passes gradients 2 x; a D step trains on the real batch and as many fakes (the reference under-weights D). Mask
updates, EMA and evaluation are not counted; balance-ratio forwards have a total of their own.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from evogan_gan.sparse.masks import MASKABLE_TYPES, weight_name

_CONV_TRANSPOSE = (nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)
_NORMS = (
    nn.BatchNorm1d,
    nn.BatchNorm2d,
    nn.BatchNorm3d,
    nn.SyncBatchNorm,
    nn.InstanceNorm1d,
    nn.InstanceNorm2d,
    nn.InstanceNorm3d,
    nn.LayerNorm,
    nn.GroupNorm,
)
_HOOKED: tuple[type[nn.Module], ...] = (*MASKABLE_TYPES, *_NORMS)


@dataclass
class NetworkFlops:
    """Per-sample forward FLOPs: ``weights`` of maskable layers by parameter name, ``dense`` the rest."""

    weights: dict[str, float] = field(default_factory=dict)
    dense: float = 0.0

    def forward(self, densities: Mapping[str, float] | None = None) -> float:
        """Per-sample forward FLOPs with the weight terms scaled by ``densities`` (missing = dense)."""
        densities = densities or {}
        return self.dense + sum(flops * densities.get(name, 1.0) for name, flops in self.weights.items())

    def to_state(self) -> dict[str, Any]:
        return {"weights": dict(self.weights), "dense": self.dense}

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> NetworkFlops:
        return cls(weights={k: float(v) for k, v in state["weights"].items()}, dense=float(state["dense"]))


def _layer_terms(module: nn.Module, inputs: tuple[Any, ...], output: Any) -> tuple[float, float]:
    """``(weight term, dense term)`` per sample of one call of ``module``."""
    x = inputs[0]
    if isinstance(module, nn.Linear):
        positions = math.prod(x.shape[1:-1])
        bias = module.out_features * positions if module.bias is not None else 0
        return float(module.weight.numel() * positions), float(bias)
    if isinstance(module, MASKABLE_TYPES):  # convolutions
        out_positions = math.prod(output.shape[2:])
        spatial = math.prod(x.shape[2:]) if isinstance(module, _CONV_TRANSPOSE) else out_positions
        bias = output.shape[1] * out_positions if getattr(module, "bias", None) is not None else 0
        weight = module.weight
        assert isinstance(weight, torch.Tensor)
        return float(weight.numel() * spatial), float(bias)
    if isinstance(module, _NORMS) and getattr(module, "weight", None) is not None:
        return 0.0, float(2 * output[0].numel())
    return 0.0, 0.0


@torch.no_grad()
def count_forward_flops(network: nn.Module, example: torch.Tensor, masked: Mapping[str, Any]) -> NetworkFlops:
    """Per-sample forward FLOPs of ``network`` on ``example`` (a batch of at least one sample).

    Runs one forward in eval mode (no BatchNorm statistics or spectral-norm power-iteration updates) and
    restores every module's mode. Weights named in ``masked`` go to ``weights``, everything else to ``dense``.
    """
    result = NetworkFlops()
    handles = []

    def hook(prefix: str) -> Any:
        def record(module: nn.Module, inputs: tuple[Any, ...], output: Any) -> None:
            weight_term, dense_term = _layer_terms(module, inputs, output)
            local = weight_name(module)
            name = f"{prefix}.{local}" if prefix else (local or "")
            if weight_term and name in masked:
                result.weights[name] = result.weights.get(name, 0.0) + weight_term
            else:
                result.dense += weight_term
            result.dense += dense_term

        return record

    modes = [(module, module.training) for module in network.modules()]
    for prefix, module in network.named_modules():
        if isinstance(module, _HOOKED):
            handles.append(module.register_forward_hook(hook(prefix)))
    try:
        network.eval()
        network(example)
    finally:
        for handle in handles:
            handle.remove()
        for module, training in modes:
            module.training = training
    return result


def new_ledger() -> dict[str, float]:
    """Running totals: ``train`` (sparse), ``dense`` (same steps at density 1) and ``br`` (BR forwards)."""
    return {"train": 0.0, "dense": 0.0, "br": 0.0}


def charge(ledger: dict[str, float], sparse: float, dense: float, *, key: str = "train") -> None:
    """Add one event's cost. Densities only change at mask updates, so summing events at the densities
    in force is the reference's piecewise accumulation (interval length x cost per interval)."""
    ledger[key] = ledger.get(key, 0.0) + sparse
    if key == "train":
        ledger["dense"] = ledger.get("dense", 0.0) + dense


def training_step_cost(trained: float, evaluated: float, batch: int) -> float:
    """FLOPs of one optimizer step: the trained network forward + backward (3x), the other forward only."""
    return batch * (3.0 * trained + evaluated)


def generator_step_cost(generator: float, discriminator: float, batch: int) -> float:
    """One G step on ``batch`` noise vectors: G forward + backward (3x); D forward and the input-gradient
    half of its backward (2x), since G's gradient flows through D (the reference counts D once)."""
    return batch * (3.0 * generator + 2.0 * discriminator)


def discriminator_step_cost(discriminator: float, generator: float, batch: int) -> float:
    """One D step: D forward + backward on the real batch and on as many fakes (2 x 3x), G forward for
    the fakes (1x). The reference charges D for one batch only, which halves D's weight in the ratio."""
    return batch * (6.0 * discriminator + generator)


__all__ = [
    "NetworkFlops",
    "charge",
    "count_forward_flops",
    "discriminator_step_cost",
    "generator_step_cost",
    "new_ledger",
    "training_step_cost",
]
