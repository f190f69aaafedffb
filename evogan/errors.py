"""Errors that reach the user as one line and an exit code, never as a traceback."""

from __future__ import annotations


class EvoganError(Exception):
    """Base class. ``exit_code`` is what the CLI returns."""

    exit_code = 1


class UserError(EvoganError):
    """Bad input from the user: a recipe, a path, a flag. Exit code 2, before any work starts."""

    exit_code = 2


class RecipeError(UserError):
    """One or more recipe problems, each already formatted as ``file: dotted.key: message``."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__("\n".join(lines))
        self.lines = lines


class ComponentConflictError(EvoganError):
    """A plugin registered a component the registry cannot take: a name another plugin took, no name,
    a second default, or a class missing a method its kind requires."""

    exit_code = 2


class RunFailure(EvoganError):
    """A failure during a run (I/O, a worker that died for good). Exit code 1."""

    exit_code = 1


class MessageRejected(Exception):
    """A message from a peer failed validation; it is dropped and counted, never trusted."""


__all__ = [
    "ComponentConflictError",
    "EvoganError",
    "MessageRejected",
    "RecipeError",
    "RunFailure",
    "UserError",
]
