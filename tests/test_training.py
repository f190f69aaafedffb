"""evogan.run: training from Python, from a file, TOML text or a dict, with the CLI's errors as exceptions."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

import evogan
from evogan.cli import cli
from evogan.errors import UserError
from evogan.testing import write_tiny_recipe


def records(run_dir: Path) -> list[str]:
    """The run's records without wall-clock fields, one JSON line each, as written."""
    import json

    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    for line in lines:
        for key in [k for k in line if "time" in k or k.endswith("_s") or k == "seconds"]:
            del line[key]
    return [json.dumps(line, sort_keys=True) for line in lines]


def test_run_from_a_file_trains_as_the_cli_does(tmp_path: Path) -> None:
    recipe = write_tiny_recipe(tmp_path, generations=2)
    trained = evogan.run(recipe, seed=3)
    assert trained.generations[-1] == 2 and len(trained.scores()) == 4
    assert trained.summary is not None and trained.summary["generations"] == 2
    result = CliRunner().invoke(cli, ["run", str(recipe), "--seed", "3", "--quiet"])
    assert result.exit_code == 0, result.output
    by_cli = max((tmp_path / "runs").iterdir(), key=lambda p: p.stat().st_mtime)
    assert by_cli != trained.path
    assert records(by_cli) == records(trained.path)  # one seed, the same numbers from either door


def test_run_from_toml_text_and_from_a_dict_with_set_as_a_mapping(tmp_path: Path) -> None:
    text = write_tiny_recipe(tmp_path, generations=1).read_text()
    from_text = evogan.run(text, set={"run.name": "texted", "topology.cols": 1})
    assert from_text.path.name.startswith("texted-") and len(from_text.scores()) == 2
    data = tomllib.loads(text)
    from_dict = evogan.run(data, set=["topology.cols=1"], output_dir=tmp_path / "elsewhere")
    assert from_dict.path.parent == tmp_path / "elsewhere" and from_dict.path.name.startswith("recipe-")
    assert records(from_dict.path) == records(from_text.path)


def test_user_mistakes_are_one_line_errors_that_leave_nothing_behind(tmp_path: Path) -> None:
    recipe = write_tiny_recipe(tmp_path, generations=1)
    with pytest.raises(UserError, match=r"problem\.batch_size") as error:
        evogan.run(recipe, set={"problem.batch_size": -1})
    assert "\n" not in str(error.value) and str(recipe) in str(error.value)
    with pytest.raises(UserError, match=r"^recipe \(TOML text\): invalid TOML"):
        evogan.run("[run\nseed = 1\n")
    with pytest.raises(UserError, match=r"missing\.toml: recipe not found"):
        evogan.run(tmp_path / "missing.toml")
    with pytest.raises(UserError, match="expected a list of KEY=VALUE strings"):
        evogan.run(recipe, set="run.seed=2")  # type: ignore[arg-type]
    with pytest.raises(UserError, match="cannot write"):
        evogan.run(recipe, set={"run.seed": object()})
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


@pytest.mark.slow
def test_run_with_two_workers_returns_every_cell(tmp_path: Path) -> None:
    trained = evogan.run(write_tiny_recipe(tmp_path, generations=2), workers=2)
    assert trained.generations[-1] == 2 and len(trained.scores()) == 4
    assert (trained.path / "logs" / "worker-0001.out").exists()
