"""Public names that were renamed or removed: each keeps working for at least one minor release, with a
``DeprecationWarning`` naming its replacement. :data:`DEPRECATIONS` is the one list: the code below, the
generated docs/reference.md and CHANGELOG.md ("Deprecated") follow it.

A public module serves its old names with ``__getattr__ = module_getattr(__name__, globals())``: Python
calls it only for names the module does not define, so current names cost nothing. A kept method calls
:func:`warn` first.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Deprecation:
    """An old public name (dotted) and what replaces it."""

    old: str
    new: str  # a dotted name in the same module for a renamed module attribute; else what to use instead
    since: str  # the release that deprecated it
    removal: str  # the first release that may remove it

    def message(self) -> str:
        return (
            f"{self.old} is deprecated since evogan {self.since} and will be removed in {self.removal}: "
            f"use {self.new}"
        )


DEPRECATIONS: tuple[Deprecation, ...] = (
    Deprecation("evogan.api.Options", "evogan.api.ComponentOptions", since="0.2.0", removal="0.3.0"),
    Deprecation(
        "evogan.api.Problem.network_budget",
        "evogan.api.Problem.describe (evogan never called network_budget)",
        since="0.2.0",
        removal="0.3.0",
    ),
)
_BY_NAME = {deprecation.old: deprecation for deprecation in DEPRECATIONS}


def warn(old: str) -> None:
    """Warn, on behalf of the caller's caller, that ``old`` (a name in :data:`DEPRECATIONS`) is deprecated."""
    warnings.warn(_BY_NAME[old].message(), DeprecationWarning, stacklevel=3)


def module_getattr(module: str, namespace: Mapping[str, Any]) -> Callable[[str], Any]:
    """A module-level ``__getattr__`` serving ``module``'s renamed attributes from ``namespace``."""
    renamed = {d.old.rpartition(".")[2]: d for d in DEPRECATIONS if d.old.rpartition(".")[0] == module}

    def __getattr__(name: str) -> Any:
        deprecation = renamed.get(name)
        if deprecation is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        # stacklevel 2: the line that imported or read the old name (``from module import Old`` too)
        warnings.warn(deprecation.message(), DeprecationWarning, stacklevel=2)
        return namespace[deprecation.new.rpartition(".")[2]]

    return __getattr__


__all__ = ["DEPRECATIONS", "Deprecation", "module_getattr", "warn"]
