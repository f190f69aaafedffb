"""``evogan compare``: tables and JSON re-derived from hand-written sweep lines, checked against means,
sds and Welch's t-test computed by hand; bad input as one-line errors."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from evogan.cli import _attach_commands, cli
from evogan.compare import incomplete_beta, pooled_sd, welch

_attach_commands()


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def line(config: str, pairing: str, seed: int, tvd: float, modes: float, along: list | None = None) -> str:
    figures = {"tvd": tvd, "modes_covered": modes}
    record = {
        "recipe": "recipes/toy-grid.toml",
        "config": config,
        "vary": {"pairing": pairing},
        "set": [],
        "seed": seed,
        "generations": 3,
        "requested_generations": 3,
        "test": figures,
        "validation": {"tvd": tvd + 0.01, "modes_covered": modes},
        "mean_over_cells": {"generator": {"tvd": tvd + 0.1, "modes_covered": modes - 1}, "mixture": figures},
        "metric": {"name": "modes", "primary": "tvd", "lower_is_better": True},
    }
    if along is not None:
        record["along"] = along
    return json.dumps(record)


GRID, OWN = '{use="g_mixture"}', '{use="own_pair"}'
TVD_GRID, TVD_OWN = [0.5, 0.7, 0.6], [0.3, 0.4, 0.2]


def write_log(path: Path) -> Path:
    lines = [line(f"pairing={GRID}", GRID, s, t, 10 + s) for s, t in zip((1, 2, 3), TVD_GRID, strict=True)]
    lines += [line(f"pairing={OWN}", OWN, s, t, 20 - s) for s, t in zip((1, 2, 3), TVD_OWN, strict=True)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_welch_and_pooled_sd_match_hand_computed_values() -> None:
    # means 0.6 and 0.3, sds 0.1 each, n = 3: t = 0.3 / sqrt(0.01/3 + 0.01/3), df = 4
    t, df, p = welch(TVD_GRID, TVD_OWN)
    assert t == pytest.approx(3.6742346, rel=1e-6)
    assert df == pytest.approx(4.0)
    assert p == pytest.approx(0.0213116, rel=1e-4)  # the Student t density integrated numerically
    assert pooled_sd(TVD_GRID, TVD_OWN) == pytest.approx(0.1)
    assert incomplete_beta(0.5, 0.5, 0.5) == pytest.approx(0.5)  # t = 1, df = 1: two-sided p of a Cauchy
    assert all(math.isnan(x) for x in welch([1.0], [2.0, 3.0]))


def test_table_and_json_against_hand_computed_figures(tmp_path: Path) -> None:
    log = write_log(tmp_path / "sweep.jsonl")
    result = invoke("compare", str(log), "--baseline", f"pairing={OWN}", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["metric"] == "tvd" and data["lower_is_better"] is True
    assert data["baseline"] == f"pairing={OWN}"
    grid, own = data["rows"]
    assert grid["config"] == f"pairing={GRID}" and grid["seeds"] == [1, 2, 3] and grid["generation"] == 3
    assert grid["test"]["mean"] == pytest.approx(0.6) and grid["test"]["sd"] == pytest.approx(0.1)
    assert grid["validation"]["mean"] == pytest.approx(0.61)
    assert grid["mean_cell_generator"]["mean"] == pytest.approx(0.7)
    assert grid["difference"] == pytest.approx(0.3) and grid["pooled_sd"] == pytest.approx(0.1)
    assert grid["p"] == pytest.approx(0.0213116, rel=1e-4)
    assert own["test"]["mean"] == pytest.approx(0.3) and "difference" not in own  # the baseline itself

    table = invoke("compare", str(log), "--baseline", f"pairing={OWN}")
    assert table.exit_code == 0, table.output
    assert "tvd (lower is better)" in table.output
    assert "0.6 ± 0.1" in table.output and "+0.3" in table.output and "0.0213" in table.output

    modes = json.loads(invoke("compare", str(log), "--metric", "modes_covered", "--json").stdout)
    assert modes["lower_is_better"] is False  # modes covered: higher is better
    assert modes["baseline"] == f"pairing={GRID}"  # default: the first configuration in the lines
    assert modes["rows"][1]["difference"] == pytest.approx(18 - 12)


def test_along_lines_give_one_row_per_horizon_and_a_plot(tmp_path: Path) -> None:
    def along(tvds: list[float]) -> list[dict]:
        return [
            {
                "generation": g,
                "steps": 4 * g,
                "test": {"tvd": t, "modes_covered": 1.0},
                "validation": {"tvd": t, "modes_covered": 1.0},
                "mean_over_cells": {"generator": {"tvd": t, "modes_covered": 1.0}},
            }
            for g, t in zip((1, 2), tvds, strict=True)
        ]

    log = tmp_path / "along.jsonl"
    log.write_text(
        "\n".join(
            [
                line("a", "1", 1, 0.5, 1, along([0.9, 0.5])),
                line("a", "1", 2, 0.4, 1, along([0.7, 0.4])),
                line("b", "2", 1, 0.5, 1, along([0.8, 0.6])),
                line("b", "2", 2, 0.5, 1, along([0.6, 0.5])),
            ]
        ),
        encoding="utf-8",
    )
    picture = tmp_path / "curve.png"
    result = invoke("compare", str(log), "--json", "--plot", str(picture))
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["rows"]
    assert [(r["config"], r["steps"]) for r in rows] == [("a", 4), ("a", 8), ("b", 4), ("b", 8)]
    assert rows[0]["test"]["mean"] == pytest.approx(0.8)
    assert rows[2]["difference"] == pytest.approx(0.7 - 0.8)
    assert picture.stat().st_size > 0


@pytest.mark.parametrize(
    ("content", "args", "message"),
    [
        (None, (), "no such file"),
        ("{not json\n", (), "sweep.jsonl:1: not a JSON line"),
        ('{"seed": 1}\n', (), "sweep.jsonl:1: not an evogan sweep line"),
        ("", (), "no lines to compare"),
        ("good", ("--baseline", "pairing=nope"), "no configuration has it"),
        ("good", ("--baseline", "pairing"), "expected KEY=VALUE"),
        ("good", ("--metric", "fid"), "--metric fid: not a figure of every line"),
    ],
)
def test_bad_input_is_one_line_and_a_non_zero_exit(tmp_path: Path, content, args, message) -> None:
    log = tmp_path / "sweep.jsonl"
    if content == "good":
        write_log(log)
    elif content is not None:
        log.write_text(content, encoding="utf-8")
    result = invoke("compare", str(log), *args)
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1


def test_compare_reads_two_files_as_one_and_imports_no_torch(tmp_path: Path) -> None:
    import subprocess
    import sys

    lines = write_log(tmp_path / "all.jsonl").read_text(encoding="utf-8").splitlines()
    (tmp_path / "a.jsonl").write_text("\n".join(lines[:4]), encoding="utf-8")
    (tmp_path / "b.jsonl").write_text("\n".join(lines[4:]), encoding="utf-8")
    script = (
        "import json, sys\n"
        "from evogan.cli import main\n"
        "sys.argv = ['evogan', 'compare', *sys.argv[1:], '--json']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(json.dumps('torch' in sys.modules), file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")],
        capture_output=True,
        text=True,
        check=True,
    )
    split = json.loads(done.stdout)
    whole = json.loads(invoke("compare", str(tmp_path / "all.jsonl"), "--json").stdout)
    assert split == whole and split["rows"][1]["seeds"] == [1, 2, 3]
    assert done.stderr.strip().splitlines()[-1] == "false"  # tables from logs need no torch


def test_compare_reads_the_committed_benchmark_logs() -> None:
    """A RESULTS table re-derives from the benchmarks' raw lines: the toy grid's 3x3 against its
    independent ensemble (RESULTS "The 25-mode toy grid, 3x3, 5 seeds": 22.4 ± 1.5 against 15.2 ± 1.1,
    +7.2, pooled sd 1.3), and an old sparse line (no validation figures) reads too."""
    logs = Path(__file__).resolve().parents[1] / "benchmarks" / "logs"
    mode_collapse = logs / "mode_collapse" / "459a6d87731f.jsonl"
    result = invoke("compare", str(mode_collapse), "--config", "grid-3x3", "--config", "independent-3x3",
                    "--baseline", "config=independent-3x3", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["metric"] == "modes_covered" and data["lower_is_better"] is False
    grid = next(r for r in data["rows"] if r["config"] == "grid-3x3")
    assert grid["seeds"] == [1, 2, 3, 4, 5] and f"{grid['test']['mean']:.1f} ± {grid['test']['sd']:.1f}" == "22.4 ± 1.5"
    assert f"{grid['difference']:+.1f}" == "+7.2" and f"{grid['pooled_sd']:.1f}" == "1.3"
    sparse = json.loads(invoke("compare", str(logs / "sparse" / "c3edac7.jsonl"), "--json").stdout)
    assert sparse["metric"] == "fid" and all(r["validation"] is None for r in sparse["rows"])
    table = invoke("compare", str(logs / "sparse" / "c3edac7.jsonl"))
    assert table.exit_code == 0 and "d_G" in table.output
