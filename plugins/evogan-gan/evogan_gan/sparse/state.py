"""The layout of a sparsity controller's state, ``individual.extra[SPARSE]``, and the check the engine runs on a
resumed checkpoint.

The state holds only tensors, numbers, strings, lists and dicts, so it survives ``torch.save(...,
weights_only=True)``, ``copy.deepcopy`` (selection copies) and the exchange envelope's meta. A discriminator's
balance state belongs to its local lineage (an offspring shares its incumbent's); masks, densities and step counts
are per individual, and a copy inherits its parent's FLOPs ledger, so totals are per lineage.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from evogan.errors import UserError
from evogan.individual import SPARSE
from evogan_gan.sparse.masks import maskable_parameters

if TYPE_CHECKING:
    from evogan.individual import Individual

# Keys: ``format``, ``controller``, ``role``, ``keep_dense`` (name fragments); ``masks`` (name -> bool tensor of the
# parameter's shape); ``density`` (the target; only ADAPT moves D's); ``steps`` (own optimizer steps),
# ``mask_updates``, ``seed`` (base of per-event RNGs); ``flops`` (per-sample forward, :mod:`evogan_gan.sparse.flops`),
# ``cost`` ([sparse, dense] at the current masks), ``ledger`` (FLOPs totals). Discriminators add ``batch``, ``g_cost``
# (for D-step accounting) and ``balance``: ``clock`` (the cell's G steps since the lineage began), ``due`` and
# ``samples`` (BR samples), ``window`` ([fG, fD, r]), ``pending``, ``decisions``, ``br``, ``calibration``, ``band``,
# ``warmup_end``, for ``verify`` ``last_move``, ``moved_at``, ``floor``, ``ceiling``, the decision counters ``in_band``,
# ``raises``, ``lowerings``, ``undos``, ``blocked``, ``unanswered``, and ``fell_back`` (with ``fell_back_at``, a clock).
# With ``sema``: name -> averaged tensor (a generator's; never sent to neighbours).
FORMAT = 2  # 2: balance state per lineage (issue 10)


def state_of(individual: Individual) -> dict[str, Any]:
    """The controller's state of ``individual`` (``individual.extra[SPARSE]``), created empty where absent,
    so what a controller writes into it stays."""
    state: dict[str, Any] = individual.extra.setdefault(SPARSE, {})
    return state


def masks_of(individual: Individual) -> dict[str, torch.Tensor]:
    """The individual's masks; a ``UserError`` when it has none (never prepared, or a dense checkpoint)."""
    masks = individual.extra.get(SPARSE, {}).get("masks")
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
    sparse: dict[str, Any] = individual.extra.get(SPARSE, {})
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


__all__ = ["FORMAT", "masks_of", "state_of", "validate_sparse_state"]
