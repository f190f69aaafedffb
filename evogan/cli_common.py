"""What every command module shares: one-line errors, the plugin manager, ``--disable-plugin``, and one
warning line per plugin that failed to load.

Both :mod:`evogan.cli` and :mod:`evogan.commands` import from here, so neither imports the other's
helpers.
"""

from __future__ import annotations

import os
import sys
import threading
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

import click
from rich.console import Console
from rich.markup import escape

from evogan.errors import EvoganError, RecipeError
from evogan.runtime import AGENT_THREAD

if TYPE_CHECKING:
    from evogan.plugins import PluginFailure


def fail(error: EvoganError) -> NoReturn:
    """One line per problem on stderr, the error's exit code, no traceback."""
    console = Console(stderr=True, highlight=False, soft_wrap=True)
    lines = error.lines if isinstance(error, RecipeError) else [str(error)]
    for line in lines:
        console.print(f"[bold red]error:[/] {escape(line)}", markup=True)
    leave(error.exit_code)


def leave(code: int) -> NoReturn:
    """Exit with ``code``. When torch's elastic agent still runs in its thread (a lost node, Ctrl-C),
    skip the interpreter's teardown: finalising under the agent's C++ store threads can abort the
    process (``terminate called without an active exception``, exit -6) and lose our exit code."""
    if any(thread.name == AGENT_THREAD and thread.is_alive() for thread in threading.enumerate()):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


def warn_plugin_failure(failure: PluginFailure) -> None:
    """One line on stderr naming a plugin that failed to load and how to stop loading it."""
    console = Console(stderr=True, highlight=False, soft_wrap=True)
    console.print(f"[bold yellow]warning:[/] {escape(failure.warning())}", markup=True)


def _warning_line(message: Warning | str, category: type[Warning], *args: Any, **kwargs: Any) -> None:
    """A user-facing warning (a deprecated recipe key) as one line on stderr; others as Python shows them."""
    if not issubclass(category, FutureWarning):
        _show_warning(message, category, *args, **kwargs)
        return
    console = Console(stderr=True, highlight=False, soft_wrap=True)
    console.print(f"[bold yellow]warning:[/] {escape(str(message))}", markup=True)


_show_warning = warnings.showwarning


def handle_errors(function: Callable[..., Any]) -> Callable[..., Any]:
    """A command's errors as one line each, one warning line per plugin that failed to load (however
    many plugin managers the command makes) and one per deprecated recipe key."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from evogan.plugins import reporting_failures

        try:
            with reporting_failures(warn_plugin_failure), warnings.catch_warnings():
                warnings.simplefilter("default", FutureWarning)  # a deprecated recipe key: once per place
                warnings.showwarning = _warning_line
                return function(*args, **kwargs)
        except EvoganError as error:
            fail(error)

    wrapper.__name__ = function.__name__
    wrapper.__doc__ = function.__doc__
    return wrapper


def plugin_manager(disable: tuple[str, ...], extra: tuple[object, ...] = ()) -> Any:
    from evogan.plugins import make_plugin_manager

    return make_plugin_manager(blocked=disable, extra=extra)


disable_option = click.option(
    "--disable-plugin",
    "disable",
    multiple=True,
    metavar="NAME",
    help="Do not load this plugin (entry-point or built-in module name; also $EVOGAN_BLOCK_PLUGINS, "
    "comma-separated). Repeatable.",
)


__all__ = ["disable_option", "fail", "handle_errors", "plugin_manager", "warn_plugin_failure"]
