"""``evogan sweep`` on the tiny recipe: a run per seed and variation, one line each, resumed by key,
a failing variation reported without stopping the others; the planning helpers alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from evogan.cli import _attach_commands, cli
from evogan.errors import UserError
from evogan.sweep import Job, Sweep, configurations, label, parse_variations, read_keys, run_key, split_values

_attach_commands()


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_values_split_at_top_level_commas_only() -> None:
    tables = ['{use="own_pair"}', '{use="g_mixture", a=[1,2]}']
    assert split_values(",".join(tables)) == tables
    assert split_values('1,2, "a,b"') == ["1", "2", '"a,b"']
    variations = parse_variations(["population.size=1,2", 'selection={use="tournament"}'])
    assert variations == [("population.size", ["1", "2"]), ("selection", ['{use="tournament"}'])]
    assert configurations(variations) == [
        {"population.size": "1", "selection": '{use="tournament"}'},
        {"population.size": "2", "selection": '{use="tournament"}'},
    ]
    assert configurations([]) == [{}] and label({}) == "recipe"
    for bad in (["size"], ["=1,2"], ["a=1,,2"], ["a=1", "a=2"]):
        with pytest.raises(UserError):
            parse_variations(bad)


def test_the_key_ignores_the_digest_and_reads_back(tmp_path: Path) -> None:
    key = run_key(Path("r.toml"), {"a": "1"}, 3, 10, ["run.x=1"])
    assert json.loads(key) == {"recipe": "r.toml", "vary": {"a": "1"}, "seed": 3, "generations": 10, "set": ["run.x=1"]}
    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps({"key": key}) + "\n{half a li", encoding="utf-8")
    assert read_keys(log) == {key} and read_keys(tmp_path / "none.jsonl") == set()


def test_a_stopped_sweep_launches_nothing(tmp_path: Path) -> None:
    runner = Sweep(jobs=1, threads=1, sets=(), generations=1, along=False)
    runner.stop()
    job = Job(tmp_path / "r.toml", 1, {}, "k", tmp_path / "run")
    assert runner.run(job).status == "stopped" and not (tmp_path / "run").exists()


def sweep_args(recipe: Path, tmp_path: Path, generations: int, *more: str) -> list[str]:
    return [
        "sweep", str(recipe), "--seeds", "1", "--generations", str(generations), "--jobs", "2",
        "--log", str(tmp_path / "sweep.jsonl"), "--output-dir", str(tmp_path / "sweep-runs"), *more,
    ]  # fmt: skip


def test_sweep_logs_a_line_per_run_resumes_and_reports_a_failing_variation(tiny_recipe, tmp_path: Path) -> None:
    recipe, log = tiny_recipe(generations=1), tmp_path / "sweep.jsonl"
    args = sweep_args(recipe, tmp_path, 1, "--vary", 'problem.pairing={use="own_pair"},{use="nope"}')
    first = invoke(*args)
    assert first.exit_code == 1, first.output
    assert "unknown pairing 'nope'" in first.output and "1 of 2 runs failed" in first.output
    lines = [json.loads(text) for text in log.read_text(encoding="utf-8").splitlines()]
    assert len(lines) == 1
    record = lines[0]
    assert record["seed"] == 1 and record["vary"] == {"problem.pairing": '{use="own_pair"}'}
    assert record["config"] == 'problem.pairing={use="own_pair"}' and record["generations"] == 1
    assert set(record["test"]) == {"tvd", "modes_covered", "hq_fraction"}
    assert record["validation"] and record["mean_over_cells"]["generator"] and "along" not in record
    assert record["recipe"] == str(recipe) and len(record["recipe_digest"]) == 16
    assert record["metric"] == {"name": "modes", "primary": "tvd", "lower_is_better": True}
    assert record["wall_s"] > 0 and record["cpu_s"] > 0 and len(record["machine"]["load"]) == 3
    assert record["evogan"] and record["threads"] >= 1
    assert record["steps"] == 4 and record["training_flops"] > 0  # 4 batches, each a G step (evogan_gan.cost)
    run_dir = Path(record["run_dir"])
    assert run_dir.parent == tmp_path / "sweep-runs" and (run_dir / "summary.json").exists()

    second = invoke(*args)  # the finished run is skipped; the failing one fails again
    assert second.exit_code == 1, second.output
    assert "1 of 2 runs already in" in second.output and "unknown pairing 'nope'" in second.output
    assert len(log.read_text(encoding="utf-8").splitlines()) == 1


@pytest.mark.slow
def test_sweep_along_scores_every_kept_checkpoint(tiny_recipe, tmp_path: Path) -> None:
    result = invoke(*sweep_args(tiny_recipe(generations=2), tmp_path, 2, "--along"))
    assert result.exit_code == 0, result.output
    (record,) = [json.loads(text) for text in (tmp_path / "sweep.jsonl").read_text(encoding="utf-8").splitlines()]
    assert record["config"] == "recipe"
    assert [(row["generation"], row["steps"]) for row in record["along"]] == [(1, 4), (2, 8)]  # 4 batches each
    assert record["along"][-1]["test"] == record["test"]  # the last kept checkpoint is the run's end
    first, last = record["along"]
    assert last["training_flops"] == record["training_flops"] == pytest.approx(2 * first["training_flops"])
    compared = invoke("compare", str(tmp_path / "sweep.jsonl"), "--json")
    assert compared.exit_code == 0, compared.output
    assert [row["steps"] for row in json.loads(compared.stdout)["rows"]] == [4, 8]


def test_bad_sweep_arguments_are_one_line_errors(tmp_path: Path) -> None:
    missing = invoke("sweep", str(tmp_path / "none.toml"), "--seeds", "1")
    assert missing.exit_code == 2 and "recipe not found" in missing.output
    recipe = tmp_path / "r.toml"
    recipe.write_text("", encoding="utf-8")
    twice = invoke("sweep", str(recipe), "--seeds", "1", "1")
    assert twice.exit_code == 2 and "a seed is given twice" in twice.output
    vary = invoke("sweep", str(recipe), "--seeds", "1", "--vary", "size")
    assert vary.exit_code == 2 and "expected KEY=V1,V2" in vary.output
    before = invoke("sweep", "--seeds", "1", "2", str(tmp_path / "none.toml"))  # seeds first: still one recipe
    assert before.exit_code == 2 and f"{tmp_path / 'none.toml'}: recipe not found" in before.output
    two = invoke("sweep", str(recipe), "other.toml", "--seeds", "1")
    assert two.exit_code == 2 and "expected one RECIPE and integer seeds" in two.output


@pytest.mark.slow
def test_ctrl_c_stops_launching_and_keeps_the_log_whole(tiny_recipe, tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    recipe, log = tiny_recipe(generations=40), tmp_path / "sweep.jsonl"
    runs = tmp_path / "sweep-runs"
    command = [sys.executable, "-m", "evogan", "sweep", str(recipe), "--seeds", "1", "2", "--log", str(log)]
    command += ["--output-dir", str(runs), "--jobs", "1"]
    sweep = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=os.environ.copy())
    deadline = time.monotonic() + 60
    while not any(runs.glob("*/checkpoints/*")) and time.monotonic() < deadline:  # the first run is training
        time.sleep(0.2)
    sweep.send_signal(signal.SIGINT)
    output, _ = sweep.communicate(timeout=120)
    assert sweep.returncode == 130, output
    assert "0 runs logged" in output.decode() and "2 stopped" in output.decode()
    assert not log.exists() or log.read_text(encoding="utf-8") == ""
    assert len(list(runs.iterdir())) == 1  # the second run never started
