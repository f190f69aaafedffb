"""DEAP's own selection operators, by name, as a selection component.

    [selection]
    use = "deap"
    operator = "selTournament"
    tournsize = 3          # every other key is a keyword argument of the operator

Individuals carry a DEAP fitness (:class:`evogan.individual.LossFitness`, weight -1), so DEAP's
comparisons already treat the lowest loss as the best. DEAP draws from the global :mod:`random` module;
the bridge seeds it from the cell's stream for the one call and puts the global state back afterwards,
so a run stays reproducible per cell and generation and no one else's random numbers move.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from deap import base, tools
from pydantic import ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from evogan import genetic
from evogan.api import ComponentOptions, Selection
from evogan.errors import UserError
from evogan.hookspecs import Register, hookimpl

if TYPE_CHECKING:
    from evogan.individual import Individual

# Arguments the bridge passes itself: the population, how many to pick, and the fitness attribute.
RESERVED = ("individuals", "k", "fit_attr")


def operators() -> list[str]:
    """The selection operators of ``deap.tools`` (``sel*`` functions)."""
    return genetic.operators("sel")


def _argument_error(key: str, message: str, value: Any) -> ValidationError:
    error = PydanticCustomError("deap_argument", message)
    return ValidationError.from_exception_data("DeapSelection", [InitErrorDetails(type=error, loc=(key,), input=value)])


class DeapSelection(Selection["DeapSelection.Options"]):
    """A selection operator of ``deap.tools`` by name; the table's other keys are its keyword arguments.

    Roulette-type operators (``selRoulette``, ``selStochasticUniversalSampling``) weigh individuals by the
    raw fitness value, here the loss, so they favour *worse* individuals and need positive losses: DEAP
    documents them for maximisation only.
    """

    name: ClassVar[str] = "deap"
    description: ClassVar[str] = (
        "a DEAP selection operator by name (deap.tools); the table's other keys are its keyword arguments"
    )

    class Options(ComponentOptions):
        model_config = ConfigDict(extra="allow", frozen=True)

        operator: str = Field(
            description="a selection function of deap.tools (selTournament, selBest, "
            "selStochasticUniversalSampling, ...); other keys of the table are passed to it (tournsize = 3)"
        )

        @field_validator("operator")
        @classmethod
        def _exists(cls, value: str) -> str:
            return genetic.known_operator(value, "sel", "selection")

        @model_validator(mode="after")
        def _arguments_fit(self) -> DeapSelection.Options:
            parameters = inspect.signature(getattr(tools, self.operator)).parameters
            for key, value in self.arguments.items():
                if key in RESERVED or key not in parameters:
                    accepted = [p for p in parameters if p not in RESERVED]
                    takes = ", ".join(accepted) or "no other keys"
                    raise _argument_error(key, f"unknown key ({self.operator} takes: {takes})", value)
            for key, parameter in parameters.items():
                if key not in RESERVED and parameter.default is inspect.Parameter.empty and key not in self.arguments:
                    raise _argument_error(key, f"required key is missing (an argument of {self.operator})", None)
            return self

        @property
        def arguments(self) -> dict[str, Any]:
            """The operator's keyword arguments: every key of the table but ``use`` and ``operator``."""
            return dict(self.model_extra or {})

    def __init__(self, options: DeapSelection.Options) -> None:
        super().__init__(options)
        # DEAP's idiom: the toolbox holds the operator with its arguments bound.
        self.toolbox = base.Toolbox()
        self.toolbox.register("select", getattr(tools, options.operator), **options.arguments)

    def select(
        self, population: Sequence[Individual], k: int, *, rng: np.random.Generator
    ) -> list[Individual]:
        select: Callable[..., list[Individual]] = self.toolbox.select
        try:
            with genetic.seeded(rng):  # one draw from the cell's stream decides DEAP's draws
                return list(select(list(population), k))
        except (TypeError, ValueError, IndexError, ZeroDivisionError) as exc:
            raise UserError(
                f"selection.operator: {self.options.operator} failed on {len(population)} individuals "
                f"(k={k}): {exc}"
            ) from exc


@hookimpl
def evogan_register_selections(register: Register) -> None:
    register(DeapSelection)


__all__ = ["RESERVED", "DeapSelection", "operators"]
