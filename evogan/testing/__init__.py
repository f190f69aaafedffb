"""A test kit for plugin authors: a tiny recipe, a run with your plugin registered, contract checks.

``check_selection(LinearRank, {"pressure": 1.8})`` checks options, determinism and that inputs are left alone;
``run_tiny(write_tiny_recipe(tmp_path), plugin_object, overrides=[...])`` runs the tiny recipe with a plugin object
(hook implementations, or a plugin registering components) registered for that run only, and :func:`registered`
does the same for a block of code. pytest users may also import the ``tiny_recipe`` fixture into a ``conftest.py``.
The tiny recipe trains the GAN problem, so :func:`run_tiny` needs the evogan-gan distribution installed; the
contract checks need only evogan.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

from evogan.plugins import make_plugin_manager, registered
from evogan.recipe import apply_overrides, dumps_toml
from evogan.testing.contracts import (
    check_dataset,
    check_loss,
    check_mutation,
    check_networks,
    check_options,
    check_pairing,
    check_selection,
    check_topology,
    individuals,
)
from evogan.testing.problem_contract import check_problem

TINY_RECIPE = Path(__file__).with_name("tiny.toml")
# The tiny recipe's 8 modes of std 0.02 on a ring of radius 2 are out of reach in a few batches: every
# mixture scores TVD 1.0, so the mixture ES never accepts a step and the best cell is a tie. Four wide
# modes near the origin, where fresh generators put their samples, and larger steps make cells' scores
# differ from the first generation on.
VARIED = (
    "problem.data.modes=4",
    "problem.data.radius=0.5",
    "problem.data.std=0.1",
    "problem.learning_rate=5e-3",
    "mixture.sigma=0.1",
)


def tiny_recipe_text(
    *,
    seed: int = 1,
    generations: int = 3,
    rows: int = 2,
    cols: int = 2,
    output_dir: Path | str = "runs",
    varied: bool = False,
) -> str:
    """The tiny recipe (a 2x2 torus of small MLPs on a 2-D Gaussian ring) as TOML text; ``varied``: four
    wide modes near the origin and larger steps, where cells' mixture scores differ and the ES accepts steps."""
    data = tomllib.loads(TINY_RECIPE.read_text(encoding="utf-8"))
    data["run"].update(seed=seed, generations=generations, output_dir=str(output_dir))
    data["topology"].update(rows=rows, cols=cols)
    if varied:
        data = apply_overrides(data, VARIED, "tiny recipe")
    return dumps_toml(data)


def write_tiny_recipe(
    directory: Path,
    *,
    seed: int = 1,
    generations: int = 3,
    rows: int = 2,
    cols: int = 2,
    extra: str = "",
    overrides: Iterable[str] = (),
    varied: bool = False,
) -> Path:
    """Write the tiny recipe into ``directory`` (runs go to ``directory/runs``) and return its path.

    :param extra: TOML text appended to it (tables it lacks, e.g. ``[problem.loss]``).
    :param overrides: ``--set``-style ``KEY=VALUE`` changes (``'selection={use="linear_rank"}'``).
    :param varied: the easy ring where cells' mixture scores differ (see :func:`tiny_recipe_text`).
    """
    text = tiny_recipe_text(
        seed=seed, generations=generations, rows=rows, cols=cols, output_dir=directory / "runs", varied=varied
    )
    overrides = list(overrides)
    if overrides:
        text = dumps_toml(apply_overrides(tomllib.loads(text), overrides, "tiny recipe"))
    path = directory / f"tiny-{seed}-{generations}-{rows}x{cols}{'-varied' if varied else ''}.toml"
    path.write_text(text + extra, encoding="utf-8")
    return path


def run_tiny(recipe: Path, *plugins: object, overrides: Iterable[str] = ()) -> Path:
    """Run ``recipe`` in this process (every cell, in-process transport) with ``plugins`` registered for
    this run only; return the run directory."""
    from evogan.runtime.single import prepare, run_in_process

    prepared = prepare(recipe, overrides=overrides, pm=make_plugin_manager(extra=plugins))
    run_in_process(prepared)
    return prepared.run_dir.path


@pytest.fixture
def tiny_recipe(tmp_path: Path) -> Callable[..., Path]:
    """A function writing the tiny recipe into the test's ``tmp_path``; keyword arguments as
    :func:`write_tiny_recipe`."""

    def write(**settings: Any) -> Path:
        return write_tiny_recipe(tmp_path, **settings)

    return write


__all__ = [
    "TINY_RECIPE",
    "check_dataset",
    "check_loss",
    "check_mutation",
    "check_networks",
    "check_options",
    "check_pairing",
    "check_problem",
    "check_selection",
    "check_topology",
    "individuals",
    "registered",
    "run_tiny",
    "tiny_recipe",
    "tiny_recipe_text",
    "write_tiny_recipe",
]
