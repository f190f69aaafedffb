"""The GAN problem plugin: the problem itself plus the 2-D toy data, networks, losses and metric."""

from __future__ import annotations

from evogan.builtin.gan.losses import LOSSES
from evogan.builtin.gan.problem import GanProblem
from evogan.builtin.gan.toy import TOY_DATASETS, TOY_METRICS, TOY_NETWORKS
from evogan.hookspecs import hookimpl


@hookimpl
def evogan_register_problems(register):  # type: ignore[no-untyped-def]
    register(GanProblem)


@hookimpl
def evogan_register_datasets(register):  # type: ignore[no-untyped-def]
    for dataset in TOY_DATASETS:
        register(dataset)


@hookimpl
def evogan_register_networks(register):  # type: ignore[no-untyped-def]
    for networks in TOY_NETWORKS:
        register(networks)


@hookimpl
def evogan_register_losses(register):  # type: ignore[no-untyped-def]
    for loss in LOSSES:
        register(loss)


@hookimpl
def evogan_register_metrics(register):  # type: ignore[no-untyped-def]
    for metric in TOY_METRICS:
        register(metric)
