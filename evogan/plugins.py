"""The plugin manager: built-in plugins and third-party packages, through the same door."""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from importlib import import_module, metadata

import pluggy

from evogan import __version__, hookspecs
from evogan.errors import UserError

# Built-in methods are ordinary plugins, registered like any third-party package.
BUILTIN_PLUGINS: tuple[str, ...] = (
    "evogan.builtin.topology",
    "evogan.builtin.selection",
    "evogan.builtin.deap_operators",
    "evogan.builtin.mutation",
    "evogan.builtin.sparsity",
    "evogan.builtin.transports",
    "evogan.builtin.pairing",
    "evogan.builtin.gan",
    "evogan.builtin.gan.images",
    "evogan.builtin.gan.image_networks",
    "evogan.builtin.gan.image_metrics",
    "evogan.builtin.gan.sngan",
)

# Set to 1 to skip entry-point plugins (built-ins still load).
DISABLE_AUTOLOAD_ENV = "EVOGAN_DISABLE_PLUGIN_AUTOLOAD"
# Comma-separated plugin names (entry-point names or built-in module names) never to load.
BLOCK_ENV = "EVOGAN_BLOCK_PLUGINS"
# Comma-separated importable module names registered as plugins in every process of a run (workers
# inherit the environment), without installing a distribution: for plugin development and tests.
PLUGINS_ENV = "EVOGAN_PLUGINS"


# Plugin objects every manager made in this process registers, while `registered` holds them (tests).
_REGISTERED: list[object] = []
# Who hears of a plugin that failed to load, innermost last (the CLI's warning line, a worker's log line).
_REPORTERS: list[Callable[[PluginFailure], None]] = []


@contextlib.contextmanager
def registered(*plugins: object) -> Iterator[None]:
    """Register ``plugins`` with every plugin manager made in this process inside the block, so a run
    started there (``prepare``, or the CLI invoked in-process) has them. Worker processes do not."""
    _REGISTERED.extend(plugins)
    try:
        yield
    finally:
        for plugin in plugins:
            _REGISTERED.remove(plugin)


@dataclass(frozen=True)
class EntryPointPlugin:
    """An installed plugin: an entry point of group ``evogan`` and the distribution that declares it."""

    name: str
    value: str  # "module" or "module:attribute"
    distribution: str
    version: str

    def load(self) -> object:
        return metadata.EntryPoint(self.name, self.value, hookspecs.PROJECT).load()

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
        super().__init__(hookspecs.PROJECT)
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


def installed_plugins() -> list[EntryPointPlugin]:
    """Every installed entry point of group ``evogan``, with its distribution's name and version."""
    found = []
    for entry in metadata.entry_points(group=hookspecs.PROJECT):
        dist = entry.dist
        name, version = (dist.name, dist.version) if dist is not None else ("unknown", "unknown")
        found.append(EntryPointPlugin(entry.name, entry.value, name, version))
    return found


def _env_blocked() -> set[str]:
    return {name.strip() for name in os.environ.get(BLOCK_ENV, "").split(",") if name.strip()}


def _env_plugins() -> list[str]:
    return [name.strip() for name in os.environ.get(PLUGINS_ENV, "").split(",") if name.strip()]


def make_plugin_manager(
    *, autoload: bool | None = None, blocked: Iterable[str] = (), extra: Iterable[object] = ()
) -> PluginManager:
    """A fresh manager: hookspecs, blocked names, the built-ins, entry points of group ``evogan``, then the
    modules named in ``EVOGAN_PLUGINS`` (loaded even when autoload is off, as pytest's ``PYTEST_PLUGINS``).

    An entry-point plugin that fails to import or register is left out and recorded
    (:attr:`PluginManager.failures`); a module named in ``EVOGAN_PLUGINS`` that fails is an error.

    :param autoload: load entry-point plugins; default: unless ``EVOGAN_DISABLE_PLUGIN_AUTOLOAD`` is set.
    :param blocked: plugin names never to load (added to ``EVOGAN_BLOCK_PLUGINS``).
    :param extra: plugin objects to register after the built-ins (the CLI's reporter); then those
        :func:`registered` holds.
    """
    pm = PluginManager()
    pm.add_hookspecs(hookspecs)
    for name in {*blocked, *_env_blocked()}:
        pm.set_blocked(name)
    for module_name in BUILTIN_PLUGINS:
        if not pm.is_blocked(module_name):
            pm.register(import_module(module_name), name=module_name)
    if autoload is None:
        autoload = not os.environ.get(DISABLE_AUTOLOAD_ENV)
    if autoload:
        for source in installed_plugins():  # one by one: pluggy's loader stops at the first failure
            if not pm.is_blocked(source.name) and pm.get_plugin(source.name) is None:
                pm.load_entry_point(source)
    for module_name in _env_plugins():
        if pm.is_blocked(module_name) or pm.get_plugin(module_name) is not None:
            continue
        try:
            module = import_module(module_name)
        except ImportError as exc:
            raise UserError(f"{PLUGINS_ENV}: cannot import {module_name!r}: {exc}") from None
        if not pm.is_registered(module):  # else already loaded through its entry point
            pm.register(module, name=module_name)
    for plugin in (*extra, *_REGISTERED):
        pm.register(plugin)
    pm.check_pending()
    return pm


@dataclass(frozen=True)
class PluginInfo:
    name: str
    version: str
    distribution: str
    hooks: tuple[str, ...]
    status: str = "loaded"  # or "failed"
    error: str = ""  # why it failed: the error's first line


def describe_plugins(pm: PluginManager) -> list[PluginInfo]:
    """Name, version and implemented hooks of every registered plugin, then every plugin that failed to
    load with its error (for ``evogan plugins``). Build the registries first to catch registration hooks
    that fail."""
    infos = []
    for plugin in pm.get_plugins():
        name = pm.get_name(plugin) or repr(plugin)
        source = pm.entry_points.get(name)
        distribution, version = (source.distribution, source.version) if source else ("evogan", __version__)
        hooks = tuple(sorted(caller.name for caller in pm.get_hookcallers(plugin) or ()))
        infos.append(PluginInfo(name, version, distribution, hooks))
    for failure in pm.failures:
        source = failure.plugin
        infos.append(PluginInfo(source.name, source.version, source.distribution, (), "failed", failure.error))
    return sorted(infos, key=lambda info: (info.distribution != "evogan", info.status != "loaded", info.name))


__all__ = [
    "BLOCK_ENV",
    "BUILTIN_PLUGINS",
    "DISABLE_AUTOLOAD_ENV",
    "PLUGINS_ENV",
    "EntryPointPlugin",
    "PluginFailure",
    "PluginInfo",
    "PluginLoadWarning",
    "PluginManager",
    "describe_plugins",
    "first_line",
    "installed_plugins",
    "make_plugin_manager",
    "registered",
    "reporting_failures",
]
