"""The GAN problem plugin: the problem itself plus the 2-D toy data, networks, losses and metric."""

from __future__ import annotations

from evogan.builtin.gan.losses import LOSSES
from evogan.builtin.gan.problem import GanProblem
from evogan.builtin.gan.toy import TOY_DATASETS, TOY_METRICS, TOY_NETWORKS
from evogan.hookspecs import Register, hookimpl


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
