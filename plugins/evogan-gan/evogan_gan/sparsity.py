"""Built-in sparsity controllers: dense (default), static, SET, RigL, ADAPT relax and strict.

The masked ones are configurations of :class:`evogan_gan.sparse.controller.MaskedController`; constants and
their defaults follow Wang et al. 2023 ("Balanced Training for Sparse GANs") and its released scripts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from evogan.adversarial.contracts import GeneratorStep, SparsityController
from evogan.api import ComponentOptions, Problem
from evogan.hookspecs import Register, hookimpl
from evogan_gan.sparse.controller import MaskedController
from evogan_gan.sparse.options import AdaptOptions, AdaptStrictOptions, DstOptions, StaticOptions

if TYPE_CHECKING:
    import torch

    from evogan.individual import Individual


class Dense(SparsityController[ComponentOptions]):
    """No masks, no state, no work: the default."""

    name: ClassVar[str] = "dense"
    description: ClassVar[str] = "no sparsity (every weight trains)"
    stackable: ClassVar[bool] = True

    def prepare(self, individual: Individual, *, stream: torch.Generator) -> None:
        pass

    def after_discriminator_step(self, discriminator: Individual) -> None:
        pass

    def after_generator_step(
        self, generator: Individual, discriminator: Individual, step: GeneratorStep, problem: Problem
    ) -> None:
        pass

    def end_generation(self, generators: Sequence[Individual], discriminators: Sequence[Individual]) -> None:
        pass

    def metrics(self, generator: Individual, discriminator: Individual) -> dict[str, float]:
        return {}

    def check(self, individual: Individual) -> None:
        from evogan_gan.sparse.state import validate_sparse_state  # imports torch: not at start-up

        validate_sparse_state(individual, controller=self.name, masked=False)

    def wire_state(self, state: Mapping[str, Any]) -> dict[str, Any]:
        from evogan_gan.sparse.wire import sparse_meta  # imports torch: not at start-up

        return sparse_meta(state)

    def check_wire_state(self, state: Any, role: str, local: Mapping[str, Any] | None) -> dict[str, Any]:
        from evogan_gan.sparse.wire import check_sparse_meta  # imports torch: not at start-up

        return check_sparse_meta(state, role, local)


class Static(MaskedController):
    name: ClassVar[str] = "static"
    description: ClassVar[str] = "fixed ERK masks for G and D (the Static baseline)"
    Options: ClassVar[type[StaticOptions]] = StaticOptions


class Set(MaskedController):
    name: ClassVar[str] = "set"
    description: ClassVar[str] = "G dynamic sparse training with random regrowth (SDST-SET), D static"
    Options: ClassVar[type[StaticOptions]] = DstOptions
    g_growth = "random"


class RigL(MaskedController):
    name: ClassVar[str] = "rigl"
    description: ClassVar[str] = "G dynamic sparse training with gradient regrowth (SDST-RigL), D static"
    Options: ClassVar[type[StaticOptions]] = DstOptions
    g_growth = "gradient"


class AdaptRelax(MaskedController):
    name: ClassVar[str] = "adapt-relax"
    description: ClassVar[str] = "ADAPT: G RigL + D density driven by the balance ratio, up to 100 %"
    Options: ClassVar[type[StaticOptions]] = AdaptOptions
    g_growth = "gradient"
    adapt = True


class AdaptStrict(MaskedController):
    name: ClassVar[str] = "adapt-strict"
    description: ClassVar[str] = "ADAPT strict: D density capped (50 %); at the cap a weak D gets a DST step"
    Options: ClassVar[type[StaticOptions]] = AdaptStrictOptions
    g_growth = "gradient"
    adapt = True
    strict = True


@hookimpl
def evogan_register_sparsity_controllers(register: Register) -> None:
    for controller in (Dense, Static, Set, RigL, AdaptRelax, AdaptStrict):
        register(controller)
