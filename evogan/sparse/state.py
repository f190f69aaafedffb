"""The layout of ``individual.sparse`` and the check the engine runs on a resumed checkpoint.

Everything is a tensor, number, string, list or dict, so the state survives ``torch.save(...,
weights_only=True)``, ``copy.deepcopy`` (selection copies) and the exchange envelope's meta. Keys:

- ``format`` (int), ``controller`` (name), ``role``, ``keep_dense`` (list of name fragments);
- ``masks``: parameter name -> bool tensor of the parameter's shape;
- ``density``: the target overall density (changes only for an ADAPT discriminator);
- ``steps``: own optimizer steps; ``mask_updates``: mask changes; ``seed``: base of per-event RNGs;
- ``flops`` (per-sample forward FLOPs, see :mod:`evogan.sparse.flops`), ``cost`` ([sparse, dense]
  per-sample forward at the current masks), ``ledger`` (FLOPs totals of this individual's steps);
- discriminators also: ``balance``, the local lineage's balance state (shared by an offspring and its
  incumbent during a generation with selection): ``clock`` (G steps of the cell's generators since the
  lineage began), ``due`` (BR samples due, taken on the next G steps that face this D), ``samples`` (taken), ``window``
  ([fG, fD, r] triples), ``pending`` (a density decision waits for the next D step), ``decisions``,
  ``br`` (last balance ratio acted on), ``calibration`` (window BRs recorded during an ``auto`` band's
  warm-up), ``band`` ([lower, upper] once calibrated, else None), ``warmup_end`` (its clock), and for
  ``verify``: ``last_move`` ([direction, BR before it, density before it] or None), ``floor`` and
  ``ceiling`` (density bounds learnt from moves that did not act on BR); plus
  ``batch`` and ``g_cost`` (batch size and per-sample generator cost for D-step accounting);
- generators with ``sema`` on also: ``sema`` (parameter name -> averaged tensor; not sent to neighbours).

A copied individual inherits its parent's ledger: totals are per lineage, not per cell.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from evogan.errors import UserError
from evogan.sparse.masks import maskable_parameters

if TYPE_CHECKING:
    from evogan.individual import Individual

FORMAT = 2  # 2: balance state per lineage (issue 10)


def masks_of(individual: Individual) -> dict[str, torch.Tensor]:
    """The individual's masks; a ``UserError`` when it has none (never prepared, or a dense checkpoint)."""
    masks = individual.sparse.get("masks")
    if not isinstance(masks, dict):
        raise UserError(
            f"{individual.role} has no sparsity masks: it was created or checkpointed under a dense "
            "controller; start a new run to train it sparse"
        )
    return masks


def validate_sparse_state(individual: Individual, *, controller: str | None = None, masked: bool = True) -> None:
    """Raise ``UserError`` when a loaded individual's sparse state does not fit its network.

    Checks the format, the controller name (when given; a controller that keeps no masks, ``masked=False``,
    accepts an empty state only), that every mask names a parameter of the same shape, that every
    maskable parameter has a mask, and that weights are zero where the mask is off (the reference's
    resume bug: masks and weights that disagree).
    """
    sparse: dict[str, Any] = individual.sparse
    role = individual.role
    if not sparse:
        if controller is not None and masked:
            raise UserError(
                f"checkpoint {role} has no sparse state, but the recipe uses sparsity {controller!r}"
            )
        return
    if sparse.get("format") != FORMAT:
        raise UserError(f"checkpoint {role}: sparse state format {sparse.get('format')!r}, expected {FORMAT}")
    if controller is not None and sparse.get("controller") != controller:
        raise UserError(
            f"checkpoint {role} was trained with sparsity {sparse.get('controller')!r}, "
            f"the recipe uses {controller!r}"
        )
    masks = masks_of(individual)
    params = dict(individual.network.named_parameters())
    for name, mask in masks.items():
        param = params.get(name)
        if param is None:
            raise UserError(f"checkpoint {role}: mask {name!r} names no parameter of the network")
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
            raise UserError(f"checkpoint {role}: mask {name!r} is not a boolean tensor")
        if mask.shape != param.shape:
            raise UserError(
                f"checkpoint {role}: mask {name!r} has shape {tuple(mask.shape)}, "
                f"the parameter {tuple(param.shape)}"
            )
        if bool(param.detach()[~mask.to(param.device)].any()):
            raise UserError(f"checkpoint {role}: {name!r} has non-zero weights where its mask is off")
    average = sparse.get("sema")
    if average is not None:
        for name, param in params.items():
            tensor = average.get(name) if isinstance(average, dict) else None
            if not isinstance(tensor, torch.Tensor) or tensor.shape != param.shape:
                raise UserError(f"checkpoint {role}: SEMA average of {name!r} is missing or misshapen")
    expected = maskable_parameters(individual.network, tuple(sparse.get("keep_dense", ())))
    missing = sorted(set(expected) - set(masks))
    if missing:
        raise UserError(f"checkpoint {role}: no mask for maskable parameters {missing[:3]}")


__all__ = ["FORMAT", "masks_of", "validate_sparse_state"]
