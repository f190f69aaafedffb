"""The GAN problem: the discriminator step's real and fake as one batch (``problem.d_batch``); scores per
stream (sample counts, real reference halves)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from evogan_gan.data import TensorSource
from evogan_gan.problem import GanProblem, batch_dependent
from evogan_gan.toy import MixtureSource
from test_run import PROBE, ProbePlugin, metrics, run  # pytest puts tests/ on sys.path (rootdir conftest)
from test_vectorized import BatchNormPlugin
from torch import nn

from evogan import recipe as recipes
from evogan.adversarial.contracts import DataSource
from evogan.cli import cli
from evogan.engine.run import build_settings
from evogan.plugins import make_plugin_manager, registered
from evogan.registry import Registries


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


# ------------------------------------------------------------------------------------------ score streams
def probe_problem(path: Path, *overrides: str) -> GanProblem:
    registries = Registries.from_plugin_manager(make_plugin_manager(extra=[ProbePlugin()]))
    recipe = recipes.load(path, registries, [PROBE, *overrides])
    problem = build_settings(recipe, registries, None, torch.device("cpu")).problem
    assert isinstance(problem, GanProblem)
    return problem


def rows(source: DataSource) -> set[int]:
    assert isinstance(source, TensorSource)
    return set(range(len(source))) if source.rows is None else set(source.rows.tolist())


def test_validation_and_test_scores_use_disjoint_halves_of_the_real_data(tiny_recipe) -> None:
    problem = probe_problem(tiny_recipe())
    validation, test = rows(problem.metric.prepared_on), rows(problem.test_metric.prepared_on)  # type: ignore[attr-defined]
    assert len(validation) == len(test) == 256 and not validation & test and validation | test == set(range(512))
    assert rows(probe_problem(tiny_recipe(seed=9)).metric.prepared_on) == validation  # the same split for every seed
    split = "split: validation against 256 real samples, test against the other 256"
    assert problem.describe()["test_reference"] == split
    shared = probe_problem(tiny_recipe(), 'problem.test_reference="shared"')
    assert rows(shared.metric.prepared_on) == rows(shared.test_metric.prepared_on) == set(range(512))  # type: ignore[attr-defined]
    assert shared.describe()["test_reference"] == "shared: validation and test against all 512 real samples"


def test_a_source_that_cannot_be_split_is_shared(tiny_recipe, monkeypatch) -> None:
    def refuse(self: TensorSource, indices: torch.Tensor) -> TensorSource:
        raise NotImplementedError("no subsets here")

    monkeypatch.setattr(MixtureSource, "subset", refuse)
    problem = probe_problem(tiny_recipe())
    assert problem.metric.prepared_on is problem.test_metric.prepared_on  # type: ignore[attr-defined]
    assert problem.describe()["test_reference"] == "shared: dataset gaussian_ring cannot be split"


def test_each_stream_draws_its_own_sample_count(tiny_recipe) -> None:
    problem = probe_problem(tiny_recipe(), "problem.test_samples=50")
    network = problem.create("generator", generator=torch.Generator().manual_seed(0))
    noise = torch.Generator().manual_seed(1)
    assert problem.evaluate_on([network], [1.0], stream="validation", generator=noise)["n"] == 128
    assert problem.evaluate_on([network], [1.0], stream="test", generator=noise)["n"] == 50
    same = probe_problem(tiny_recipe())  # test_samples 0: as many as score_samples
    assert same.evaluate_on([network], [1.0], stream="test", generator=noise)["n"] == 128


@pytest.mark.parametrize(("key", "value"), [("test_samples", "-1"), ("test_reference", '"halves"')])
def test_bad_score_stream_keys_are_refused(tiny_recipe, key: str, value: str) -> None:
    result = CliRunner().invoke(cli, ["validate", str(tiny_recipe()), "--set", f"problem.{key}={value}"])
    assert result.exit_code == 2 and f"problem.{key}" in result.output and "Traceback" not in result.output
