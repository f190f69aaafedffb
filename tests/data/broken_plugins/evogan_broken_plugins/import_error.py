"""Fails at import: written against a base class evogan never had."""

from evogan.api import Crossover  # noqa: F401  # the failure under test
