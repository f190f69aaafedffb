"""The grid benchmarks' plumbing (benchmarks/_controls.py): configurations and controls, the training
FLOPs model, one raw log line per run, and tables re-derived from the logs alone."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import _controls
import mode_collapse

from evogan.adversarial.contracts import Pairing
from evogan.plugins import make_plugin_manager
from evogan.recipe import build_nested
from evogan.registry import Registries

SCRIPT = mode_collapse.SCRIPT
# recipes/toy-grid.toml's mlp_2d (latent 64, hidden 128, 2-D samples): per-sample forward FLOPs
F_G = (64 * 128 + 128) + (128 * 128 + 128) + (128 * 2 + 2)
F_D = (2 * 128 + 128) + (128 * 128 + 128) + (128 + 1)


def arguments(*argv: str) -> Any:
    return _controls.arguments(SCRIPT, "doc").parse_args(list(argv))


@pytest.fixture(scope="module")
def registries() -> Registries:
    return Registries.from_plugin_manager(make_plugin_manager())


def test_the_controls_are_named_and_the_lone_gan_gets_the_grids_training_flops(registries) -> None:
    configs = {c.name: c for c in _controls.plan(SCRIPT, arguments("--grids", "1x1", "3x3"), registries)}
    assert set(configs) == {
        "grid-1x1",
        "lone-steps",
        "grid-3x3",
        "lone-flops-3x3",
        "independent-3x3",
        *(
            f"pairing-{name}-3x3"
            for name in ("g_mixture", "g_neighbourhood", "neighbour_share", "own_pair", "reference")
        ),
    }
    assert configs["independent-3x3"].overrides == ('problem.pairing={use="own_pair"}', "population.selection=false")
    # g_mixture's generator step runs the 3x3 von Neumann neighbourhood's five discriminators
    grid = 3 * F_G + 2 * 5 * F_D + 6 * F_D + F_G
    lone = 3 * F_G + 2 * F_D + 6 * F_D + F_G
    assert configs["lone-flops-3x3"].generations == round(100 * 9 * grid / lone) == 1418


def test_training_flops_count_every_cells_steps(registries) -> None:
    args, out = arguments(), Path("/tmp")
    grids = ((_controls.Configuration("", 3, 3, (), 2, ""), 5), (_controls.Configuration("", 1, 1, (), 2, ""), 1))
    for config, faced in grids:
        recipe = _controls.load(SCRIPT, registries, _controls.overrides_of(SCRIPT, args, config, 0, out))
        flops, steps = _controls.training_flops(recipe, registries)
        per_sample = 3 * F_G + 2 * faced * F_D + 6 * F_D + F_G
        assert steps == 2 * 50 and flops == config.rows * config.cols * 2 * 50 * 100 * per_sample


@pytest.mark.parametrize(
    ("egan", "per_step"),
    [
        ("{}", 3 * (3 * F_G + 2 * F_D) + 3 * (F_G + F_D)),  # three children, each scored on a batch
        ("{gamma=0.1}", 3 * (3 * F_G + 2 * F_D) + 3 * (F_G + 3 * F_D) + 3 * F_D),  # and D's gradients
        ('{losses=["mse"]}', 3 * F_G + 2 * F_D),  # one child: the plain step
    ],
)
def test_egan_counts_every_child_and_its_fitness(registries, egan: str, per_step: int) -> None:
    config = _controls.Configuration("", 1, 1, (f"problem.egan={egan}",), 1, "")
    recipe = _controls.load(SCRIPT, registries, _controls.overrides_of(SCRIPT, arguments(), config, 0, Path("/tmp")))
    flops, steps = _controls.training_flops(recipe, registries)
    assert flops == steps * 100 * (per_step + 6 * F_D + F_G)


@pytest.mark.parametrize(
    ("overrides", "faced"),
    [
        ((), 5),
        (('problem.pairing={use="reference"}',), 1),
        (("population.selection=true",), 1),
        (("population.size=2",), 10),
    ],
)
def test_a_generator_step_faces_what_the_pairing_says(registries, overrides: tuple[str, ...], faced: int) -> None:
    config = _controls.Configuration("", 3, 3, overrides, 1, "")
    recipe = _controls.load(SCRIPT, registries, _controls.overrides_of(SCRIPT, arguments(), config, 0, Path("/tmp")))
    pairing = build_nested(registries, Pairing, recipe.choices["problem"].options.pairing)
    assert _controls.discriminators_faced(pairing, recipe, (1, 2, 3, 6), 0) == faced


@pytest.mark.parametrize(
    ("options", "progress", "faced"),
    [("blend=true", 0.0, 5), ("blend=true, fade='linear', fade_until=0.5", 0.6, 1), ("", 0.0, 1)],
)
def test_a_neighbour_share_step_faces_its_blend_until_it_fades(
    registries, options: str, progress: float, faced: int
) -> None:
    table = f'problem.pairing={{use="neighbour_share", generator_share=0.5, {options}}}'.replace(", }", "}")
    config = _controls.Configuration("", 3, 3, (table,), 1, "")
    recipe = _controls.load(SCRIPT, registries, _controls.overrides_of(SCRIPT, arguments(), config, 0, Path("/tmp")))
    pairing = build_nested(registries, Pairing, recipe.choices["problem"].options.pairing)
    assert _controls.discriminators_faced(pairing, recipe, (1, 2, 3, 6), 0, progress) == faced


def record(config: str, seed: int, modes: float, **extra: Any) -> dict[str, Any]:
    figures = {"modes_covered": modes, "hq_fraction": 0.5, "tvd": 0.25}
    return {
        "script": "mode_collapse",
        "configs": [config],
        "recipe": "recipes/toy-grid.toml",
        "set": [],
        "base_generations": 100,
        "grid": "1x1" if config.startswith("lone") else "3x3",
        "pairing": "g_mixture",
        "selection": False,
        "generations": 100,
        "seed": seed,
        "commit": "abc",
        "dirty": False,
        "training_flops": 2e12,
        "wall_s": 10.0,
        "test": {
            "best_mixture": figures,
            "best_generator": figures,
            "mean_over_cells": {"mixture": figures, "generator": figures},
        },
        # validation figures are logged, never tabled
        "validation": {"best_mixture": {"modes_covered": 99.0}},
        **extra,
    }


def test_summarise_rederives_the_tables_from_the_logs_alone(tmp_path: Path, capsys) -> None:
    logs = tmp_path / "mode_collapse"
    logs.mkdir()
    runs = [record("grid-3x3", 1, 24), record("grid-3x3", 2, 25), record("lone-steps", 1, 10)]
    runs.append(record("lone-steps", 2, 11))
    runs += [record("independent-3x3", 1, 24), record("independent-3x3", 2, 24.5)]
    runs.append({**record("grid-3x3", 3, 1), "script": "grid_size"})  # another script's line: left out
    (logs / "abc.jsonl").write_text("".join(json.dumps(r) + "\n" for r in runs))
    _controls.summarise(SCRIPT, [logs])
    out = capsys.readouterr().out
    rows = {line.split(" | ")[2]: line for line in out.splitlines() if " | abc | " in line}  # the first table
    assert "| 1 2 | abc | 24.5 ± 0.71 |" in rows["grid-3x3"] and "| 10.5 ± 0.71 |" in rows["lone-steps"]
    assert "99" not in out  # validation figures stay out of every table
    assert "| grid-3x3 | lone-steps | 24.5 ± 0.71 | 10.5 ± 0.71 | +14 | 0.71 | yes |" in out
    assert "| grid-3x3 | independent-3x3 | 24.5 ± 0.71 | 24.2 ± 0.35 | +0.25 | 0.56 | no |" in out


def test_evogan_compare_rederives_the_summarised_figures(tmp_path: Path, capsys) -> None:
    """The script's tables and ``evogan compare`` on the same lines: the same means, sds, differences and
    pooled sds (one code path for the statistics), and compare adds Welch's test."""
    from evogan.compare import contrast, read_lines, summarise

    grid, lone = [24.0, 25.0, 22.0], [10.0, 11.0, 13.0]
    runs = [record("grid-3x3", s, m) for s, m in zip((1, 2, 3), grid, strict=True)]
    runs += [record("lone-steps", s, m) for s, m in zip((1, 2, 3), lone, strict=True)]
    log = tmp_path / "abc.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in runs))
    _controls.summarise(SCRIPT, [log])
    table = capsys.readouterr().out
    result = summarise(read_lines([log]), "modes_covered", ["config=lone-steps"])
    assert result["baseline"] == "lone-steps" and result["lower_is_better"] is False
    row = next(r for r in result["rows"] if r["config"] == "grid-3x3")
    expected = contrast(grid, lone)
    assert row["difference"] == expected["difference"] and row["pooled_sd"] == expected["pooled_sd"]
    assert row["validation"]["mean"] == 99.0  # compare shows the validation figure the choice was made on
    figures = f"{_controls.mean_sd(grid)} | {_controls.mean_sd(lone)} | {row['difference']:+.3g} | "
    figures += f"{row['pooled_sd']:.2g} | yes | {row['p']:.2g} |"
    assert f"| grid-3x3 | lone-steps | {figures}" in table


def test_a_run_writes_one_log_line_that_summarise_reads(tmp_path: Path, capsys) -> None:
    args = arguments(
        "--grids",
        "1x1",
        "--generations",
        "1",
        "--seeds",
        "4",
        "--configs",
        "grid-1x1",
        "--set",
        "problem.batches_per_generation=2",
        "problem.score_samples=200",
        "--log-dir",
        str(tmp_path),
        "--output-dir",
        str(tmp_path / "runs"),
    )
    path = _controls.run_matrix(SCRIPT, args)
    assert path.parent == tmp_path / "mode_collapse" and path.suffix == ".jsonl"
    (line,) = path.read_text().splitlines()
    logged = json.loads(line)
    assert logged["configs"] == ["grid-1x1", "lone-steps"] and logged["seed"] == 4 and logged["generations"] == 1
    assert "problem.score_samples=200" in logged["overrides"] and logged["commit"] in path.name
    assert set(logged["validation"]) == {"best_mixture", "best_generator", "cells"}
    assert set(logged["test"]["mean_over_cells"]) == {"mixture", "generator"} and logged["wall_s"] > 0
    assert len(logged["machine"]["load"]) == 3 and logged["problem"]["test_samples"] == 200
    summary = json.loads((Path(logged["run_dir"]) / "summary.json").read_text())
    assert logged["test"]["best_mixture"] == summary["best_mixture"]
    capsys.readouterr()
    _controls.summarise(SCRIPT, [tmp_path / "mode_collapse"])
    assert "| grid-1x1 | 1x1 | g_mixture | false | 1 | 4 |" in capsys.readouterr().out
    # the same command again resumes, as evogan sweep does: the run is in the log, so nothing runs
    assert _controls.run_matrix(SCRIPT, args) == path and path.read_text().splitlines() == [line]
    assert "1 of 1 runs already in" in capsys.readouterr().out
    # evogan compare reads the line: one row per name the run has, its test figure the chosen mixture's
    from evogan.compare import read_lines, summarise

    rows = summarise(read_lines([tmp_path / "mode_collapse"]), "modes_covered", ())["rows"]
    assert [(r["config"], r["generation"], r["seeds"]) for r in rows] == [("grid-1x1", 1, [4]), ("lone-steps", 1, [4])]
    assert rows[0]["test"]["mean"] == logged["test"]["best_mixture"]["modes_covered"]


def test_the_horizon_sweep_scores_one_run_per_configuration_at_every_horizon(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    import horizon

    argv = ["horizon.py", "--of", "mode_collapse", "--grids", "2x2", "--horizons", "2", "4", "--seeds", "5"]
    argv += [
        "--configs",
        "grid-2x2",
        "lone-flops-2x2",
        "--log-dir",
        str(tmp_path),
        "--output-dir",
        str(tmp_path / "runs"),
    ]
    argv += ["--set", "problem.batches_per_generation=2", "problem.score_samples=200", "problem.fitness_samples=50"]
    monkeypatch.setattr(sys, "argv", argv)
    horizon.main()
    (log,) = (tmp_path / "horizon").glob("*.jsonl")
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(r["configs"], r["horizon"]) for r in lines] == [
        (["grid-2x2"], 2),
        (["grid-2x2"], 4),
        (["lone-flops-2x2"], 2),
        (["lone-flops-2x2"], 4),
    ]
    grid, lone = lines[:2], lines[2:]
    assert [r["generation"] for r in grid] == [1, 2]
    # the lone GAN is scored where its FLOPs come nearest the grid's at the same horizon
    assert all(abs(a["training_flops"] / b["training_flops"] - 1) < 0.2 for a, b in zip(grid, lone, strict=True))
    assert lone[1]["generation"] > grid[1]["generation"]
    # a horizon's line is what `evogan evaluate --generation` reports for that checkpoint
    import evogan
    from evogan.engine.run import reported

    trained = evogan.load(grid[0]["run_dir"], generation=1)
    assert reported(trained.scores(), "generator")["best_mixture"] == grid[0]["test"]["best_mixture"]
    capsys.readouterr()
    monkeypatch.setattr(
        sys,
        "argv",
        [
            "horizon.py",
            "--of",
            "mode_collapse",
            "--summarise",
            str(tmp_path / "horizon"),
            "--plot",
            str(tmp_path / "horizon.png"),
        ],
    )
    horizon.main()
    out = capsys.readouterr().out
    assert "| grid-2x2 | 4 | 5 |" in out and "| 4 | grid-2x2 | lone-flops-2x2 |" in out
    assert (tmp_path / "horizon.png").read_bytes().startswith(b"\x89PNG")


def test_horizon_lines_of_the_same_settings_share_a_row_across_recipe_edits() -> None:
    """A comment edit or 0.2's ``[pairing]`` moved into ``[problem]`` changes the recipe file's hash, not its
    settings: such lines group together; a seed run again on the same device counts once (the newest)."""
    import horizon

    def line(seed: int, sha: str, digest: str, set_: str, scored: str, fid: float) -> dict[str, Any]:
        return {
            "of": "grid_size",
            "recipe": "recipes/demo.toml",
            "recipe_sha": sha,
            "recipe_digest": digest,
            "set": ["run.threads=1", set_],
            "configs": ["grid-2x2"],
            "horizon": 5000,
            "seed": seed,
            "device": "cpu",
            "scored": scored,
            "fid": fid,
        }

    lines = [
        line(4, "aaaaaaaa", "d1", 'pairing={use="own_pair"}', "2026-12-04T10:00:00Z", 80.0),
        line(5, "bbbbbbbb", "d1", 'problem.pairing={use="own_pair"}', "2026-12-05T10:00:00Z", 70.0),
        line(4, "bbbbbbbb", "d1", 'problem.pairing={use="own_pair"}', "2026-12-05T11:00:00Z", 81.0),
        line(6, "bbbbbbbb", "d2", 'problem.pairing={use="own_pair"}', "2026-12-05T11:00:00Z", 60.0),
    ]
    groups = horizon.grouped(lines)
    assert sorted((key[0].rsplit("@", 1)[1], sorted(r["fid"] for r in runs)) for key, runs in groups.items()) == [
        ("d1", [70.0, 81.0]),  # seed 4's newest line replaces its first; the layouts are one row
        ("d2", [60.0]),  # other settings: another row
    ]
    assert {key[1] for key in groups} == {'problem.pairing={use="own_pair"}'}


def test_a_line_without_a_recorded_digest_gets_its_recipes_digest_at_its_commit() -> None:
    # 5857dff and 0b1aeed committed demo.toml with different bytes (the [pairing] table moved) and the same
    # settings; a commit git does not know falls back to the file's hash
    import subprocess

    known = subprocess.run(["git", "cat-file", "-e", "5857dff74810^{commit}"], capture_output=True, check=False)
    if known.returncode != 0:
        pytest.skip("a clone without the history these lines were measured at")
    base = {"recipe": "recipes/demo.toml", "configs": ["grid-2x2"]}
    old = _controls.contents_of({**base, "recipe_sha": "3674f62a", "commit": "5857dff74810"})
    new = _controls.contents_of({**base, "recipe_sha": "17860c70", "commit": "0b1aeedbc89f"})
    assert old == new and len(old) == 8 and old not in ("3674f62a", "17860c70")
    assert _controls.contents_of({**base, "recipe_sha": "0badf00d", "commit": "0" * 12}) == "0badf00d"


def test_a_grid_with_its_own_pairing_is_compared_with_the_controls_run_without_it() -> None:
    import horizon

    def line(config: str, set_: list[str], seed: int, fid: float) -> dict[str, Any]:
        return {
            "of": "grid_size",
            "recipe": "recipes/demo.toml",
            "recipe_sha": "aaaaaaaa",
            "recipe_digest": "d1",
            "set": set_,
            "configs": [config],
            "horizon": 5000,
            "seed": seed,
            "test": {"best_mixture": {"fid": fid}},
        }

    paired = ["problem.batches_per_generation=50", 'problem.pairing={use="neighbour_share", adapt_faced=true}']
    lines = [line("grid-2x2", paired, seed, fid) for seed, fid in ((1, 40.0), (2, 42.0))]
    lines += [line("independent-2x2", paired[:1], seed, fid) for seed, fid in ((1, 60.0), (2, 62.0))]
    table = horizon.comparisons(horizon.script_of("grid_size"), lines)
    (row,) = [r for r in table.splitlines() if "| independent-2x2 |" in r]
    assert "| grid-2x2 | independent-2x2 | 41 ± 1.4 | 61 ± 1.4 | -20 |" in row


def test_the_sparse_benchmark_probes_br_against_ds_density_in_a_setting_of_its_own(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    """Issue 41's probe: static masks with D's density apart from G's, under further overrides; the probe
    table lists BR per (setting, d_G, d_D) from the raw lines alone."""
    import sparse

    log = tmp_path / "probe.jsonl"
    common = ["sparse.py", "--generations", "2", "--batches", "2", "--hidden", "32", "--densities", "0.3"]
    common += ["--methods", "static", "--seeds", "1", "--json", str(log), "--set", 'problem.loss={use="hinge"}']
    for density_d in ("0.1", "0.6"):
        monkeypatch.setattr(sys, "argv", [*common, "--density-d", density_d])
        sparse.main()
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["density_d_start"] for r in lines] == [0.1, 0.6]
    assert [round(r["density_d"][0], 2) for r in lines] == [0.1, 0.6]  # as built
    assert all('problem.loss={use="hinge"}' in r["overrides"] and r["set"] for r in lines)
    capsys.readouterr()
    monkeypatch.setattr(sys, "argv", ["sparse.py", "--report", str(log), "--probe"])
    sparse.main()
    rows = [r for r in capsys.readouterr().out.splitlines() if r.startswith('| problem.loss={use="hinge"}')]
    assert [r.split(" | ")[1:4] for r in rows] == [["30%", "10%", "1"], ["30%", "60%", "1"]]
