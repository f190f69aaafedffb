"""evogan: a plugin-based spatial coevolution engine for robust, scalable GAN training."""

from __future__ import annotations

from evogan.hookspecs import hookimpl

__version__ = "0.1.0"

__all__ = ["__version__", "hookimpl"]
