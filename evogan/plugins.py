"""The plugin manager: built-in plugins and third-party packages, through the same door."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from importlib import import_module, metadata

import pluggy

from evogan import hookspecs
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


def _env_blocked() -> set[str]:
    return {name.strip() for name in os.environ.get(BLOCK_ENV, "").split(",") if name.strip()}


def _env_plugins() -> list[str]:
    return [name.strip() for name in os.environ.get(PLUGINS_ENV, "").split(",") if name.strip()]


def make_plugin_manager(
    *, autoload: bool | None = None, blocked: Iterable[str] = (), extra: Iterable[object] = ()
) -> pluggy.PluginManager:
    """A fresh manager: hookspecs, blocked names, the built-ins, entry points of group ``evogan``, then the
    modules named in ``EVOGAN_PLUGINS`` (loaded even when autoload is off, as pytest's ``PYTEST_PLUGINS``).

    :param autoload: load entry-point plugins; default: unless ``EVOGAN_DISABLE_PLUGIN_AUTOLOAD`` is set.
    :param blocked: plugin names never to load (added to ``EVOGAN_BLOCK_PLUGINS``).
    :param extra: plugin objects to register after the built-ins (the CLI's reporter); then those
        :func:`registered` holds.
    """
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    for name in {*blocked, *_env_blocked()}:
        pm.set_blocked(name)
    for module_name in BUILTIN_PLUGINS:
        if not pm.is_blocked(module_name):
            pm.register(import_module(module_name), name=module_name)
    if autoload is None:
        autoload = not os.environ.get(DISABLE_AUTOLOAD_ENV)
    if autoload:
        try:
            pm.load_setuptools_entrypoints(hookspecs.PROJECT)
        except Exception as exc:  # a broken third-party package must not look like our traceback
            raise UserError(f"could not load an 'evogan' entry-point plugin: {exc}") from exc
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


def describe_plugins(pm: pluggy.PluginManager) -> list[PluginInfo]:
    """Name, version and implemented hooks of every registered plugin (for ``evogan plugins``)."""
    dists = {id(plugin): dist for plugin, dist in pm.list_plugin_distinfo()}
    infos = []
    for plugin in pm.get_plugins():
        name = pm.get_name(plugin) or repr(plugin)
        dist = dists.get(id(plugin))
        if dist is not None:
            version, distribution = dist.version, dist.metadata["name"]
        else:
            distribution = "evogan"
            try:
                version = metadata.version("evogan")
            except metadata.PackageNotFoundError:  # running from a source tree
                version = "0+unknown"
        hooks = tuple(sorted(caller.name for caller in pm.get_hookcallers(plugin) or ()))
        infos.append(PluginInfo(name, version, distribution, hooks))
    return sorted(infos, key=lambda info: (info.distribution != "evogan", info.name))


__all__ = [
    "BLOCK_ENV",
    "BUILTIN_PLUGINS",
    "DISABLE_AUTOLOAD_ENV",
    "PLUGINS_ENV",
    "PluginInfo",
    "describe_plugins",
    "make_plugin_manager",
    "registered",
]
