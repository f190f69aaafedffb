"""The plugin manager: built-in plugins and third-party packages, through the same door.

The manager's class and its failure records live in :mod:`evogan.entry_points` (the registry needs
them, below the hookspecs); they are served from here too.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from importlib import import_module, metadata

from evogan import hookspecs
from evogan.deprecated import moved_name
from evogan.entry_points import (
    BLOCK_ENV,
    PROJECT,
    EntryPointPlugin,
    PluginFailure,
    PluginLoadWarning,
    PluginManager,
    first_line,
    reporting_failures,
)
from evogan.errors import UserError
from evogan.version import __version__

# Built-in methods are ordinary plugins, registered like any third-party package.
BUILTIN_PLUGINS: tuple[str, ...] = (
    "evogan.builtin.topology",
    "evogan.builtin.selection",
    "evogan.builtin.deap_operators",
    "evogan.builtin.mutation",
    "evogan.builtin.transports",
    "evogan.builtin.pairing",
)

# Set to 1 to skip entry-point plugins (built-ins still load).
DISABLE_AUTOLOAD_ENV = "EVOGAN_DISABLE_PLUGIN_AUTOLOAD"
# Comma-separated importable module names registered as plugins in every process of a run (workers
# inherit the environment), without installing a distribution: for plugin development and tests.
PLUGINS_ENV = "EVOGAN_PLUGINS"


# Plugin objects every manager made in this process registers, while `registered` holds them (tests).
_REGISTERED: list[object] = []


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


def installed_plugins() -> list[EntryPointPlugin]:
    """Every installed entry point of group ``evogan``, with its distribution's name and version."""
    found = []
    for entry in metadata.entry_points(group=PROJECT):
        dist = entry.dist
        name, version = (dist.name, dist.version) if dist is not None else ("unknown", "unknown")
        found.append(EntryPointPlugin(entry.name, entry.value, name, version))
    return found


def distribution_modules(distribution: str) -> tuple[str, ...]:
    """The plugin modules one installed distribution declares (its entry points of group ``evogan``), to
    register with autoload off: ``make_plugin_manager(autoload=False, modules=distribution_modules("evogan-gan"))``."""
    return tuple(source.value for source in installed_plugins() if source.distribution == distribution)


def _env_blocked() -> set[str]:
    return {name.strip() for name in os.environ.get(BLOCK_ENV, "").split(",") if name.strip()}


def _env_plugins() -> list[str]:
    return [name.strip() for name in os.environ.get(PLUGINS_ENV, "").split(",") if name.strip()]


def make_plugin_manager(
    *,
    autoload: bool | None = None,
    blocked: Iterable[str] = (),
    extra: Iterable[object] = (),
    modules: Iterable[str] = (),
) -> PluginManager:
    """A fresh manager: hookspecs, blocked names, the built-ins, entry points of group ``evogan``, then the
    modules named in ``EVOGAN_PLUGINS`` (loaded even when autoload is off, as pytest's ``PYTEST_PLUGINS``).
    A failing entry-point plugin is left out and recorded (:attr:`PluginManager.failures`); a failing
    ``EVOGAN_PLUGINS`` module is an error.

    :param autoload: load entry-point plugins; default: unless ``EVOGAN_DISABLE_PLUGIN_AUTOLOAD`` is set.
    :param blocked: plugin names never to load (added to ``EVOGAN_BLOCK_PLUGINS``).
    :param extra: plugin objects to register after the built-ins (the CLI's reporter), before :func:`registered`'s.
    :param modules: importable module names registered as plugins, as if named in ``EVOGAN_PLUGINS`` (a
        package's plugins with autoload off: :func:`distribution_modules`).
    """
    pm = PluginManager()
    pm.add_hookspecs(hookspecs)
    for name in {*blocked, *_env_blocked()}:
        pm.set_blocked(_current_name(name))
    for module_name in BUILTIN_PLUGINS:
        if not pm.is_blocked(module_name):
            pm.register(import_module(module_name), name=module_name)
    if autoload is None:
        autoload = not os.environ.get(DISABLE_AUTOLOAD_ENV)
    if autoload:
        for source in installed_plugins():  # one by one: pluggy's loader stops at the first failure
            if not pm.is_blocked(source.name) and pm.get_plugin(source.name) is None:
                pm.load_entry_point(source)
    for module_name in (*modules, *_env_plugins()):
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


def _current_name(name: str) -> str:
    """A plugin's name to block: one of a module that moved to evogan-gan (``evogan.builtin.gan.sngan``)
    is its module's new name, with a warning the command line shows."""
    renamed = moved_name(name)
    if renamed is None:
        return name
    message = f"plugin {name!r} is called {renamed!r} since evogan 0.3.0 (the evogan-gan distribution)"
    warnings.warn(message, FutureWarning, stacklevel=4)
    return renamed


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
    "distribution_modules",
    "first_line",
    "installed_plugins",
    "make_plugin_manager",
    "registered",
    "reporting_failures",
]
