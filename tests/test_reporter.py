"""The live view's grid: cells laid out as the topology places them, scores coloured best to worst,
beside the table on a wide terminal and below it on a narrow one."""

from __future__ import annotations

import io
import math

from rich.console import Console

from evogan.builtin.reporter import TerminalReporter, grid_view, score_colour, summary_lines
from evogan.engine.plots import cell_rows


def test_cell_rows_follow_the_layout_or_fall_back_to_rows_of_a_list() -> None:
    assert cell_rows(6, (2, 3)) == [[0, 1, 2], [3, 4, 5]]
    assert cell_rows(6, (3, 2)) == [[0, 1], [2, 3], [4, 5]]
    assert cell_rows(3, None) == [[0], [1], [2]]  # a ring: a list
    assert cell_rows(5, None, columns=2) == [[0, 1], [2, 3], [4, None]]
    assert cell_rows(5, (2, 3)) == [[0], [1], [2], [3], [4]]  # a layout that does not hold the cells is ignored


def test_score_colours_run_from_green_for_the_best_to_red_for_the_worst() -> None:
    assert score_colour(1.0, 1.0, 3.0) == "rgb(0,200,0)"
    assert score_colour(2.0, 1.0, 3.0) == "rgb(255,200,0)"
    assert score_colour(3.0, 1.0, 3.0) == "rgb(255,0,0)"
    assert score_colour(math.inf, 1.0, 3.0) == "rgb(255,0,0)"  # a diverged cell
    assert score_colour(5.0, 5.0, 5.0) == "rgb(0,200,0)"  # all equal: all best


def render(renderable: object, width: int) -> str:
    console = Console(file=io.StringIO(), width=width, force_terminal=True, color_system="truecolor")
    console.print(renderable)
    return console.file.getvalue()  # type: ignore[attr-defined]


def plain(renderable: object, width: int) -> list[str]:
    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.print(renderable)
    return [line.rstrip() for line in console.file.getvalue().splitlines()]  # type: ignore[attr-defined]


def test_grid_view_places_cells_row_by_row_and_colours_them() -> None:
    scores = {0: 0.5, 1: 0.25, 2: 1.0, 4: 0.75}  # cell 3 and 5 have not reported yet
    lines = plain(grid_view(scores, 6, (2, 3)), 60)
    assert lines[0].strip() == "mixture score, 2x3"
    assert lines[1].split() == ["0:0.5", "1:0.25", "2:1"]
    assert lines[2].split() == ["3:-", "4:0.75", "5:-"]
    coloured = render(grid_view(scores, 6, (2, 3)), 60)
    assert "\x1b[38;2;0;200;0m" in coloured and "\x1b[38;2;255;0;0m" in coloured  # best cell 1, worst cell 2
    listed = plain(grid_view({0: 1.0}, 3, None), 60)
    assert listed[0].strip() == "mixture score, cells"
    assert [line.strip() for line in listed[1:]] == ["0:1", "1:-", "2:-"]


class Run:
    cells = 4
    layout = (2, 2)
    generations = 3


def reporter_with_rows() -> TerminalReporter:
    reporter = TerminalReporter(Console(file=io.StringIO()), "plain")
    reporter.info = Run()  # type: ignore[assignment]
    for cell in range(4):
        record = {
            "cell": cell, "generation": 1, "g_loss": 0.7, "d_loss": 1.3, "lr_g": 2e-4, "lr_d": 2e-4,
            "mixture_score": 0.1 * (cell + 1), "exchange": {},
        }
        reporter.rows[cell] = record
    return reporter


def test_the_grid_sits_beside_the_table_when_wide_and_below_it_when_narrow() -> None:
    reporter = reporter_with_rows()
    wide = plain(reporter._render(), 160)
    assert wide[0].startswith("cell") and wide[0].endswith("mixture score, 2x2")  # one line: side by side
    narrow = plain(reporter._render(), 80)
    assert narrow[0].startswith("cell") and "mixture score, 2x2" not in narrow[0]
    title = [line.strip() for line in narrow].index("mixture score, 2x2")
    assert title > 4 and narrow[title + 1].split() == ["0:0.1", "1:0.2"]


def test_the_reported_lines_end_with_the_chosen_mixture_on_test_beside_its_validation_figures() -> None:
    summary = {
        "best_cell": 2,
        "best_mixture": {"tvd": 0.5, "modes_covered": 7.0},
        "best_mixture_validation": {"tvd": 0.25, "modes_covered": 8.0},
        "mean_over_cells": {"mixture": {"tvd": 0.625}, "generator": {"tvd": 0.875}},
    }
    assert summary_lines(summary) == [
        "mean over cells, test: mixture tvd=0.625; best generator alone tvd=0.875",
        "best mixture ensemble: cell 2 (chosen on validation): test modes_covered=7, tvd=0.5; "
        "validation modes_covered=8, tvd=0.25",
    ]


def test_the_table_names_the_roles_the_problem_declares() -> None:
    """A GAN's records give G and D columns; a problem with other roles gets its own, and no lr column
    when its individuals have no learning rate."""
    gan = plain(reporter_with_rows().table(), 160)[0].split("  ")
    assert [c.strip() for c in gan if c.strip()][:6] == ["cell", "gen", "G loss", "D loss", "lr G", "lr D"]
    reporter = TerminalReporter(Console(file=io.StringIO()), "plain")
    reporter.rows[0] = {
        "cell": 0, "generation": 2, "host_loss": 0.25, "parasite_loss": 0.75, "mixture_score": 0.5, "exchange": {},
    }
    header = plain(reporter.table(), 160)[0]
    assert header.split() == ["cell", "gen", "host", "loss", "parasite", "loss", "mixture", "score", "staleness"]
    assert "G" not in header.split() and "lr" not in header
    summary = {
        "best_cell": 0,
        "best_mixture": {"sorted": 0.5},
        "best_mixture_validation": {"sorted": 0.5},
        "mean_over_cells": {"mixture": {"sorted": 0.5}, "host": {"sorted": 0.25}},
    }
    assert summary_lines(summary)[0] == "mean over cells, test: mixture sorted=0.5; best host alone sorted=0.25"
    # without a mixture (the recipe disables it) the records score the best individual, and the summary
    # names it in the problem's terms
    reporter.rows[0] = {
        "cell": 0, "generation": 2, "host_loss": 0.25, "parasite_loss": 0.75, "best_score": 0.5, "exchange": {},
    }
    assert plain(reporter.table(), 160)[0].split()[-3:] == ["best", "score", "staleness"]
    summary = {
        "best_cell": 0,
        "chosen": {"cell": 0, "what": "individual", "role": "host", "test": {"sorted": 0.5},
                   "validation": {"sorted": 0.75}},
        "mean_over_cells": {"host": {"sorted": 0.25}},
    }
    assert summary_lines(summary) == [
        "mean over cells, test: best host alone sorted=0.25",
        "best host: cell 0 (chosen on validation): test sorted=0.5; validation sorted=0.75",
    ]


def test_the_problems_numbers_about_its_best_individuals_get_columns_and_plain_fields() -> None:
    reporter = reporter_with_rows()
    for row in reporter.rows.values():
        row["individual_metrics"] = {"d_aug_p": 0.125}
    lines = plain(reporter.table(), 160)
    assert "d_aug_p" in lines[0].split() and "0.125" in lines[1].split()
    console = Console(file=io.StringIO(), width=200)
    TerminalReporter(console, "plain").evogan_generation_end(
        run=Run(), cell=0, generation=1, record=reporter.rows[0]  # type: ignore[arg-type]
    )
    assert "d_aug_p=0.125" in console.file.getvalue()  # type: ignore[attr-defined]
