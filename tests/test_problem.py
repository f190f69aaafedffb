"""The GAN problem's discriminator step: real and fake as one batch (``problem.d_batch``)."""

from __future__ import annotations

import math

import pytest
from click.testing import CliRunner
from test_run import metrics, run  # pytest puts tests/ on sys.path (rootdir conftest, prepend mode)
from test_vectorized import BatchNormPlugin
from torch import nn

from evogan.builtin.gan.problem import batch_dependent
from evogan.cli import cli
from evogan.plugins import registered


def test_batch_dependent_layers_are_named() -> None:
    assert batch_dependent(nn.Sequential(nn.Linear(2, 3), nn.LayerNorm(3))) == ""
    assert batch_dependent(nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3))) == "BatchNorm1d (1)"


def test_joint_and_separate_discriminator_batches_agree(tiny_recipe) -> None:
    path = tiny_recipe(seed=6, generations=2)
    joint, separate = metrics(run(path, 'problem.d_batch="joint"')), metrics(run(path, 'problem.d_batch="separate"'))
    assert metrics(run(path)) == joint  # auto: joint, the networks have no BatchNorm
    for a, b in zip(joint, separate, strict=True):
        for key in ("g_loss", "d_loss", "mixture_score"):
            assert math.isclose(a[key], b[key], rel_tol=1e-4, abs_tol=1e-6), key


def test_auto_keeps_separate_batches_for_batchnorm_and_joint_there_is_an_error(tiny_recipe) -> None:
    path = tiny_recipe(generations=1)
    with registered(BatchNormPlugin()):
        auto = metrics(run(path, 'problem.network={use="bn_mlp"}'))
        assert auto == metrics(run(path, 'problem.network={use="bn_mlp"}', 'problem.d_batch="separate"'))
        sets = ["--set", 'problem.network={use="bn_mlp"}', "--set", 'problem.d_batch="joint"']
        result = CliRunner().invoke(cli, ["run", str(path), *sets, "--quiet"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "problem.d_batch: joint needs a discriminator without batch-dependent layers; bn_mlp has BatchNorm1d" in (
        result.output
    )


@pytest.mark.parametrize("value", ['"both"', "1"])
def test_bad_d_batch_values_are_refused(tiny_recipe, value: str) -> None:
    result = CliRunner().invoke(cli, ["validate", str(tiny_recipe()), "--set", f"problem.d_batch={value}"])
    assert result.exit_code == 2 and "problem.d_batch" in result.output and "Traceback" not in result.output
