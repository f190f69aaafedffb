"""evogan's modules, and the GAN problem's distribution's (evogan_gan), import one another without a cycle
(issue 25); evogan imports nothing of evogan_gan (issue 38).

The graph is read from the source with ``ast``, never by importing. An edge ``a -> b`` is any of, anywhere
in ``a``:

- ``import b`` and ``from b import name``, relative ones resolved; ``from package import module`` is an
  edge to the module, ``from module import name`` to the module;
- at module level, inside a function, and under ``if TYPE_CHECKING:``: a function-level import is still a
  module that needs the other, and a TYPE_CHECKING one is part of its interface (its annotations), so both
  only move a cycle out of Python's sight; the design has it either way;
- ``lazy("evogan....", globals())`` (:mod:`evogan.lazy`): an import that happens at the first use.

Not edges: the implicit import of a module's parent packages (``import evogan.engine.run`` runs
``evogan/__init__.py`` first; counted, any package whose ``__init__`` imports a submodule would be a cycle),
and modules named by strings at run time: the built-in plugins (:data:`evogan.plugins.BUILTIN_PLUGINS`,
loaded like any third-party plugin) and :mod:`evogan_gan.sparse`'s PEP 562 ``__getattr__``, whose
TYPE_CHECKING imports name the same modules.
"""

from __future__ import annotations

import ast
from pathlib import Path

import evogan_gan

import evogan

PACKAGE = Path(evogan.__file__).parent
PACKAGES = (PACKAGE, Path(evogan_gan.__file__).parent)


def module_files(packages: tuple[Path, ...] = PACKAGES) -> dict[str, Path]:
    """Every module of the packages by dotted name (a package by its own name, not ``.__init__``)."""
    modules = {}
    for package in packages:
        for path in sorted(package.rglob("*.py")):
            parts = path.relative_to(package.parent).with_suffix("").parts
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def imported_names(source: str, module: str, *, is_package: bool = False) -> list[str]:
    """The dotted names ``module``'s source imports, in order; ``from m import n`` gives ``m.n``."""
    package = module if is_package else module.rpartition(".")[0]
    names = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1):  # `from .. import x`: one package up per extra dot
                base = base.rpartition(".")[0]
            origin = ".".join(part for part in (base if node.level else "", node.module or "") if part)
            names += [f"{origin}.{alias.name}" for alias in node.names]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "lazy"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            names.append(node.args[0].value)
    return names


def resolve(name: str, modules: dict[str, Path] | set[str]) -> str | None:
    """The module ``name`` lands in: itself, or the longest module it starts with (``evogan.api.Problem``
    is ``evogan.api``); None outside the modules."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the modules among ``modules`` it imports (itself left out)."""
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        names = imported_names(path.read_text(encoding="utf-8"), module, is_package=path.name == "__init__.py")
        graph[module] = {target for name in names if (target := resolve(name, modules)) not in (None, module)}
    return graph


def tangles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The groups of two or more modules that each reach one another (strongly connected components)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def visit(node: str) -> None:  # Tarjan's algorithm; the graph is about a hundred modules deep at most
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(group)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def shortest_cycle(graph: dict[str, set[str]], group: set[str]) -> list[str]:
    """The shortest way (``[a, b, ..., a]``) from the group's first module back to itself."""
    start = min(group)
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for target in sorted(graph[node] & group - {node}):
                if target == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [*reversed(path), start]
                if target not in came_from:
                    came_from[target] = node
                    following.append(target)
        frontier = following
    raise AssertionError(f"not a cycle: {sorted(group)}")


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each tangle, if any."""
    return [shortest_cycle(graph, group) for group in tangles(graph)]


def test_evogan_has_no_import_cycle() -> None:
    graph = import_graph(module_files())
    found = []
    for group in tangles(graph):
        cycle = shortest_cycle(graph, group)
        others = sorted(group - set(cycle))
        found.append(" -> ".join(cycle) + (f" (tangled with it: {', '.join(others)})" if others else ""))
    assert not found, "import cycles (move code down to break them, never hide an import): " + "; ".join(found)


def test_the_graph_sees_every_kind_of_import() -> None:
    """Module-level, function-level, TYPE_CHECKING, relative and lazy imports are all edges."""
    source = """
from __future__ import annotations
import os
import evogan.engine.run as run
from evogan import api, errors
from evogan.recipe import Recipe
from . import rng
from ..transport.envelope import Frame
from evogan.lazy import lazy
from typing import TYPE_CHECKING
if TYPE_CHECKING:
    from evogan.trained import TrainedRun
else:
    controller = lazy("evogan_gan.sparse.controller", globals())
def later():
    from evogan.registry import Registries
"""
    modules = set(module_files())
    names = imported_names(source, "evogan.engine.cell")
    found = {resolve(name, modules) for name in names} - {None}
    assert found == {
        "evogan.engine.run",
        "evogan.api",
        "evogan.errors",
        "evogan.recipe",
        "evogan.engine",  # `from . import rng` in evogan.engine names evogan.engine.rng: no such module
        "evogan.transport.envelope",
        "evogan.lazy",
        "evogan.trained",
        "evogan_gan.sparse.controller",
        "evogan.registry",
    }
    assert "evogan.rng" in {resolve(n, modules) for n in imported_names("from . import rng", "evogan", is_package=True)}


def test_a_cycle_is_reported_as_the_modules_on_it() -> None:
    graph = {"a": {"b"}, "b": {"c", "d"}, "c": {"a"}, "d": set(), "e": {"e"}, "f": {"g"}, "g": {"f"}}
    assert cycles(graph) == [["a", "b", "c", "a"], ["f", "g", "f"]]  # a self-import is no cycle between modules
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_names_moved_to_break_cycles_still_import_from_their_old_places() -> None:
    from evogan import __version__, entry_points, hookspecs, plugins, rng, version
    from evogan.api import ScoreStream

    assert __version__ == version.__version__ and hookspecs.PROJECT == entry_points.PROJECT == "evogan"
    assert ScoreStream is rng.ScoreStream
    for name in entry_points.__all__:  # the manager's class and its failure records, out of evogan.plugins
        assert getattr(plugins, name) is getattr(entry_points, name), name


def test_the_engine_and_runtime_import_no_sparsity_or_average_module() -> None:
    """Issue 38: per-individual state reaches the engine through ``Individual.extra`` and small protocols
    of the engine's own (``WireState``, ``StateController``; the masked wire format through
    :mod:`evogan.transport.masked`), so no engine or runtime module names ``evogan_gan.sparse``,
    ``evogan.average``, the adversarial problem or the built-in GAN, in any kind of import."""
    graph = import_graph(module_files())
    found = {
        f"{module} -> {target}"
        for module, targets in graph.items()
        if module.startswith(("evogan.engine", "evogan.runtime"))
        for target in targets
        if target in ("evogan.average", "evogan_gan.sparse", "evogan.adversarial", "evogan_gan")
        or target.startswith(("evogan_gan.sparse.", "evogan.adversarial.", "evogan_gan."))
    }
    assert not found, sorted(found)


def test_evogan_imports_nothing_of_the_gan_problems_distribution() -> None:
    """Issue 38: the generic core runs without evogan-gan installed; it reaches the GAN problem only through
    the plugin manager (entry points), never by an import."""
    graph = import_graph(module_files())
    found = {
        f"{module} -> {target}"
        for module, targets in graph.items()
        if not module.startswith("evogan_gan")
        for target in targets
        if target.startswith("evogan_gan")
    }
    assert not found, sorted(found)
