"""Mixed precision (``run.precision``): which devices can do it, the autocast context a problem runs its
forwards in, and the backward-and-step that fp16 needs a loss scale for.

fp32, the default, changes nothing: its context is a no-op and its step the plain backward and optimizer step.
bf16 and fp16 autocast the forwards; weights, optimizer state, checkpoints and messages stay fp32 (autocast
casts copies for the products), and callers compute losses, the balance ratio and metrics on float32
outputs (``.float()``, a no-op in fp32).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

if TYPE_CHECKING:  # imported where used: `evogan validate` reads the recipe key without torch
    import torch

PrecisionName = Literal["fp32", "bf16", "fp16"]
PRECISIONS: tuple[str, ...] = get_args(PrecisionName)
_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
SCALER_KEY = "grad_scaler"  # fp16's loss-scale state, in the optimizer's first parameter group


def cpu_bf16_units() -> list[str]:
    """The bf16 units of this CPU by their flag names, [] when it has none: AMX tiles and AVX512-BF16 as
    torch finds them on x86 (the OS must allow AMX), the ``bf16`` feature on Arm. Without them the CPU
    emulates bf16 products, slower than fp32."""
    import torch

    found = []
    if getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)():
        found.append("amx_bf16")
    if getattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)():
        found.append("avx512_bf16")
    if not found:  # Arm: torch does not ask, the kernel lists the feature
        with contextlib.suppress(OSError):
            for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
                if line.startswith("Features") and "bf16" in line.split(":", 1)[1].split():
                    return ["bf16"]
    return found


def unsupported(precision: str, device: torch.device) -> str:
    """Why ``device`` cannot train in ``precision`` ('' when it can)."""
    import torch

    if precision == "fp32":
        return ""
    if device.type == "cuda":
        if precision == "bf16" and not torch.cuda.is_bf16_supported(including_emulation=False):
            major, minor = torch.cuda.get_device_capability(device)
            return f"bf16 needs a GPU of compute capability 8.0 or newer, this one is {major}.{minor}: use fp16"
        return ""
    if device.type == "cpu":
        if precision == "fp16":
            # fp16's narrow range needs a loss scale that bf16 does without, and every CPU with fp16 units
            # (avx512_fp16, amx_fp16) has bf16 units too: on a CPU bf16 is the better choice everywhere.
            return 'fp16 trains on CUDA only; on the CPU use "bf16"'
        if not cpu_bf16_units():
            return (
                "bf16 needs a CPU with bf16 units (amx_bf16, avx512_bf16 or Arm's bf16), which this one lacks: use fp32"
            )
        return ""
    return f"{precision} is not supported on device type {device.type}"


@dataclass(frozen=True)
class Precision:
    """A run's precision on its device: the context its forwards run in and its backward-and-step."""

    name: str = "fp32"
    device_type: str = "cpu"
    autocast: Callable[[], AbstractContextManager[Any]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.name not in PRECISIONS:
            raise ValueError(f"precision {self.name!r}: must be one of {', '.join(PRECISIONS)}")
        if self.name == "fp32":  # no autocast at all: fp32 records stay bitwise what they were
            context: Callable[[], AbstractContextManager[Any]] = contextlib.nullcontext
            if self.device_type == "cuda":
                import torch

                # and fp32 convolutions: cuDNN's default is TF32 (a 10-bit mantissa) on Ampere and later,
                # under which the H200 gave the looped and stacked backends different conv32 records
                torch.backends.cudnn.allow_tf32 = False
        else:
            import torch

            context = functools.partial(torch.autocast, self.device_type, dtype=self.dtype)
        object.__setattr__(self, "autocast", context)

    @property
    def dtype(self) -> torch.dtype:
        """What autocast computes the products in (float32 for fp32)."""
        import torch

        dtype: torch.dtype = getattr(torch, _DTYPES[self.name])
        return dtype

    @property
    def scales_loss(self) -> bool:
        """Whether steps scale the loss (fp16: its gradients would underflow)."""
        return self.name == "fp16"

    def step(self, optimizer: torch.optim.Optimizer, loss: torch.Tensor) -> None:
        """``loss.backward()`` and one step of ``optimizer``. fp16 scales the loss with a
        ``torch.amp.GradScaler`` (skipping a step whose gradients overflowed) whose state lives in the
        optimizer's first parameter group, so an individual's checkpoint and its clones carry its scale."""
        if not self.scales_loss:
            loss.backward()
            optimizer.step()
            return
        import torch

        group = optimizer.param_groups[0]
        scaler = torch.amp.GradScaler(self.device_type)
        if SCALER_KEY in group:
            scaler.load_state_dict(group[SCALER_KEY])
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        group[SCALER_KEY] = scaler.state_dict()


__all__ = ["PRECISIONS", "Precision", "PrecisionName", "cpu_bf16_units", "unsupported"]
