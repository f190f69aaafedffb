"""Imports fine; its registration hook raises, as a plugin reading a missing file would."""

from __future__ import annotations

from evogan import hookimpl
from evogan.hookspecs import Register


@hookimpl
def evogan_register_mutations(register: Register) -> None:
    raise RuntimeError("broken on purpose: the registration hook of evogan_broken_plugins.register_error")


@hookimpl
def evogan_run_start(run: object) -> None:
    raise AssertionError("a plugin that failed to register must not see lifecycle hooks")
