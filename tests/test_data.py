"""Data sources and data dieting: each cell's share of the samples, stable across processes and resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from evogan_gan.data import TensorSource
from evogan_gan.problem import GanProblem

from evogan.engine.run import build_settings
from evogan.errors import RecipeError, UserError
from evogan.plugins import make_plugin_manager
from evogan.recipe import load
from evogan.registry import Registries
from evogan.runtime.single import prepare, run_in_process

DIET = "problem.data.sampling_ratio=0.5"


def problem_of(path: Path, *overrides: str) -> GanProblem:
    registries = Registries.from_plugin_manager(make_plugin_manager())
    recipe = load(path, registries, overrides)
    problem = build_settings(recipe, registries, None, torch.device("cpu")).problem
    assert isinstance(problem, GanProblem)
    return problem


def rows(problem: GanProblem, cell: int) -> torch.Tensor:
    source = problem.cell_source(cell)
    assert isinstance(source, TensorSource) and source.rows is not None
    return source.rows


def test_a_subset_serves_only_its_rows() -> None:
    source = TensorSource(torch.arange(100.0).unsqueeze(1))
    part = source.subset(torch.tensor([3, 5, 7, 11]))
    assert len(part) == 4 and part.sample_shape == (1,)
    generator = torch.Generator().manual_seed(0)
    seen = torch.cat(list(part.batches(2, 6, generator=generator))).flatten().tolist()
    assert len(seen) == 12 and set(seen) == {3.0, 5.0, 7.0, 11.0}
    assert set(part.sample(10, generator=generator).flatten().tolist()) <= {3.0, 5.0, 7.0, 11.0}
    assert part.subset(torch.tensor([1, 3])).sample(2, generator=generator).flatten().sort().values.tolist() == [
        5.0,
        11.0,
    ]


def test_each_cell_gets_its_own_share_from_the_seed_and_the_cell_alone(tiny_recipe) -> None:
    path = tiny_recipe(seed=3)
    everyone = problem_of(path, DIET)  # one process holding all four cells, asked in order
    shares = [rows(everyone, cell) for cell in range(4)]
    assert all(len(share) == 256 for share in shares)  # half of the tiny recipe's 512 samples
    assert len({tuple(share.tolist()) for share in shares}) == 4  # every cell its own share
    assert all(len(set(share.tolist())) == 256 for share in shares)  # drawn without replacement
    worker = problem_of(path, DIET, "run.workers=2", "run.generations=9")  # a worker asked for cell 3 only
    assert torch.equal(rows(worker, 3), shares[3])
    assert not torch.equal(rows(problem_of(path, DIET, "run.seed=4"), 3), shares[3])
    batches = list(everyone.training_batches(stream=torch.Generator().manual_seed(0), cell=2))
    data = everyone.source
    assert isinstance(data, TensorSource)
    allowed = {tuple(row.tolist()) for row in data.samples[shares[2]]}
    assert all(tuple(sample.tolist()) in allowed for batch in batches for sample in batch)
    assert everyone.describe()["samples_per_cell"] == 256


def test_ratio_one_serves_the_whole_dataset(tiny_recipe) -> None:
    problem = problem_of(tiny_recipe())
    assert problem.cell_source(2) is problem.source and "samples_per_cell" not in problem.describe()


def test_resume_with_data_dieting_reproduces_an_uninterrupted_run(tiny_recipe) -> None:
    path = tiny_recipe(seed=3, generations=3)

    def metrics(run_dir: Path) -> list[dict]:
        return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]

    straight = prepare(path, overrides=[DIET])
    run_in_process(straight)
    calls = {"n": 0}

    def stop() -> bool:
        calls["n"] += 1
        return calls["n"] >= 2

    interrupted = prepare(path, overrides=[DIET, "run.checkpoint_every=1"])
    run_in_process(interrupted, stop=stop)
    assert max(r["generation"] for r in metrics(interrupted.run_dir.path)) == 2
    run_in_process(prepare(None, resume_dir=interrupted.run_dir.path))
    assert metrics(interrupted.run_dir.path) == metrics(straight.run_dir.path)
    undieted = prepare(path)
    run_in_process(undieted)
    assert metrics(undieted.run_dir.path) != metrics(straight.run_dir.path)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("problem.data.sampling_ratio=0", r"problem\.data\.sampling_ratio: must be > 0"),
        ("problem.data.sampling_ratio=1.5", r"problem\.data\.sampling_ratio: must be <= 1"),
        ('problem.data.sampling_ratio="half"', r"problem\.data\.sampling_ratio: must be a valid number"),
        ('problem.data={use="mnist", download="maybe"}', r"problem\.data\.download: must be a valid boolean"),
        ('problem.data={use="fashion_mnist", download=2}', r"problem\.data\.download: must be a valid boolean"),
    ],
)
def test_bad_data_options_are_one_line_recipe_errors(tiny_recipe, override: str, message: str) -> None:
    with pytest.raises(RecipeError, match=message) as caught:
        problem_of(tiny_recipe(), override)
    assert len(caught.value.lines) == 1


def test_a_share_smaller_than_a_batch_is_refused(tiny_recipe) -> None:
    with pytest.raises(UserError, match=r"problem\.data\.sampling_ratio: 0\.05 leaves each cell 26 of the "
                       r"dataset's 512 samples, fewer than problem\.batch_size 32"):
        problem_of(tiny_recipe(), "problem.data.sampling_ratio=0.05")


@pytest.mark.slow
def test_two_workers_train_every_cell_on_the_share_one_process_gives_it(tiny_recipe) -> None:
    from evogan.runtime.launcher import launch

    path = tiny_recipe(seed=7, generations=2)
    single = prepare(path, overrides=[DIET])
    run_in_process(single)
    workers = prepare(path, overrides=[DIET, "run.workers=2"])
    launch(workers)

    def records(run_dir: Path) -> list[dict]:
        lines = (run_dir / "metrics.jsonl").read_text().splitlines()
        return sorted((json.loads(line) for line in lines), key=lambda r: (r["generation"], r["cell"]))

    assert records(workers.run_dir.path) == records(single.run_dir.path)
