"""DEAP's crossover and mutation operators by name, for problems whose individuals are genomes.

A problem's options name an operator of ``deap.tools`` and give its keyword arguments beside it (``operator =
"mutUniformInt"``, ``probability = 1.0``, ``indpb = 0.02``); the problem supplies ``low`` and ``up``
(:class:`GenomeVariation`). DEAP draws from the global :mod:`random` module, so :func:`seeded` seeds it from the
cell's stream for one call and puts its state back afterwards.
"""

from __future__ import annotations

import difflib
import inspect
import random
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from deap import tools
from pydantic import ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from evogan import deprecated
from evogan.api import ComponentOptions
from evogan.errors import UserError

# Gene bounds the problem passes itself, from the number of wires.
SUPPLIED = ("low", "up")
# Renamed aliases DEAP keeps with a deprecation warning; the new names are listed instead.
DEPRECATED = ("cxTwoPoints", "cxESTwoPoints")

Genome = list[int]


def operators(prefix: str) -> list[str]:
    """The functions of ``deap.tools`` whose names start with ``prefix`` (``cx``, ``mut``)."""
    return sorted(
        name
        for name in dir(tools)
        if name.startswith(prefix) and name not in DEPRECATED and inspect.isfunction(getattr(tools, name))
    )


def known_operator(value: str, prefix: str, what: str) -> str:
    """``value`` if it names a ``deap.tools`` function starting with ``prefix``; else ``ValueError`` with
    a did-you-mean and the list (``what``: selection, crossover, mutation)."""
    known = operators(prefix)
    if value not in known:
        close = difflib.get_close_matches(value, known, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"{value!r} is not a DEAP {what} operator{hint}; available: {', '.join(known)}")
    return value


def _argument_error(title: str, key: str, message: str, value: Any) -> ValidationError:
    error = PydanticCustomError("deap_argument", message)
    return ValidationError.from_exception_data(title, [InitErrorDetails(type=error, loc=(key,), input=value)])


class Operator(ComponentOptions):
    """One DEAP operator: its name, the chance it is applied, and its keyword arguments (extra keys)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    prefix: ClassVar[str]
    arity: ClassVar[int]  # leading positional arguments: the individuals
    what: ClassVar[str]

    operator: str = Field(description="a function of deap.tools by name")
    probability: float = Field(1.0, ge=0, le=1, description="chance that the operator is applied")

    @field_validator("operator")
    @classmethod
    def _exists(cls, value: str) -> str:
        return known_operator(value, cls.prefix, cls.what)

    @model_validator(mode="after")
    def _arguments_fit(self) -> Operator:
        parameters = list(inspect.signature(getattr(tools, self.operator)).parameters.values())
        reserved = {p.name for p in parameters[: self.arity]} | set(SUPPLIED)
        takes = [p.name for p in parameters if p.name not in reserved]
        for key, value in self.arguments.items():
            if key in SUPPLIED:
                raise _argument_error(type(self).__name__, key, "set by the problem from the number of wires", value)
            if key not in takes:
                listed = ", ".join(takes) or "no other keys"
                raise _argument_error(type(self).__name__, key, f"unknown key ({self.operator} takes: {listed})", value)
        for parameter in parameters[self.arity :]:
            missing = parameter.default is inspect.Parameter.empty and parameter.name not in self.arguments
            if missing and parameter.name not in SUPPLIED:
                message = f"required key is missing (an argument of {self.operator})"
                raise _argument_error(type(self).__name__, parameter.name, message, None)
        return self

    @property
    def arguments(self) -> dict[str, Any]:
        """The operator's keyword arguments: every key but ``operator`` and ``probability``."""
        return dict(self.model_extra or {})

    def bind(self, low: int, up: int) -> Callable[..., Any]:
        """The operator with its arguments and, where it takes them, the gene bounds."""
        function = getattr(tools, self.operator)
        parameters = inspect.signature(function).parameters
        bounds = {key: value for key, value in (("low", low), ("up", up)) if key in parameters}
        arguments = {**self.arguments, **bounds}
        return lambda *individuals: function(*individuals, **arguments)


class GenomeCrossover(Operator):
    """A crossover of ``deap.tools`` on two genomes (a role's ``crossover`` table)."""

    prefix: ClassVar[str] = "cx"
    arity: ClassVar[int] = 2
    what: ClassVar[str] = "crossover"

    operator: str = Field(description="a crossover function of deap.tools by name (cxTwoPoint, cxUniform, ...)")
    probability: float = Field(0.5, ge=0, le=1, description="chance that a child is crossed with a mate")


class GenomeMutation(Operator):
    """A mutation of ``deap.tools`` on one genome (a role's ``mutation`` table); not the GAN problem's
    hyper-parameter :class:`evogan.adversarial.contracts.Mutation` component."""

    prefix: ClassVar[str] = "mut"
    arity: ClassVar[int] = 1
    what: ClassVar[str] = "mutation"

    operator: str = Field(description="a mutation function of deap.tools by name (mutUniformInt, mutFlipBit, ...)")
    probability: float = Field(1.0, ge=0, le=1, description="chance that a child is mutated at all")


def operator_field(kind: type[Operator], settings: dict[str, Any], what: str) -> Any:
    return Field(default_factory=lambda: kind.model_validate(settings), description=what)


class GenomeOperators(ComponentOptions):
    """A role's crossover and mutation; a problem subclasses it to give its own defaults."""

    crossover: GenomeCrossover = operator_field(
        GenomeCrossover,
        {"operator": "cxTwoPoint", "probability": 0.5},
        "a crossover of deap.tools (operator, probability, its arguments); the first child is kept",
    )
    mutation: GenomeMutation = operator_field(
        GenomeMutation,
        {"operator": "mutFlipBit", "probability": 1.0, "indpb": 0.01},
        "a mutation of deap.tools (operator, probability, its arguments; low/up are the gene range)",
    )


@contextmanager
def seeded(rng: np.random.Generator) -> Iterator[None]:
    """DEAP's global :mod:`random` seeded by one draw of ``rng``; the global state is put back after."""
    saved = random.getstate()
    random.seed(int(rng.integers(2**63)))
    try:
        yield
    finally:
        random.setstate(saved)


class GenomeVariation:
    """One role's crossover and mutation on flat genomes (lists of ints) whose genes lie in ``[low, up]``.

    :param path: the recipe key of the role's operators (``problem.host``), named in every error.
    """

    def __init__(self, operators: GenomeOperators, *, low: int, up: int, path: str) -> None:
        self.options, self.low, self.up, self.path = operators, low, up, path
        self.crossover = operators.crossover.bind(low, up)
        self.mutation = operators.mutation.bind(low, up)

    def vary(self, genomes: Sequence[Genome], mates: Sequence[Genome], rng: np.random.Generator) -> list[Genome]:
        """Each genome, crossed with a mate drawn from ``mates`` (with the crossover's probability) and
        then mutated (with the mutation's probability). Inputs are left unchanged; every draw comes
        from ``rng`` (DEAP's through :func:`seeded`)."""
        out = []
        with seeded(rng):
            for genome in genomes:
                child = list(genome)
                if mates and rng.random() < self.options.crossover.probability:
                    mate = list(mates[int(rng.integers(len(mates)))])
                    child = self._apply("crossover", self.crossover, child, mate)
                if rng.random() < self.options.mutation.probability:
                    child = self._apply("mutation", self.mutation, child)
                out.append(child)
        return out

    def _apply(self, key: str, function: Callable[..., Any], child: Genome, *others: Genome) -> Genome:
        operator: Operator = getattr(self.options, key)
        length = len(child)
        try:
            result = function(child, *others)
        except Exception as exc:  # any failure of a user-chosen operator is the recipe's, named by key
            message = f"{operator.operator} failed on a genome of {length} genes: {exc}"
            raise UserError(f"{self.path}.{key}: {message}") from exc
        first = result[0] if isinstance(result, tuple) else result  # DEAP returns 1- and 2-tuples
        if len(first) != length:
            raise UserError(
                f"{self.path}.{key}: {operator.operator} changed the genome's length ({length} -> {len(first)}); "
                "genomes have a fixed size"
            )
        # set(map(type, ...)) runs in C: a generator over the genes cost 7 % of a sortnet grid's time
        if set(map(type, first)) == {int} and self.low <= min(first) and max(first) <= self.up:
            return list(first)  # integer operators: nothing to round (the common case, and per genome)
        # Real-valued operators (mutGaussian, cxBlend) give floats: genes are rounded into their range.
        return [min(self.up, max(self.low, round(value))) for value in first]

    def check(self, length: int) -> None:
        """Run both operators once on random genomes of ``length`` genes (a fixed seed, the global state
        put back), so a recipe whose operator cannot handle these genomes fails before the run starts."""
        rng = np.random.default_rng(0)
        genomes = [rng.integers(self.low, self.up + 1, length).tolist() for _ in range(2)]
        with seeded(rng):
            self._apply("crossover", self.crossover, genomes[0], genomes[1])
            self._apply("mutation", self.mutation, genomes[0])


if TYPE_CHECKING:
    Crossover, Mutation = GenomeCrossover, GenomeMutation  # deprecated: the warning is for run time
else:
    # Crossover and Mutation -> GenomeCrossover and GenomeMutation (evogan.deprecated.DEPRECATIONS) warn, then work.
    __getattr__ = deprecated.module_getattr(__name__, globals())

__all__ = [
    "SUPPLIED",
    "GenomeCrossover",
    "GenomeMutation",
    "GenomeOperators",
    "GenomeVariation",
    "Operator",
    "known_operator",
    "operator_field",
    "operators",
    "seeded",
]
