from __future__ import annotations

import pytest

from evogan.builtin.topology import Grid, Ring, Torus


def torus(rows: int, cols: int, neighbourhood: str = "von_neumann") -> Torus:
    return Torus(Torus.Options(rows=rows, cols=cols, neighbourhood=neighbourhood))


def test_3x3_von_neumann_matches_explicit_adjacency() -> None:
    # Row-major: cell = row * cols + col. Lipizzaner's transposed bug gave cell 1 -> {0, 4, 5, 6}.
    expected = {
        0: (1, 2, 3, 6),
        1: (0, 2, 4, 7),
        2: (0, 1, 5, 8),
        3: (0, 4, 5, 6),
        4: (1, 3, 5, 7),
        5: (2, 3, 4, 8),
        6: (0, 3, 7, 8),
        7: (1, 4, 6, 8),
        8: (2, 5, 6, 7),
    }
    topology = torus(3, 3)
    assert {cell: topology.neighbours(cell) for cell in range(9)} == expected


def test_rectangular_torus_is_not_transposed() -> None:
    topology = torus(2, 3)  # 2 rows, 3 columns: cell 1 is row 0, column 1
    assert topology.neighbours(1) == (0, 2, 4)
    assert topology.neighbours(5) == (2, 3, 4)


@pytest.mark.parametrize(
    ("rows", "cols", "degree"), [(1, 1, 0), (2, 2, 2), (1, 4, 2), (1, 2, 1), (3, 3, 4), (4, 5, 4)]
)
def test_small_tori_are_deduplicated(rows: int, cols: int, degree: int) -> None:
    topology = torus(rows, cols)
    for cell in range(topology.cells):
        neighbours = topology.neighbours(cell)
        assert len(neighbours) == len(set(neighbours)) == degree
        assert cell not in neighbours


@pytest.mark.parametrize("shape", [(1, 1), (2, 2), (2, 3), (3, 3), (3, 5), (4, 4)])
@pytest.mark.parametrize("neighbourhood", ["von_neumann", "moore"])
def test_every_cell_is_symmetric(shape: tuple[int, int], neighbourhood: str) -> None:
    for topology in (
        torus(*shape, neighbourhood),
        Grid(Grid.Options(rows=shape[0], cols=shape[1], neighbourhood=neighbourhood)),
    ):
        for cell in range(topology.cells):
            for other in topology.neighbours(cell):
                assert cell in topology.neighbours(other), (topology.describe(), cell, other)


def test_moore_3x3_sees_every_other_cell() -> None:
    topology = torus(3, 3, "moore")
    for cell in range(9):
        assert topology.neighbours(cell) == tuple(c for c in range(9) if c != cell)


def test_bounded_grid_corners_have_fewer_neighbours() -> None:
    grid = Grid(Grid.Options(rows=3, cols=3))
    assert grid.neighbours(0) == (1, 3)
    assert grid.neighbours(4) == (1, 3, 5, 7)


def test_ring_radius() -> None:
    ring = Ring(Ring.Options(cells=6, radius=2))
    assert ring.neighbours(0) == (1, 2, 4, 5)
    assert Ring(Ring.Options(cells=2, radius=1)).neighbours(0) == (1,)
    assert Ring(Ring.Options(cells=1, radius=3)).neighbours(0) == ()


def test_grids_and_tori_have_a_2d_layout_and_the_ring_has_none() -> None:
    assert torus(2, 3).layout() == (2, 3)
    assert Grid(Grid.Options(rows=3, cols=1)).layout() == (3, 1)
    assert Ring(Ring.Options()).layout() is None
