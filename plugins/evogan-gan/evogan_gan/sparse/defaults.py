"""Defaults the sparsity controllers' options show, kept apart from the torch code that uses them so that
reading the options (``evogan validate``, ``evogan components``) imports no torch."""

from __future__ import annotations

# Parameter-name fragments never masked (a conditional gain, a classifier head).
DEFAULT_KEEP_DENSE: tuple[str, ...] = ("gain", "classifier")
# Smallest |r - fD| used as a balance-ratio denominator, and the clip of per-sample ratios.
DEFAULT_EPS = 1e-6
DEFAULT_CLIP = 10.0

__all__ = ["DEFAULT_CLIP", "DEFAULT_EPS", "DEFAULT_KEEP_DENSE"]
