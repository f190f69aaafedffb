"""What a run trained, from Python: ``run = evogan.load(run_dir)``, then ``run.sample(1000)`` (the best mixture
ensemble), ``run.generator(cell=3)`` (a torch module), ``run.metrics(cell=3)`` or ``run.summary``.

``evogan evaluate``, ``sample`` and ``export`` load runs here too: every cell from its newest valid checkpoint (the
newest generation all cells share), holding its neighbours' best generators, as the run's final scoring saw them.
``evogan.load(run_dir, generation=50)`` or ``run.at(50)`` load an earlier checkpoint every cell kept
(``run.generations``), to score a run along its training.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evogan.errors import RunFailure, UserError

if TYPE_CHECKING:
    import torch
    from torch import nn

    from evogan.api import Problem, Topology
    from evogan.engine.cell import Cell, CellSettings
    from evogan.engine.rundir import RunDirectory
    from evogan.recipe import Recipe

DEVICES = ("cpu", "cuda", "auto")
METADATA_FILE = "evogan.json"  # in an exported file's archive: what the sampler's inputs are (TrainedRun.export)
EXPORT_FORMAT = 1


@dataclass
class Mixture:
    """One cell's mixture ensemble: the generators of the cell and its neighbours, with their weights.

    :param cell: the cell whose ensemble it is; ``members``: the cells the generators come from.
    :param weights: normalised (they sum to 1), one per network.
    """

    cell: int
    members: list[int]
    networks: list[nn.Module]
    weights: list[float]
    problem: Problem

    def sample(
        self, n: int, *, seed: int = 0, generator: torch.Generator | None = None, device: Any = None
    ) -> torch.Tensor:
        """``n`` samples, drawn as the run's own pictures and scores draw them.

        :param generator: the noise's source; default a fresh one seeded with ``seed``.
        :param device: where the result goes (default: the device the networks run on).
        """
        import torch

        if n < 1:
            raise UserError(f"n={n}: the number of samples must be at least 1")
        source = generator if generator is not None else torch.Generator().manual_seed(seed)
        samples = self.problem.mixture_samples(self.networks, self.weights, n, generator=source)
        return samples if device is None else samples.to(device)

    def sampler_inputs(self, n: int, *, seed: int = 0) -> tuple[torch.Tensor, ...]:
        """What to feed an exported file (``evogan export``) for the samples :meth:`sample` gives with
        this ``n`` and ``seed``."""
        import torch

        return self.problem.sampler_inputs(self.weights, n, generator=torch.Generator().manual_seed(seed))


class TrainedRun:
    """A run directory's cells loaded from their checkpoints, with the recipe's problem set up."""

    def __init__(
        self,
        run_dir: RunDirectory,
        recipe: Recipe,
        settings: CellSettings,
        cells: list[Cell],
        topology: Topology | None = None,
    ) -> None:
        self.run_dir, self.recipe, self.settings, self.cells = run_dir, recipe, settings, cells
        self.topology = topology
        self._scoring_ready = False

    @property
    def generations(self) -> list[int]:
        """Generations at which every cell kept a checkpoint, oldest first (how many a run keeps:
        ``run.checkpoint_every`` and ``run.keep_checkpoints``)."""
        return self.run_dir.shared_generations(range(len(self.cells)))

    def at(self, generation: int) -> TrainedRun:
        """The same run with every cell loaded from its checkpoint at ``generation`` (one of
        :attr:`generations`), sharing this one's problem, data and metric: scoring a run along its
        training without setting the problem up again. ``UserError`` when a cell lacks that checkpoint."""
        from evogan.engine.run import build_topology, load_cells

        topology = self.topology or build_topology(self.recipe)
        cells = load_cells(self.run_dir, self.settings, topology, generation)
        other = TrainedRun(self.run_dir, self.recipe, self.settings, cells, topology)
        other._scoring_ready = self._scoring_ready
        return other

    @property
    def path(self) -> Path:
        return self.run_dir.path

    @property
    def problem(self) -> Problem:
        return self.settings.problem

    # -------------------------------------------------------------------------------- records
    @cached_property
    def summary(self) -> dict[str, Any] | None:
        """``summary.json`` (scores per cell, the best mixture); None when the run never finished."""
        from evogan.engine.rundir import SUMMARY_FILE

        path = self.path / SUMMARY_FILE
        if not path.exists():
            return None
        try:
            summary = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise UserError(f"{path}: cannot read the summary ({type(exc).__name__})") from None
        return summary if isinstance(summary, dict) else None

    def metrics(self, cell: int | None = None) -> list[dict[str, Any]]:
        """The records of ``metrics.jsonl`` (one per cell per generation), of one cell if given."""
        if cell is None:
            return self.run_dir.read_metrics()
        index = self._cell(cell)
        return [r for r in self.run_dir.iter_metrics() if r["cell"] == index]

    # -------------------------------------------------------------------------------- scores
    def prepare_scoring(self) -> None:
        """The metric's real statistics (an Inception pass for FID): only once something is scored."""
        if not self._scoring_ready:
            self.problem.prepare_scoring()
            self._scoring_ready = True

    def scores(self) -> dict[str, Any]:
        """Every cell's best individual of the scored role (a GAN's generator) and its mixture (where the
        recipe's mixture is enabled), scored on the run's fixed evaluation noise
        (:func:`evogan.engine.run.score_cells`)."""
        from evogan.engine.run import score_cells

        self.prepare_scoring()
        return score_cells(self.cells, self.settings, self.recipe.run.seed)

    @cached_property
    def best_cell(self) -> int:
        """The cell whose mixture (or best individual, where the mixture is disabled) scored best on
        validation: the summary's choice when it scored these very
        checkpoints, else scored now (as at the end of a run)."""
        summary = self.summary or {}
        recorded = summary.get("cells", {})
        if "best_cell" in summary and all(
            str(cell.index) in recorded and recorded[str(cell.index)]["generation"] == cell.generation
            for cell in self.cells
        ):
            return int(summary["best_cell"])
        from evogan.engine.run import best_cell

        return int(best_cell(self.scores()))

    # -------------------------------------------------------------------------------- networks
    def _cell(self, cell: int | None) -> int:
        if cell is None:
            return self.best_cell
        if isinstance(cell, bool) or not isinstance(cell, int) or not 0 <= cell < len(self.cells):
            raise UserError(f"cell {cell!r}: the run has cells 0..{len(self.cells) - 1}")
        return cell

    def mixture(self, cell: int | None = None) -> Mixture:
        """``cell``'s mixture ensemble (default: the best cell's)."""
        index = self._cell(cell)
        members, networks, weights = self.cells[index].mixture_ensemble()
        return Mixture(index, members, networks, weights, self.problem)

    def generator(self, cell: int | None = None) -> nn.Module:
        """``cell``'s best generator alone (default: the best cell's), as evaluation uses it."""
        chosen = self.cells[self._cell(cell)]
        return chosen.best_scored()

    def single(self, cell: int | None = None) -> Mixture:
        """``cell``'s best generator as an ensemble of one (``evogan sample --single``)."""
        index = self._cell(cell)
        return Mixture(index, [index], [self.generator(index)], [1.0], self.problem)

    def sample(
        self,
        n: int,
        cell: int | None = None,
        *,
        single: bool = False,
        seed: int = 0,
        generator: torch.Generator | None = None,
        device: Any = None,
    ) -> torch.Tensor:
        """``n`` samples from ``cell``'s mixture (default: the best mixture ensemble), or from its best
        generator alone with ``single=True``; see :meth:`Mixture.sample` for the rest."""
        ensemble = self.single(cell) if single else self.mixture(cell)
        return ensemble.sample(n, seed=seed, generator=generator, device=device)

    def export(self, path: Path | str, cell: int | None = None) -> Path:
        """Write ``cell``'s mixture (default: the best) as a file that samples it with torch alone
        (``evogan export``); returns its path. The module is :meth:`evogan.api.Problem.sampler`'s, exported
        for any batch size and written atomically; ``torch.export.load(path, extra_files=extra)`` fills
        ``extra["evogan.json"]`` with its inputs (name, per-sample shape, how to draw). Not TorchScript: torch
        deprecates it. ``UserError`` when ``path`` cannot be written.
        """
        import torch

        from evogan.engine.rundir import atomic_write

        path, mixture = Path(path), self.mixture(cell)
        if path.is_dir():
            raise UserError(f"{path}: is a directory; give the file to write")
        sampler = self.problem.sampler(mixture.networks, mixture.weights)
        example = mixture.sampler_inputs(2)
        batch = torch.export.Dim("samples", min=1)
        try:
            with torch.no_grad():
                program = torch.export.export(
                    sampler.module, example, dynamic_shapes=tuple({0: batch} for _ in example)
                )
        except Exception as exc:  # torch raises many kinds for a network it cannot trace
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            raise RunFailure(
                f"{self.path}: cell {mixture.cell}'s mixture cannot be exported ({type(exc).__name__}: {first})"
            ) from None
        metadata: dict[str, Any] = {
            "format": EXPORT_FORMAT,
            "run": self.run_dir.run_id,
            "recipe": self.recipe.digest,
            "cell": mixture.cell,
            "members": mixture.members,
            "weights": mixture.weights,
            "generation": self.cells[mixture.cell].generation,
            "inputs": sampler.inputs,
            "problem": self.problem.describe(),
        }
        try:
            atomic_write(
                path,
                lambda handle: torch.export.save(program, handle, extra_files={METADATA_FILE: json.dumps(metadata)}),
            )
        except OSError as exc:
            raise UserError(f"{path}: cannot write: {exc.strerror or exc}") from None
        return path


def load(
    path: Path | str, *, device: str | None = None, disable: tuple[str, ...] = (), generation: int | None = None
) -> TrainedRun:
    """Load a run directory's cells from their checkpoints (the newest, or every cell's at ``generation``).

    :param device: ``cpu``, ``cuda`` or ``auto``: where the networks run (default: the recipe's ``run.device``).
    :param disable: plugins not to load (names as for ``--disable-plugin``).

    The problem is set up as for training (its data sizes the networks); its metric only when scores are asked for.
    Errors (no such directory, not a run directory, no checkpoints, a bad ``device``) are one-line ``UserError``s.
    """
    from evogan import recipe as recipes
    from evogan.engine.run import build_settings, build_topology, load_cells, pick_device
    from evogan.engine.rundir import RunDirectory
    from evogan.plugins import make_plugin_manager
    from evogan.registry import Registries

    if device is not None and device not in DEVICES:
        raise UserError(f"device {device!r}: expected one of {', '.join(DEVICES)}")
    run_dir = RunDirectory.open_existing(Path(path))
    if not run_dir.has_checkpoints():
        raise UserError(f"{path}: no checkpoints to load (the run stopped before its first)")
    registries = Registries.from_plugin_manager(make_plugin_manager(blocked=disable))
    recipe = recipes.load(run_dir.recipe_path, registries)
    settings = build_settings(recipe, registries, None, pick_device(device or recipe.run.device), scoring=False)
    topology = build_topology(recipe)
    cells = load_cells(run_dir, settings, topology, generation)
    return TrainedRun(run_dir, recipe, settings, cells, topology)


__all__ = ["Mixture", "TrainedRun", "load"]
