"""Component registries: a name maps to exactly one component class, with the plugin that provided it."""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from evogan.adversarial import adapt_problem
from evogan.deprecated import adapt_signatures
from evogan.entry_points import PluginManager, first_line
from evogan.errors import ComponentConflictError, UserError
from evogan.kinds import KINDS

if TYPE_CHECKING:
    import pluggy

    from evogan.api import Component

# kind -> the registration hook that fills it (from evogan.kinds.KINDS, in the order `evogan components` prints).
KIND_HOOKS: dict[str, str] = {base.kind: base.hook for base in KINDS}


@dataclass(frozen=True)
class Entry:
    name: str
    component: type[Component[Any]]
    plugin: str


@dataclass
class Registry:
    """Components of one kind, by name."""

    kind: str
    entries: dict[str, Entry] = field(default_factory=dict)
    failed: tuple[str, ...] = ()  # plugins that failed to load, named in an unknown-name error

    def add(self, component: type[Component[Any]], plugin: str) -> None:
        name = getattr(component, "name", None)
        if not isinstance(name, str) or not name:
            raise ComponentConflictError(
                f"plugin {plugin!r} registered a {self.kind} without a name: {component!r}"
            )
        kind = getattr(component, "kind", self.kind)
        if kind != self.kind:
            raise ComponentConflictError(
                f"plugin {plugin!r} registered {kind} {name!r} through the {self.kind} hook"
            )
        if name in self.entries:
            first = self.entries[name].plugin
            raise ComponentConflictError(
                f"{self.kind} {name!r} is registered twice: by plugin {first!r} and by plugin {plugin!r}"
            )
        previous = self.default()
        if getattr(component, "default", False) and previous is not None:
            first = self.entries[previous.name].plugin
            raise ComponentConflictError(
                f"{self.kind} {name!r} (plugin {plugin!r}) and {previous.name!r} (plugin {first!r}) "
                "both claim to be the default"
            )
        component = adapt_problem(component, self.kind)  # a 0.2 GAN problem written against Problem
        missing = sorted(getattr(component, "__abstractmethods__", ()))
        if missing:
            raise ComponentConflictError(
                f"plugin {plugin!r} registered {self.kind} {name!r} without {', '.join(missing)} "
                f"(what every {self.kind} must implement)"
            )
        if self.kind == "problem":
            roles = getattr(component, "roles", None)
            if not (isinstance(roles, tuple) and len(roles) == 2 and len(set(roles)) == 2):
                raise ComponentConflictError(
                    f"plugin {plugin!r} registered problem {name!r} without two distinct roles (its `roles`)"
                )
        adapt_signatures(component, self.kind)  # a 0.1 plugin's methods keep working, with a warning
        self.entries[name] = Entry(name, component, plugin)

    def default(self) -> type[Component[Any]] | None:
        """The component a recipe gets when it leaves this kind's optional table out, if any."""
        return next((e.component for e in self.entries.values() if getattr(e.component, "default", False)), None)

    def get(self, name: str, *, key: str | None = None) -> type[Component[Any]]:
        """The component called ``name``; an unknown name is a ``UserError`` listing what exists."""
        try:
            return self.entries[name].component
        except KeyError:
            available = ", ".join(sorted(self.entries)) or "(nothing registered)"
            close = difflib.get_close_matches(name, self.entries, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            where = f"{key}: " if key else ""
            failed = f"; plugins that failed to load: {', '.join(self.failed)}" if self.failed else ""
            # a name from a plugin package not installed here (the GAN problem's is evogan-gan)
            missing = "" if close or failed else "; a plugin package may provide it (`evogan plugins`: those loaded)"
            message = f"{where}unknown {self.kind} {name!r}{hint}; available: {available}{failed}{missing}"
            raise UserError(message) from None

    def __contains__(self, name: object) -> bool:
        return name in self.entries

    def __iter__(self) -> Iterator[Entry]:
        return iter(sorted(self.entries.values(), key=lambda e: e.name))


class Registries:
    """Every kind's registry, filled by calling each plugin's registration hooks one plugin at a time
    (so every entry records the plugin that provided it)."""

    def __init__(self) -> None:
        self.kinds: dict[str, Registry] = {kind: Registry(kind) for kind in KIND_HOOKS}

    def __getitem__(self, kind: str) -> Registry:
        return self.kinds[kind]

    def drop(self, plugin: str) -> None:
        """Forget every component ``plugin`` registered (it failed part-way)."""
        for registry in self.kinds.values():
            registry.entries = {n: e for n, e in registry.entries.items() if e.plugin != plugin}

    @classmethod
    def from_plugin_manager(cls, pm: pluggy.PluginManager) -> Registries:
        """Call every registration hook. An entry-point plugin whose hook raises (a bug, a name already
        taken, a class missing a method) is left out and reported by the manager, with none of its
        components; any other plugin's error is raised."""
        contained = pm.entry_points if isinstance(pm, PluginManager) else {}
        failed: dict[str, str] = {}
        registries = cls()
        for kind, hook_name in KIND_HOOKS.items():
            registry = registries[kind]
            # Oldest registration first, so a conflict names the built-in as the first provider.
            for impl in getattr(pm.hook, hook_name).get_hookimpls():
                name = impl.plugin_name
                if name in failed:
                    continue
                try:
                    impl.function(register=partial(registry.add, plugin=name))
                except Exception as exc:  # a third-party bug must not stop what does not need it
                    if name not in contained:
                        raise
                    failed[name] = f"{hook_name}: {first_line(exc)}"
                    registries.drop(name)
        if isinstance(pm, PluginManager):
            for name, error in failed.items():
                pm.fail(name, error)
            labels = tuple(failure.plugin.label for failure in pm.failures)
            for registry in registries.kinds.values():
                registry.failed = labels
        return registries


__all__ = ["KIND_HOOKS", "Entry", "Registries", "Registry"]
