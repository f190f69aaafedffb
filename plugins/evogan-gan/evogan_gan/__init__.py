"""The GAN problem plugin: the problem itself plus the 2-D toy data, networks, losses and metric.

The distribution's other plugin modules are named by its entry-point table (pyproject.toml), the one list:
``evogan.plugins.distribution_modules("evogan-gan")``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from evogan.hookspecs import Register, hookimpl
from evogan_gan.losses import LOSSES
from evogan_gan.problem import GanProblem
from evogan_gan.toy import TOY_DATASETS, TOY_METRICS, TOY_NETWORKS

if TYPE_CHECKING:
    from evogan.recipe import Recipe
    from evogan.registry import Registries


@hookimpl
def evogan_register_problems(register: Register) -> None:
    register(GanProblem)


@hookimpl
def evogan_register_datasets(register: Register) -> None:
    for dataset in TOY_DATASETS:
        register(dataset)


@hookimpl
def evogan_register_networks(register: Register) -> None:
    for networks in TOY_NETWORKS:
        register(networks)


@hookimpl
def evogan_register_losses(register: Register) -> None:
    for loss in LOSSES:
        register(loss)


@hookimpl
def evogan_register_metrics(register: Register) -> None:
    for metric in TOY_METRICS:
        register(metric)


@hookimpl
def evogan_training_cost(recipe: Recipe, registries: Registries) -> dict[str, list[float]] | None:
    """The GAN problem's training FLOPs and generator steps (:func:`evogan_gan.cost.cumulative`); None for
    another problem."""
    if not issubclass(recipe.choices["problem"].component, GanProblem):
        return None
    from evogan_gan.cost import cumulative  # imports torch: not at start-up

    return cumulative(recipe, registries) or None
