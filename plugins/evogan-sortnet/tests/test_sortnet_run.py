"""Whole runs: a 2x2 grid through the Python API (fast), and the CLI in one process, in two worker
processes and resumed (slow). Records must agree across all of them but for the per-process counters."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from evogan.cli import _attach_commands, cli
from evogan.sweep import training_cost
from evogan.testing import run_tiny

# Counted per process (see evaluate's docstring): they differ between workers and after a resume.
PER_PROCESS = ("evaluations", "found", "first_correct_at", "smallest_correct", "smallest_correct_at")

RECIPE = """
[run]
seed = {seed}
generations = {generations}
checkpoint_every = 1
samples_every = 0
device = "cpu"
threads = 1
output_dir = "{output}"

[topology]
use = "torus"
rows = 2
cols = 2

[population]
size = 2

[selection]
use = "tournament"
size = 2

[mixture]
enabled = false

[problem]
use = "sortnet"
inputs = 8
comparators = 24
vectors = 8

[problem.host.mutation]
operator = "mutUniformInt"
indpb = 0.05
"""


def write_recipe(directory: Path, *, seed: int = 3, generations: int = 4) -> Path:
    path = directory / f"sortnet-{seed}-{generations}.toml"
    text = RECIPE.format(seed=seed, generations=generations, output=directory / "runs")
    path.write_text(text, encoding="utf-8")
    return path


def records(run_dir: Path) -> list[dict[str, Any]]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return sorted((json.loads(line) for line in lines), key=lambda r: (r["generation"], r["cell"]))


def without_counters(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {**row, "best_metrics": {k: v for k, v in row["best_metrics"].items() if k not in PER_PROCESS}}
        for row in rows
    ]


def test_a_2x2_grid_runs_through_the_python_api_and_repeats_itself(tmp_path: Path) -> None:
    recipe = write_recipe(tmp_path)
    first, second = run_tiny(recipe), run_tiny(recipe)
    assert (first / "metrics.jsonl").read_bytes() == (second / "metrics.jsonl").read_bytes()
    rows = records(first)
    assert [(r["generation"], r["cell"]) for r in rows] == [(g, c) for g in range(1, 5) for c in range(4)]
    assert {"host_loss", "parasite_loss", "neighbourhood_host", "neighbourhood_parasite"} <= set(rows[0])
    evaluations = [r["best_metrics"]["evaluations"] for r in rows]
    assert evaluations == sorted(evaluations) and evaluations[0] > 0  # one process: a running count
    summary = json.loads((first / "summary.json").read_text())
    assert summary["problem"]["inputs"] == 8 and 0 < summary["chosen"]["test"]["sorted"] <= 1
    assert training_cost(first) == {}  # no plugin counts a sorting network's training FLOPs (evogan sweep)
    other = run_tiny(write_recipe(tmp_path, seed=4))
    assert (other / "metrics.jsonl").read_bytes() != (first / "metrics.jsonl").read_bytes()


def test_without_a_mixture_records_and_summary_name_the_best_individual(tmp_path: Path) -> None:
    """The recipe disables the mixture: no weights and no mixture keys in the records, no ``best_mixture``
    in the summary, which names what was chosen in the problem's terms; evaluate and load agree."""
    import evogan

    run_dir = run_tiny(write_recipe(tmp_path, generations=2))
    for row in records(run_dir):
        assert not {"mixture", "mixture_score", "mixture_metrics"} & set(row)
        assert row["best_score"] == 1 - row["best_metrics"]["sorted"]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert not [key for key in summary if key.startswith("best_mixture")]
    chosen = summary["chosen"]
    assert chosen["what"] == "individual" and chosen["role"] == "host" and chosen["cell"] == summary["best_cell"]
    assert chosen["test"] == summary["cells"][str(chosen["cell"])]["host"]
    assert set(summary["mean_over_cells"]) == {"host"}
    for cell in summary["cells"].values():
        assert not {"mixture", "mixture_score", "weights"} & set(cell) and "score" in cell["validation"]
    assert evogan.load(run_dir).summary == summary
    evaluated = invoke("evaluate", str(run_dir), "--json")
    assert evaluated.exit_code == 0, evaluated.output
    result = json.loads(evaluated.output)
    assert "best_mixture" not in result and result["chosen"]["what"] == "individual"

    def settled(metrics: dict[str, float]) -> dict[str, float]:
        return {k: v for k, v in metrics.items() if k not in PER_PROCESS}

    assert result["chosen"]["cell"] == chosen["cell"]
    assert settled(result["chosen"]["test"]) == settled(chosen["test"])
    table = invoke("evaluate", str(run_dir))
    assert table.exit_code == 0, table.output
    assert "best host: cell" in table.output and "mixture" not in table.output
    along = invoke("evaluate", str(run_dir), "--along")
    assert along.exit_code == 0, along.output
    assert "the best host is chosen on validation" in along.output and "mixture" not in along.output


def invoke(*args: str) -> Any:
    _attach_commands()
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def run_dir_of(output: Path) -> Path:
    (found,) = output.glob("sortnet-*")
    return found


@pytest.mark.slow
def test_the_cli_runs_in_one_process_in_two_workers_and_resumed_with_the_same_records(tmp_path: Path) -> None:
    recipe = write_recipe(tmp_path, generations=4)
    runs = {}
    for name, extra in (("single", ()), ("workers", ("--workers", "2")), ("cut", ("--generations", "2"))):
        output = tmp_path / name
        result = invoke("run", str(recipe), "--output-dir", str(output), "--quiet", *extra)
        assert result.exit_code == 0, result.output
        runs[name] = run_dir_of(output)
    resumed = invoke("run", "--resume", str(runs["cut"]), "--generations", "4", "--quiet")
    assert resumed.exit_code == 0, resumed.output
    single = records(runs["single"])
    assert len(single) == 16
    assert without_counters(records(runs["workers"])) == without_counters(single)
    assert without_counters(records(runs["cut"])) == without_counters(single)
    # the counters restart with each process: two workers each count their own cells' tests
    assert records(runs["workers"])[-1]["best_metrics"]["evaluations"] < single[-1]["best_metrics"]["evaluations"]
    evaluated = invoke("evaluate", str(runs["single"]), "--json")
    assert evaluated.exit_code == 0, evaluated.output


# evogan-gan as if it were not installed: its module cannot be imported and its entry points are blocked
WITHOUT_GAN = """
import sys
sys.modules["evogan_gan"] = None
from evogan.cli import main
main()
"""


def test_the_engine_runs_sorting_networks_without_the_gan_problems_distribution(tmp_path: Path) -> None:
    """The generic core needs nothing of the GAN problem (issue 38): a whole run, its summary and records."""
    from evogan.plugins import distribution_modules

    recipe = write_recipe(tmp_path, generations=2)
    env = {**os.environ, "EVOGAN_BLOCK_PLUGINS": ",".join(distribution_modules("evogan-gan"))}
    command = [sys.executable, "-c", WITHOUT_GAN, "run", str(recipe), "--quiet"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "evogan_gan" not in done.stdout + done.stderr  # no plugin failed to load
    run_dir = run_dir_of(tmp_path / "runs")
    assert len(records(run_dir)) == 8 and (run_dir / "summary.json").is_file()


def test_the_shipped_recipe_runs_a_generation(tmp_path: Path) -> None:
    recipe = Path(__file__).resolve().parents[3] / "recipes" / "sortnet.toml"
    overrides = ["run.generations=1", f"run.output_dir={json.dumps(str(tmp_path))}", "topology.rows=2"]
    run_dir = run_tiny(recipe, overrides=overrides)
    (row, *_) = records(run_dir)
    assert row["best_metrics"]["evaluations"] > 0 and 0 < row["best_metrics"]["sorted"] < 1
    assert "mixture" not in row and "mixture_score" not in row  # the recipe disables the mixture


def test_sparsity_on_a_problem_without_generator_and_discriminator_is_a_one_line_error(tmp_path: Path) -> None:
    recipe = write_recipe(tmp_path)
    sparse = 'problem.sparsity={use="static"}'
    result = invoke("run", str(recipe), "--set", sparse, "--output-dir", str(tmp_path / "out"))
    assert result.exit_code != 0
    assert result.output.strip().splitlines() == [
        f"error: {recipe}: problem.sparsity: unknown key"
    ]
    assert not list((tmp_path / "out").glob("*"))  # no run directory, no checkpoint


def test_sample_and_export_say_in_one_line_that_networks_have_no_pictures(tmp_path: Path) -> None:
    run_dir = run_tiny(write_recipe(tmp_path, generations=1))
    drawn = invoke("sample", str(run_dir), "-o", str(tmp_path / "x.png"))
    assert drawn.exit_code != 0 and not (tmp_path / "x.png").exists()
    expected = "error: problem sortnet: draws no pictures of its individuals (it has no save_pictures)"
    assert drawn.output.strip() == expected
    exported = invoke("export", str(run_dir), "-o", str(tmp_path / "x.pt2"))
    assert exported.exit_code != 0 and "cannot be exported" in exported.output


def test_a_0_2_recipe_with_mutation_none_loads_with_one_warning_and_drops_it(tmp_path: Path) -> None:
    """0.2 made every recipe name a mutation (the sortnet recipe wrote ``use = "none"``) and gave it a
    pairing it never used; 0.3 reads such a recipe, says once per table that it is ignored, and drops it."""
    from evogan import recipe as recipes
    from evogan.plugins import make_plugin_manager
    from evogan.registry import Registries

    registries = Registries.from_plugin_manager(make_plugin_manager())
    path = write_recipe(tmp_path)
    now = recipes.load(path, registries)
    old = tmp_path / "sortnet-0-2.toml"
    old.write_text(path.read_text() + '\n[mutation]\nuse = "none"\n\n[pairing]\nuse = "own_pair"\n')
    with pytest.warns(FutureWarning) as caught:
        then = recipes.load(old, registries)
    assert sorted(str(w.message).split(":")[0] for w in caught) == [
        "[mutation] is deprecated since evogan 0.3.0 and ignored",
        "[pairing] is deprecated since evogan 0.3.0 and ignored",
    ]
    assert "problem sortnet has no pairing" in str(caught[0].message)
    assert then.data == now.data and then.choices == now.choices


def test_batched_fitness_of_all_cells_gives_the_cell_by_cell_records_bit_for_bit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 39: the problem plays every local cell's fitness games as one batch (``prefetch_fitness``);
    the records, the per-process counters included (the same tests are counted at the same points), are
    those of the cell-by-cell path. A 3x3 grid on 4 wires finds correct networks, so verification and
    discoveries are covered."""
    from evogan_sortnet.problem import SortingNetworks

    from evogan.api import Problem

    recipe = write_recipe(tmp_path, generations=25)
    overrides = [
        "topology.rows=3", "topology.cols=3", "population.size=1",
        "problem.inputs=4", "problem.comparators=8", "problem.vectors=4",
    ]
    from evogan_sortnet import networks

    tested: list[int] = []
    shipped = networks.sorted_counts

    def counting(*args: Any) -> Any:
        tested.append(1)
        return shipped(*args)

    monkeypatch.setattr(networks, "sorted_counts", counting)
    batched = run_tiny(recipe, overrides=overrides)
    calls = len(tested)
    monkeypatch.setattr(SortingNetworks, "prefetch_fitness", Problem.prefetch_fitness)
    alone = run_tiny(recipe, overrides=overrides)
    assert len(tested) - 2 * calls >= 25 * 9  # every cell's fitness phase was answered from the batch
    assert (batched / "metrics.jsonl").read_bytes() == (alone / "metrics.jsonl").read_bytes()
    last = records(batched)[-1]["best_metrics"]
    assert last["found"] == 1.0 and 0 < last["first_correct_at"] < last["evaluations"]
