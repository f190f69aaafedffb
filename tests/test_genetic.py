"""DEAP operators by name: validation naming the key, reproducible variation, DEAP's global state kept."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
from pydantic import Field, ValidationError

from evogan.api import ComponentOptions
from evogan.errors import UserError
from evogan.genetic import GenomeOperators, GenomeVariation


class ProblemOptions(ComponentOptions):
    """A genome problem's options with two roles' operators, as a problem declares them."""

    host: GenomeOperators = Field(default_factory=GenomeOperators)
    parasite: GenomeOperators = Field(default_factory=GenomeOperators)


def errors(settings: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(ValidationError) as caught:
        ProblemOptions.model_validate(settings)
    return [(".".join(map(str, e["loc"])), e["msg"]) for e in caught.value.errors()]


def test_unknown_operator_names_are_refused_with_a_did_you_mean() -> None:
    ((key, message),) = errors({"host": {"crossover": {"operator": "cxTwoPont"}}})
    assert key == "host.crossover.operator"
    assert "'cxTwoPont' is not a DEAP crossover operator (did you mean 'cxTwoPoint'?)" in message
    ((key, message),) = errors({"parasite": {"mutation": {"operator": "cxTwoPoint"}}})
    assert key == "parasite.mutation.operator" and "not a DEAP mutation operator" in message
    assert "cxTwoPoints" not in message  # deprecated aliases warn when called: not offered


def test_operator_arguments_are_checked_against_the_signature() -> None:
    mutation = {"operator": "mutUniformInt", "indpb": 0.1}
    assert errors({"host": {"mutation": {**mutation, "sigma": 1}}}) == [
        ("host.mutation.sigma", "unknown key (mutUniformInt takes: indpb)")
    ]
    assert errors({"host": {"mutation": {"operator": "mutUniformInt"}}}) == [
        ("host.mutation.indpb", "required key is missing (an argument of mutUniformInt)")
    ]
    assert errors({"host": {"mutation": {**mutation, "up": 3}}}) == [
        ("host.mutation.up", "set by the problem from the number of wires")
    ]
    positional = {"operator": "cxTwoPoint", "ind1": [0]}
    assert errors({"parasite": {"crossover": positional}})[0][0] == "parasite.crossover.ind1"
    assert errors({"host": {"crossover": {"operator": "cxTwoPoint", "probability": 1.5}}})[0][0] == (
        "host.crossover.probability"
    )


def test_the_default_operators_are_two_point_crossover_and_bit_flips() -> None:
    options = ProblemOptions.model_validate({})
    assert (options.host.crossover.operator, options.host.mutation.operator) == ("cxTwoPoint", "mutFlipBit")
    assert options.host.crossover.probability == 0.5 and options.host.mutation.arguments == {"indpb": 0.01}


def host_variation(**settings: Any) -> GenomeVariation:
    return GenomeVariation(GenomeOperators.model_validate(settings), low=0, up=7, path="problem.host")


def test_vary_is_reproducible_leaves_its_inputs_alone_and_restores_deaps_global_random() -> None:
    variation = host_variation(mutation={"operator": "mutUniformInt", "indpb": 0.2})
    draw = np.random.default_rng(0)
    genomes = [draw.integers(0, 8, 20).tolist() for _ in range(3)]
    mates = [draw.integers(0, 8, 20).tolist() for _ in range(4)]
    before = [list(g) for g in genomes + mates]
    random.seed(123)
    state = random.getstate()
    first = variation.vary(genomes, mates, np.random.default_rng(5))
    assert random.getstate() == state
    assert first == variation.vary(genomes, mates, np.random.default_rng(5))
    assert first != variation.vary(genomes, mates, np.random.default_rng(6))
    assert genomes + mates == before
    assert first != genomes and all(len(g) == 20 and all(0 <= x <= 7 for x in g) for g in first)


def test_real_valued_operators_are_rounded_into_the_gene_range() -> None:
    variation = host_variation(
        crossover={"operator": "cxBlend", "alpha": 0.5, "probability": 1.0},
        mutation={"operator": "mutGaussian", "mu": 0.0, "sigma": 5.0, "indpb": 1.0},
    )
    (child,) = variation.vary([[0] * 10], [[7] * 10], np.random.default_rng(1))
    assert all(isinstance(x, int) and 0 <= x <= 7 for x in child) and len(set(child)) > 1


def test_every_child_is_a_list_of_ints_in_range_whatever_the_genes_types() -> None:
    """Integer children pass as they are (the fast path); bools and out-of-range ints are brought back."""
    never = {"operator": "cxTwoPoint", "probability": 0.0}
    flips = host_variation(crossover=never, mutation={"operator": "mutFlipBit", "indpb": 0.5})
    (child,) = flips.vary([[True, False] * 5], [], np.random.default_rng(0))
    assert all(type(x) is int and x in (0, 1) for x in child) and len(set(child)) == 2
    crossed = host_variation(
        crossover={"operator": "cxUniform", "indpb": 0.5, "probability": 1.0},
        mutation={"operator": "mutFlipBit", "indpb": 0.1, "probability": 0.0},
    )
    (mixed,) = crossed.vary([[0] * 30], [[-3] * 15 + [9] * 15], np.random.default_rng(0))
    assert all(type(x) is int and 0 <= x <= 7 for x in mixed) and {0, 7} <= set(mixed)
    kept = [3, 1, 4, 1, 5]
    (same,) = host_variation(
        crossover=never, mutation={"operator": "mutFlipBit", "indpb": 0.1, "probability": 0.0}
    ).vary([kept], [], np.random.default_rng(0))
    assert same == kept and same is not kept


def test_operators_that_cannot_handle_fixed_genomes_fail_at_setup_naming_the_key() -> None:
    messy = host_variation(crossover={"operator": "cxMessyOnePoint", "probability": 1.0})
    with pytest.raises(UserError, match=r"problem\.host\.crossover: cxMessyOnePoint changed the genome's length"):
        messy.check(40)
    bits = GenomeVariation(
        GenomeOperators.model_validate({"mutation": {"operator": "mutESLogNormal", "c": 1.0, "indpb": 0.5}}),
        low=0,
        up=1,
        path="problem.parasite",
    )
    with pytest.raises(UserError, match=r"problem\.parasite\.mutation: mutESLogNormal failed on a genome of 40"):
        bits.check(40)


@pytest.mark.parametrize(("old", "new"), [("Mutation", "GenomeMutation"), ("Crossover", "GenomeCrossover")])
def test_the_old_operator_names_warn_once_and_are_the_genome_operators(old: str, new: str) -> None:
    """One Mutation per meaning (0.3.0): a genome's DEAP operators are GenomeMutation and GenomeCrossover;
    the old names, importable by 0.2-era genome problems, warn once and are the same classes."""
    import evogan.genetic as genetic

    message = rf"evogan\.genetic\.{old} is deprecated .*: use evogan\.genetic\.{new}$"
    with pytest.warns(DeprecationWarning, match=message) as caught:
        exec(f"from evogan.genetic import {old} as kept", namespace := {"__name__": "genome_problem"})
    assert len(caught) == 1 and caught[0].filename == "<string>"
    assert namespace["kept"] is getattr(genetic, new)
