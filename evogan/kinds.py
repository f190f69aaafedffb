"""Every component kind, in the order `evogan components` prints them: the generic kinds
(:data:`evogan.api.KINDS`) and the adversarial problem's (:data:`evogan.adversarial.contracts.KINDS`). The
registry, the registration hookspecs and the reference docs follow from :data:`KINDS`.
"""

from __future__ import annotations

from typing import Any

from evogan import api
from evogan.adversarial import contracts

KINDS: tuple[type[api.Component[Any]], ...] = (
    api.Topology,
    api.Selection,
    contracts.Mutation,
    contracts.SparsityController,
    api.Problem,
    contracts.Dataset,
    contracts.Networks,
    contracts.Loss,
    contracts.Augment,
    contracts.Metric,
    api.Transport,
    contracts.Pairing,
)
assert set(KINDS) == {*api.KINDS, *contracts.KINDS}, "a kind is listed in evogan.api or the contracts only"

__all__ = ["KINDS"]
