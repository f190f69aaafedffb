"""The problem seam: the GAN problem passes the generic problem contract, a problem must name two roles,
and a GAN problem written against 0.2's GAN-shaped ``Problem`` still registers, with a warning."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
from evogan_gan.problem import GanProblem

from evogan.adversarial import AdversarialProblem
from evogan.api import Problem
from evogan.errors import ComponentConflictError
from evogan.registry import Registry
from evogan.testing import check_problem

SMALL = {
    "batch_size": 16,
    "batches_per_generation": 2,
    "fitness_samples": 32,
    "score_samples": 64,
    "data": {"use": "gaussian_ring", "samples": 256},
    "network": {"use": "mlp_2d", "latent_size": 4, "hidden": 8},
}


def test_the_gan_problem_passes_the_generic_problem_contract() -> None:
    produced = check_problem(GanProblem, SMALL)
    g_loss, d_loss = produced["fitness"]
    assert g_loss.shape == (4, 4) and d_loss.shape == (4, 4)  # two members and two mates per role
    assert set(produced["metrics"]) == {"modes_covered", "hq_fraction", "tvd"}


def test_a_problem_without_two_distinct_roles_is_refused() -> None:
    class OneRole(GanProblem):
        name: ClassVar[str] = "one_role"
        roles: ClassVar[tuple[str, str]] = ("generator", "generator")

    with pytest.raises(ComponentConflictError, match="two distinct roles"):
        Registry("problem").add(OneRole, "test")


def test_a_gan_problem_written_against_the_old_problem_contract_still_registers() -> None:
    internal = {"__dict__", "__weakref__", "__abstractmethods__", "_abc_impl", "__orig_bases__", "__parameters__"}
    methods: dict[str, Any] = {k: v for k, v in vars(GanProblem).items() if k not in internal}
    methods.update(name="legacy_gan", __module__="third_party.gan")
    legacy = type("LegacyGan", (Problem,), methods)
    assert not issubclass(legacy, AdversarialProblem)
    registry = Registry("problem")
    with pytest.warns(DeprecationWarning, match="AdversarialProblem"):
        registry.add(legacy, "third-party")
    adapted = registry.get("legacy_gan")
    assert issubclass(adapted, legacy) and issubclass(adapted, AdversarialProblem)
    assert not adapted.__abstractmethods__  # nothing left to implement: its training is AdversarialProblem.vary
    assert adapted.vary is AdversarialProblem.vary and adapted.roles == ("generator", "discriminator")


def test_a_problem_builds_its_components_through_the_context_and_registries_warn() -> None:
    """The narrow callable is the way in; the registries stay readable for 0.2 problems, with a warning."""
    from functools import partial

    import torch

    from evogan.adversarial.contracts import Dataset
    from evogan.api import ProblemContext
    from evogan.plugins import make_plugin_manager
    from evogan.recipe import ComponentRef, build_nested
    from evogan.registry import Registries

    registries = Registries.from_plugin_manager(make_plugin_manager())
    context = ProblemContext(partial(build_nested, registries), torch.device("cpu"), source=registries)
    dataset = context.build(Dataset, ComponentRef(use="gaussian_ring", samples=64))
    assert isinstance(dataset, Dataset) and dataset.name == "gaussian_ring"
    with pytest.warns(DeprecationWarning, match="ProblemContext.build"):
        assert context.registries is registries



def test_an_adversarial_problem_owns_its_parts_and_options_without_them_get_the_defaults() -> None:
    """Pairing, mutation and sparsity are the problem's, built through its context from its options
    ([problem.pairing], ...); options without such fields get the default pairing, no mutation, no sparsity."""
    from functools import partial

    import numpy as np
    import torch
    from evogan_gan.problem import GanOptions

    from evogan.adversarial.contracts import SparsityController
    from evogan.api import ComponentOptions, ProblemContext
    from evogan.plugins import make_plugin_manager
    from evogan.recipe import build_nested
    from evogan.registry import Registries

    registries = Registries.from_plugin_manager(make_plugin_manager())
    context = ProblemContext(partial(build_nested, registries), torch.device("cpu"), source=registries)
    parts = {"pairing": {"use": "own_pair"}, "mutation": {"use": "lognormal_lr"}, "sparsity": {"use": "static"}}
    gan = GanProblem(GanOptions.model_validate({**SMALL, **parts}), context)
    assert (gan.pairing.name, gan.mutation.name) == ("own_pair", "lognormal_lr")
    assert isinstance(gan.sparsity, SparsityController) and gan.sparsity.name == "static"
    plain = GanProblem(GanOptions.model_validate(SMALL), context)
    assert (plain.pairing.name, plain.mutation.name, plain.sparsity) == ("reference", "gaussian_lr", None)

    class Bare(GanProblem):  # options without the parts, as a problem written for 0.2 has
        def __init__(self, options: Any, context: ProblemContext) -> None:
            AdversarialProblem.__init__(self, options, context)

    bare = Bare(ComponentOptions(), context)  # type: ignore[arg-type]
    hyper = {"lr": 1e-3, "lr0": 1e-3}
    assert bare.pairing.name == "reference" and bare.sparsity is None
    assert bare.mutation.mutate(hyper, rng=np.random.default_rng(0)) == hyper
