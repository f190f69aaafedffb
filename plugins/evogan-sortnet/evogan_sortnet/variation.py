"""The sorting-network roles' default crossover and mutation (DEAP operators by name: evogan.genetic)."""

from __future__ import annotations

from evogan.genetic import GenomeMutation, GenomeOperators, operator_field


class HostOperators(GenomeOperators):
    """Variation of hosts: genomes are the flat list ``[a0, b0, a1, b1, ...]`` of wire numbers; the
    crossover is the default, cxTwoPoint with probability 0.5."""

    mutation: GenomeMutation = operator_field(
        GenomeMutation,
        # about 2 of 120 wire numbers for 60 comparators: a comparator or two moved per child
        {"operator": "mutUniformInt", "probability": 1.0, "indpb": 0.02},
        "a mutation of deap.tools (operator, probability, its arguments; low/up are the wire range)",
    )


class ParasiteOperators(GenomeOperators):
    """Variation of parasites: genomes are the flat list of their vectors' bits, vector after vector."""

    # the default mutation, mutFlipBit with indpb 0.01: about 3 of 320 bits for 20 vectors of 16 wires


__all__ = ["HostOperators", "ParasiteOperators"]
