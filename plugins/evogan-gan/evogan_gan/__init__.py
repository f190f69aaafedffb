"""The GAN problem plugin: the problem itself plus the 2-D toy data, networks, losses and metric.

The distribution's other plugin modules are listed in :data:`PLUGINS`, as its entry points name them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from evogan.hookspecs import Register, hookimpl

if TYPE_CHECKING:
    from evogan.recipe import Recipe
    from evogan.registry import Registries
from evogan_gan.losses import LOSSES
from evogan_gan.problem import GanProblem
from evogan_gan.toy import TOY_DATASETS, TOY_METRICS, TOY_NETWORKS

# Every plugin module of this distribution (its entry points of group ``evogan``), for a plugin manager
# made without autoload: ``make_plugin_manager(autoload=False, modules=PLUGINS)``.
PLUGINS: tuple[str, ...] = (
    "evogan_gan",
    "evogan_gan.sparsity",
    "evogan_gan.images",
    "evogan_gan.image_networks",
    "evogan_gan.image_metrics",
    "evogan_gan.augment",
    "evogan_gan.sngan",
)


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
