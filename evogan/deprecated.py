"""Public names that were renamed or removed: each keeps working for at least one minor release, with a
``DeprecationWarning`` naming its replacement. :data:`DEPRECATIONS` is the one list: the code below, the
generated docs/reference.md and CHANGELOG.md ("Deprecated") follow it.

A public module serves its old names, renamed or moved, with
``__getattr__ = module_getattr(__name__, globals())``: Python calls it only for names the module does not
define, so current names cost nothing. A kept method calls :func:`warn` first.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from evogan.errors import UserError


@dataclass(frozen=True)
class Deprecation:
    """An old public name (dotted) and what replaces it."""

    old: str
    new: str  # a dotted name for a renamed or moved module attribute; else what to use instead
    since: str  # the release that deprecated it
    removal: str  # the first release that may remove it

    def message(self) -> str:
        return (
            f"{self.old} is deprecated since evogan {self.since} and will be removed in {self.removal}: "
            f"use {self.new}"
        )


# Methods (contract class -> names) whose torch random stream was the keyword ``generator`` until 0.3.0 and is
# ``stream``: either keyword works until 0.4.0, in both directions (:func:`rename_keywords`).
RENAMED_KEYWORDS: dict[str, tuple[str, ...]] = {
    "evogan.adversarial.AdversarialProblem": ("training_batches", "generator_step", "discriminator_step"),
    "evogan.adversarial.contracts.SparsityController": ("prepare",),
    "evogan.adversarial.contracts.Loss": ("generator_loss",),
    "evogan.adversarial.contracts.Augment": ("__call__",),
}
# names of evogan.api that moved to evogan.adversarial.contracts (0.3.0)
MOVED_TO_ADVERSARIAL = (
    "Mutation",
    "Faced",
    "Pairing",
    "GeneratorStep",
    "SparsityController",
    "DataSource",
    "DatasetOptions",
    "Dataset",
    "Networks",
    "Loss",
    "Augment",
    "Metric",
)
# modules that moved to the GAN problem's own distribution, evogan-gan (issue 38): old name -> new
MOVED_MODULES: dict[str, str] = {
    "evogan.builtin.gan": "evogan_gan",
    "evogan.sparse": "evogan_gan.sparse",
    "evogan.builtin.sparsity": "evogan_gan.sparsity",
    "evogan.cost": "evogan_gan.cost",
}


def moved_name(name: str) -> str | None:
    """The new name of a module (or plugin named by its module) under a moved one, else None."""
    for old, new in MOVED_MODULES.items():
        if name == old or name.startswith(old + "."):
            return new + name[len(old) :]
    return None


DEPRECATIONS: tuple[Deprecation, ...] = (
    Deprecation("evogan.api.Options", "evogan.api.ComponentOptions", since="0.2.0", removal="0.3.0"),
    Deprecation(
        "evogan.api.ProblemContext.registries",
        "evogan.api.ProblemContext.build (a problem builds its nested components through it)",
        since="0.3.0",
        removal="0.4.0",
    ),
    *(
        Deprecation(
            f"evogan.api.Variation.{part}",
            f"the problem's own {part} (evogan.adversarial.AdversarialProblem.{part}: [problem.{part}])",
            since="0.3.0",
            removal="0.4.0",
        )
        for part in ("pairing", "mutation", "sparsity")
    ),
    # the adversarial problem's contracts moved out of the generic evogan.api (issue 38)
    *(
        Deprecation(f"evogan.api.{name}", f"evogan.adversarial.contracts.{name}", since="0.3.0", removal="0.4.0")
        for name in MOVED_TO_ADVERSARIAL
    ),
    # a transport-internal type: what the envelope decodes to (issue 38: evogan.api holds contracts only)
    Deprecation("evogan.api.Received", "evogan.transport.envelope.Received", since="0.3.0", removal="0.4.0"),
    # the training backend's contract is named as one: RowByRow and the stacked one implement it (issue 38)
    *(
        Deprecation(old, "evogan.adversarial.contracts.TrainingBackend", since="0.3.0", removal="0.4.0")
        for old in ("evogan.api.StackedTraining", "evogan.adversarial.contracts.StackedTraining")
    ),
    Deprecation(
        "evogan.worker",
        "evogan.start_worker (python -m evogan.start_worker: the entry point beside evogan.runtime.worker)",
        since="0.3.0",
        removal="0.4.0",
    ),
    # one Mutation per meaning: a genome's DEAP operators say so (issue 38)
    Deprecation("evogan.genetic.Mutation", "evogan.genetic.GenomeMutation", since="0.3.0", removal="0.4.0"),
    Deprecation("evogan.genetic.Crossover", "evogan.genetic.GenomeCrossover", since="0.3.0", removal="0.4.0"),
    Deprecation(
        "evogan.individual.Individual.sparse",
        'evogan.individual.Individual.extra["sparse"] (evogan.individual.SPARSE: one slot for per-individual state)',
        since="0.3.0",
        removal="0.4.0",
    ),
    Deprecation(
        "evogan.individual.Individual.average",
        'evogan.individual.Individual.extra.get("average") (evogan.individual.AVERAGE)',
        since="0.3.0",
        removal="0.4.0",
    ),
    # served by evogan.moved's import hook, the same module objects under their old names
    *(
        Deprecation(old, f"{new} (the evogan-gan distribution)", since="0.3.0", removal="0.4.0")
        for old, new in MOVED_MODULES.items()
    ),
    # random streams are called streams: ``generator`` names a GAN's network (issue 38)
    *(
        Deprecation(f"{method}(generator=)", f"{method}(stream=)", since="0.3.0", removal="0.4.0")
        for method in (f"{contract}.{name}" for contract, names in RENAMED_KEYWORDS.items() for name in names)
    ),
)
# Recipe keys: the options model maps them to the new ones and warns (FutureWarning: shown to users).
RECIPE_KEYS: tuple[Deprecation, ...] = (
    # the problem owns the parts of its training loop (evogan.recipe.PROBLEM_PARTS)
    Deprecation("[pairing]", "[problem.pairing]", since="0.3.0", removal="0.4.0"),
    Deprecation("[mutation]", "[problem.mutation]", since="0.3.0", removal="0.4.0"),
    Deprecation("[sparsity]", "[problem.sparsity]", since="0.3.0", removal="0.4.0"),
    Deprecation(
        "sparsity.band", 'a sparsity.calibrate table (band = "auto"), or none (band = "fixed")', "0.3.0", "0.4.0"
    ),
    Deprecation("sparsity.band_warmup", "sparsity.calibrate.warmup", since="0.3.0", removal="0.4.0"),
    Deprecation("sparsity.band_settle", "sparsity.calibrate.settle", since="0.3.0", removal="0.4.0"),
    Deprecation("sparsity.band_width", "sparsity.calibrate.width", since="0.3.0", removal="0.4.0"),
    Deprecation("sparsity.band_min_width", "sparsity.calibrate.min_width", since="0.3.0", removal="0.4.0"),
    Deprecation(
        "sparsity.grown_moments",
        "nothing: a regrown weight starts with its layer's mean Adam second moment ('layer'; 'zero' lost its "
        "benchmark)",
        since="0.3.0",
        removal="0.4.0",
    ),
)
_BY_NAME = {deprecation.old: deprecation for deprecation in (*DEPRECATIONS, *RECIPE_KEYS)}
# Keys of the files a run writes, still written (a file cannot warn its readers) for runs that have them.
SUMMARY_KEYS: tuple[Deprecation, ...] = (
    Deprecation(
        "summary.json: best_mixture",
        'chosen["test"] (what was chosen, in words that fit any problem; written by runs with a mixture only)',
        since="0.3.0",
        removal="0.4.0",
    ),
    Deprecation(
        "summary.json: best_mixture_validation",
        'chosen["validation"] (written by runs with a mixture only)',
        since="0.3.0",
        removal="0.4.0",
    ),
)


def warn(old: str, *, stacklevel: int = 3) -> None:
    """Warn, on behalf of the caller's caller (``stacklevel`` frames up), that ``old`` (a name in
    :data:`DEPRECATIONS` or :data:`RECIPE_KEYS`) is deprecated. A recipe key warns with ``FutureWarning``,
    which users see."""
    category = FutureWarning if _BY_NAME[old] in RECIPE_KEYS else DeprecationWarning
    warnings.warn(_BY_NAME[old].message(), category, stacklevel=stacklevel)


def moved_attribute(old: str, holder: str) -> property:
    """A read-only property for the deprecated ``old`` (``module.Class.name``): it warns on behalf of the
    line that read it, then answers with ``self.<holder>.<name>`` (None where the holder has none)."""
    name = old.rpartition(".")[2]

    def read(self: Any) -> Any:
        warn(old)
        return getattr(getattr(self, holder), name, None)

    return property(read, doc=f"Deprecated: {_BY_NAME[old].message()}.")


def module_getattr(module: str, namespace: Mapping[str, Any]) -> Callable[[str], Any]:
    """A module-level ``__getattr__`` serving ``module``'s renamed attributes from ``namespace`` and its
    moved ones from their new module, imported at the first use (so that neither module imports the other)."""
    renamed = {d.old.rpartition(".")[2]: d for d in DEPRECATIONS if d.old.rpartition(".")[0] == module}

    def __getattr__(name: str) -> Any:
        deprecation = renamed.get(name)
        if deprecation is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        # stacklevel 2: the line that imported or read the old name (``from module import Old`` too)
        warnings.warn(deprecation.message(), DeprecationWarning, stacklevel=2)
        home, _, new = deprecation.new.rpartition(".")
        return namespace[new] if home == module else getattr(importlib.import_module(home), new)

    return __getattr__


# kind -> method -> keywords the engine has passed since 0.2.0 that 0.1's documentation did not have. A
# plugin method written for 0.1 (without them, and without **kwargs) is adapted when it registers.
NEW_KEYWORDS: dict[str, dict[str, tuple[str, ...]]] = {
    "problem": {
        "fitness": ("score", "memo"),
        "training_batches": ("cell",),
        "fitness_batch": ("cell",),
        "train_discriminator_at": ("cell", "generation"),
    },
    "loss": {"generator_loss": ("stream",)},  # named generator until 0.3.0
    "transport": {"gather": ("substep",)},
}
# a keyword dropped only while it has this value: any other asks for what a 0.1 method cannot do
_ONLY_AT_DEFAULT = {"substep": 0}  # exchange.every_batches: messages from inside a generation


def adapt_signatures(component: type, kind: str) -> list[str]:
    """Adapt each method of ``component`` that lacks keywords the engine now passes (see
    :data:`NEW_KEYWORDS`) to drop them, with one ``DeprecationWarning`` per method; the names adapted."""
    adapted = []
    for method, keywords in NEW_KEYWORDS.get(kind, {}).items():
        function = getattr(component, method, None)
        if function is None or getattr(function, "__module__", "").startswith("evogan."):
            continue  # evogan's own base classes and built-ins take every keyword
        if not getattr(function, "__evogan_adapted__", False):
            parameters = inspect.signature(function).parameters
            if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
                continue
            missing = tuple(k for k in keywords if k not in parameters)
            if not missing:
                continue
            setattr(component, method, _dropping(function, missing, f"{component.__qualname__}.{method}"))
        dropped = getattr(component, method).__evogan_adapted__
        warnings.warn(
            f"{component.__module__}.{component.__qualname__}.{method} does not accept "
            f"{', '.join(dropped)} (passed since evogan 0.2.0): evogan drops them for it; accept them "
            "(or **kwargs) before 0.3.0",
            DeprecationWarning,
            stacklevel=2,
        )
        adapted.append(method)
    return adapted


def _dropping(function: Callable[..., Any], missing: tuple[str, ...], name: str) -> Callable[..., Any]:
    @functools.wraps(function)
    def adapted(self: Any, *args: Any, **kwargs: Any) -> Any:
        for keyword in missing:
            value = kwargs.pop(keyword, None)
            if keyword in _ONLY_AT_DEFAULT and value not in (None, _ONLY_AT_DEFAULT[keyword]):
                raise UserError(f"{name} was written for evogan 0.1 and cannot take {keyword}={value!r}")
        return function(self, *args, **kwargs)

    adapted.__evogan_adapted__ = missing  # type: ignore[attr-defined]
    return adapted


def rename_keywords(cls: type) -> None:
    """Let each method of :data:`RENAMED_KEYWORDS` that ``cls`` has (its own or inherited) take either keyword;
    called for every component class when it is defined. A method naming ``stream`` warns when a caller
    passes ``generator=`` (a plugin written for 0.2 calling it); one naming ``generator`` (a plugin's
    implementation written for 0.2) is called so when the engine passes ``stream=``, and its class warns
    once, now."""
    for base in cls.__mro__:
        contract = f"{base.__module__}.{base.__qualname__}"
        for method in RENAMED_KEYWORDS.get(contract, ()):
            function = getattr(cls, method, None)
            if function is None or hasattr(function, "__evogan_renamed__"):
                continue
            parameters = inspect.signature(function).parameters
            if "stream" in parameters and "generator" not in parameters:
                setattr(cls, method, _renaming(function, "generator", "stream", f"{contract}.{method}(generator=)"))
            elif "generator" in parameters and "stream" not in parameters:
                setattr(cls, method, _renaming(function, "stream", "generator", None))
                warnings.warn(
                    f"{cls.__module__}.{cls.__qualname__}.{method} names its random stream 'generator': evogan "
                    "passes it as 'stream' since 0.3.0 and renames it for this method; rename the parameter "
                    "before 0.4.0",
                    DeprecationWarning,
                    stacklevel=4,  # the class statement (through __init_subclass__ and ABCMeta.__new__)
                )


def _renaming(function: Callable[..., Any], old: str, new: str, deprecation: str | None) -> Callable[..., Any]:
    """``function`` taking keyword ``old`` as ``new``; a call passing ``old`` warns with ``deprecation``."""

    @functools.wraps(function)
    def renamed(self: Any, *args: Any, **kwargs: Any) -> Any:
        if old in kwargs:
            if new in kwargs:
                raise TypeError(f"{function.__qualname__}() got both {old!r} and {new!r}")
            if deprecation is not None:
                warn(deprecation)
            kwargs[new] = kwargs.pop(old)
        return function(self, *args, **kwargs)

    # its signature names the keyword the engine passes, so adapt_signatures sees it accepted
    signature = inspect.signature(function)
    renamed.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[p.replace(name="stream") if p.name == "generator" else p for p in signature.parameters.values()]
    )
    renamed.__evogan_renamed__ = True  # type: ignore[attr-defined]
    return renamed


__all__ = [
    "DEPRECATIONS",
    "NEW_KEYWORDS",
    "RECIPE_KEYS",
    "RENAMED_KEYWORDS",
    "SUMMARY_KEYS",
    "Deprecation",
    "adapt_signatures",
    "module_getattr",
    "rename_keywords",
    "warn",
]
