"""Entry-point plugins: where each came from (:class:`EntryPointPlugin`), which failed to load
(:class:`PluginFailure`, reported once), and the manager class that keeps both (:class:`PluginManager`: pluggy's).

Apart from :mod:`evogan.plugins`, which makes managers (hookspecs, built-ins, entry points) and serves
these names too: :mod:`evogan.registry` needs the class to leave out a plugin whose registration hook
fails, and the registry sits below the hookspecs, which speak of runs and their recipes, validated
against the registries.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import metadata

import pluggy

#: The project name: pluggy's (hook names start with it) and the entry-point group plugins declare.
PROJECT = "evogan"
# Comma-separated plugin names (entry-point names or built-in module names) never to load.
BLOCK_ENV = "EVOGAN_BLOCK_PLUGINS"

# Who hears of a plugin that failed to load, innermost last (the CLI's warning line, a worker's log line).
_REPORTERS: list[Callable[[PluginFailure], None]] = []


@dataclass(frozen=True)
class EntryPointPlugin:
    """An installed plugin: an entry point of group ``evogan`` and the distribution that declares it."""

    name: str
    value: str  # "module" or "module:attribute"
    distribution: str
    version: str

    def load(self) -> object:
        return metadata.EntryPoint(self.name, self.value, PROJECT).load()

    @property
    def label(self) -> str:
        return f"{self.name} ({self.distribution} {self.version})"


@dataclass(frozen=True)
class PluginFailure:
    """An entry-point plugin that failed to import or to register its components, and was left out."""

    plugin: EntryPointPlugin
    error: str  # the error's first line

    @property
    def name(self) -> str:
        return self.plugin.name

    def warning(self) -> str:
        """The one line every command but ``evogan plugins`` prints."""
        name = self.plugin.name
        return (
            f"plugin {self.plugin.label} failed to load and is left out: {self.error} "
            f"(--disable-plugin {name} or {BLOCK_ENV}={name} stops loading it)"
        )


class PluginLoadWarning(UserWarning):
    """A plugin failed to load (issued where no reporter is installed: library use outside the CLI)."""


@contextlib.contextmanager
def reporting_failures(report: Callable[[PluginFailure], None]) -> Iterator[None]:
    """Inside the block, ``report`` hears once of each plugin (by name) that fails to load in any manager
    made in this process. The CLI prints a warning line; outside any block a :class:`PluginLoadWarning`
    is issued instead."""
    seen: set[str] = set()

    def once(failure: PluginFailure) -> None:
        if failure.name not in seen:
            seen.add(failure.name)
            report(failure)

    _REPORTERS.append(once)
    try:
        yield
    finally:
        _REPORTERS.remove(once)


def first_line(error: BaseException) -> str:
    """``Type: first line of the message``: what a failure report shows of an exception."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


class PluginManager(pluggy.PluginManager):
    """pluggy's manager, plus where each entry-point plugin came from and which ones failed.

    A failing entry-point plugin is unregistered and recorded in :attr:`failures`, never raised: at
    import (:meth:`load_entry_point`) and when its registration hooks run
    (:meth:`evogan.registry.Registries.from_plugin_manager`).
    """

    def __init__(self) -> None:
        super().__init__(PROJECT)
        self.entry_points: dict[str, EntryPointPlugin] = {}  # the loaded ones, by plugin name
        self.failures: list[PluginFailure] = []

    def load_entry_point(self, source: EntryPointPlugin) -> None:
        """Import and register one entry-point plugin; a failure is recorded, not raised."""
        self.entry_points[source.name] = source
        try:
            plugin = source.load()
            self.register(plugin, name=source.name)
        except Exception as exc:  # a third-party package's bug: name it, leave it out, go on
            self.fail(source.name, first_line(exc))
            return
        unknown = sorted(
            caller.name
            for caller in self.get_hookcallers(plugin) or ()
            if not caller.has_spec() and any(i.plugin is plugin and not i.optionalhook for i in caller.get_hookimpls())
        )
        if unknown:  # else check_pending() would stop every command
            self.fail(source.name, f"implements {', '.join(unknown)}, which evogan does not define")

    def fail(self, name: str, error: str) -> PluginFailure:
        """Leave entry-point plugin ``name`` out (its hooks will not fire) and report why."""
        source = self.entry_points.pop(name)
        if self.get_plugin(name) is not None:
            self.unregister(name=name)
        failure = PluginFailure(source, error)
        self.failures.append(failure)
        if _REPORTERS:
            _REPORTERS[-1](failure)
        else:
            warnings.warn(failure.warning(), PluginLoadWarning, stacklevel=2)
        return failure


__all__ = [
    "BLOCK_ENV",
    "PROJECT",
    "EntryPointPlugin",
    "PluginFailure",
    "PluginLoadWarning",
    "PluginManager",
    "first_line",
    "reporting_failures",
]
