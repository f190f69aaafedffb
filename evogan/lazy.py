"""Modules imported on first use, so that commands that never train stay fast.

``evogan --help``, ``validate``, ``plugins`` and ``components`` import every plugin module, and importing torch
would dominate their time (benchmarks/RESULTS.md, 'Issue 12: fast commands'). A plugin module that uses torch only
inside functions writes ``torch = lazy("torch", globals())`` (with ``import torch`` under ``TYPE_CHECKING``); the
first attribute read puts the real module in the caller's globals. Anything evaluated at import time (a base class,
a default value, a decorator) still imports the real module then.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any


class LazyModule:
    """Stands in for module ``name`` in ``namespace`` until an attribute is read."""

    def __init__(self, name: str, namespace: dict[str, Any]) -> None:
        self._lazy_name = name
        self._lazy_namespace = namespace

    def _load(self) -> ModuleType:
        module = importlib.import_module(self._lazy_name)
        for key, value in list(self._lazy_namespace.items()):
            if value is self:
                self._lazy_namespace[key] = module
        return module

    def __getattr__(self, attribute: str) -> Any:
        if attribute.startswith("_lazy_"):
            raise AttributeError(attribute)
        return getattr(self._load(), attribute)

    def __repr__(self) -> str:
        return f"<lazy module {self._lazy_name!r}>"


def lazy(name: str, namespace: dict[str, Any]) -> Any:
    """A stand-in for ``import name`` in the module whose ``globals()`` is ``namespace``."""
    return LazyModule(name, namespace)


__all__ = ["LazyModule", "lazy"]
