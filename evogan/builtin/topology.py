"""Built-in topologies: torus (von Neumann or Moore), bounded rectangular grid, ring."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from evogan.api import ComponentOptions, Topology
from evogan.hookspecs import Register, hookimpl

OFFSETS = {
    "von_neumann": ((-1, 0), (1, 0), (0, -1), (0, 1)),
    "moore": ((-1, -1), (-1, 0), (-1, 1), (0, -1), (0, 1), (1, -1), (1, 0), (1, 1)),
}


class GridOptions(ComponentOptions):
    rows: int = Field(2, ge=1, description="grid rows")
    cols: int = Field(2, ge=1, description="grid columns")
    neighbourhood: Literal["von_neumann", "moore"] = Field(
        "von_neumann", description="von_neumann: N/S/E/W (5-cell); moore: the 8 around (9-cell)"
    )


class Torus(Topology[GridOptions]):
    """Cells on a rows x cols grid that wraps around both ways (Lipizzaner's topology).

    Cell ``r * cols + c`` sits at row ``r``, column ``c``; its neighbours are the distinct cells at the
    neighbourhood's offsets, so a 2x2 torus has 2 neighbours per cell and a 1x1 torus none.
    """

    name: ClassVar[str] = "torus"
    description: ClassVar[str] = "toroidal grid, von Neumann or Moore neighbourhood"
    wraps: ClassVar[bool] = True
    Options = GridOptions

    @property
    def cells(self) -> int:
        return self.options.rows * self.options.cols

    def neighbours(self, cell: int) -> tuple[int, ...]:
        rows, cols = self.options.rows, self.options.cols
        row, col = divmod(cell, cols)
        found = set()
        for d_row, d_col in OFFSETS[self.options.neighbourhood]:
            r, c = row + d_row, col + d_col
            if self.wraps:
                r, c = r % rows, c % cols
            elif not (0 <= r < rows and 0 <= c < cols):
                continue
            found.add(r * cols + c)
        found.discard(cell)
        return tuple(sorted(found))

    def describe(self) -> str:
        return f"{self.name} {self.options.rows}x{self.options.cols} ({self.options.neighbourhood})"

    def layout(self) -> tuple[int, int]:
        return self.options.rows, self.options.cols


class Grid(Torus):
    """A rows x cols grid without wrap-around: border cells have fewer neighbours."""

    name: ClassVar[str] = "grid"
    description: ClassVar[str] = "bounded rectangular grid (no wrap-around)"
    wraps: ClassVar[bool] = False


class Ring(Topology["Ring.Options"]):
    """Cells on a ring; each pulls from the cells within ``radius`` steps (Lipi-Ring)."""

    name: ClassVar[str] = "ring"
    description: ClassVar[str] = "ring of cells, neighbours within a radius"

    class Options(ComponentOptions):
        cells: int = Field(4, ge=1, description="number of cells")
        radius: int = Field(1, ge=1, description="neighbours on each side")

    @property
    def cells(self) -> int:
        return self.options.cells

    def neighbours(self, cell: int) -> tuple[int, ...]:
        n = self.options.cells
        found = {(cell + step) % n for r in range(1, self.options.radius + 1) for step in (r, -r)}
        found.discard(cell)
        return tuple(sorted(found))

    def describe(self) -> str:
        return f"ring of {self.options.cells} (radius {self.options.radius})"


@hookimpl
def evogan_register_topologies(register: Register) -> None:
    register(Torus)
    register(Grid)
    register(Ring)
