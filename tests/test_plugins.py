from __future__ import annotations

import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import types
from collections import Counter
from pathlib import Path
from typing import Any

import evogan_gan
import pytest
from pydantic import ValidationError

import evogan
from evogan import hookimpl, plugins
from evogan import recipe as recipes
from evogan.api import Selection
from evogan.deprecated import DEPRECATIONS, MOVED_TO_ADVERSARIAL
from evogan.docs import PUBLIC_MODULES
from evogan.errors import ComponentConflictError, UserError
from evogan.plugins import (
    BUILTIN_PLUGINS,
    EntryPointPlugin,
    PluginFailure,
    describe_plugins,
    distribution_modules,
    make_plugin_manager,
    reporting_failures,
)
from evogan.registry import KIND_HOOKS, Registries
from evogan.testing import run_tiny, write_tiny_recipe

ROOT = Path(__file__).resolve().parents[1]
GAN_PLUGINS = distribution_modules("evogan-gan")  # the GAN problem's plugins, for autoload off


def test_builtins_register_through_the_same_hooks() -> None:
    registries = Registries.from_plugin_manager(make_plugin_manager(autoload=False))
    assert registries["selection"].entries["tournament"].plugin == "evogan.builtin.selection"
    assert registries["topology"].entries["torus"].plugin == "evogan.builtin.topology"
    assert "gan" not in registries["problem"]  # the GAN problem is a distribution of its own


def test_the_gan_problem_registers_through_its_entry_points_like_any_package() -> None:
    # the entry-point table (the one list) names every module of evogan_gan that implements a hook
    package = Path(evogan_gan.__file__).parent
    hooked = {
        ".".join(("evogan_gan", *path.relative_to(package).with_suffix("").parts)).removesuffix(".__init__")
        for path in package.rglob("*.py")
        if "@hookimpl" in path.read_text()
    }
    assert hooked == set(GAN_PLUGINS) and len(hooked) == 7
    registries = Registries.from_plugin_manager(make_plugin_manager())
    assert registries["problem"].entries["gan"].plugin == "evogan_gan"
    assert registries["sparsity"].entries["adapt-relax"].plugin == "evogan_gan.sparsity"
    without_autoload = Registries.from_plugin_manager(make_plugin_manager(autoload=False, modules=GAN_PLUGINS))
    assert without_autoload["problem"].entries["gan"].plugin == "evogan_gan"


def test_a_name_registered_twice_names_both_plugins() -> None:
    class Twin(Selection):
        name = "tournament"

    class Impostor:
        @hookimpl
        def evogan_register_selections(self, register):
            register(Twin)

    pm = make_plugin_manager(autoload=False, extra=[Impostor()])
    with pytest.raises(
        ComponentConflictError,
        match=r"'tournament' is registered twice: by plugin "
        r"'evogan.builtin.selection' and by plugin",
    ):
        Registries.from_plugin_manager(pm)


def test_example_plugin_is_discovered_and_usable(tiny_recipe) -> None:
    pm = make_plugin_manager()
    names = {info.name: info for info in describe_plugins(pm)}
    assert names["example"].distribution == "evogan-example"
    assert "evogan_register_selections" in names["example"].hooks
    registries = Registries.from_plugin_manager(pm)
    assert registries["selection"].entries["linear_rank"].plugin == "example"
    recipe = recipes.load(
        tiny_recipe(), registries, ['selection.use="linear_rank"', 'topology={use="complete", cells=3}']
    )
    assert recipe.choices["topology"].component(recipe.choices["topology"].options).neighbours(0) == (1, 2)


def test_a_component_missing_what_its_kind_requires_is_refused_when_registered() -> None:
    class Half(Selection):
        name = "half"

    class Provider:
        @hookimpl
        def evogan_register_selections(self, register):
            register(Half)

    pm = make_plugin_manager(autoload=False, extra=[Provider()])
    with pytest.raises(ComponentConflictError, match=r"registered selection 'half' without select \(what every"):
        Registries.from_plugin_manager(pm)


def test_autoload_can_be_disabled_by_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVOGAN_DISABLE_PLUGIN_AUTOLOAD", "1")
    registries = Registries.from_plugin_manager(make_plugin_manager())
    assert "linear_rank" not in registries["selection"]
    assert "tournament" in registries["selection"]


def test_a_named_plugin_can_be_blocked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVOGAN_BLOCK_PLUGINS", "example")
    assert "complete" not in Registries.from_plugin_manager(make_plugin_manager())["topology"]
    assert (
        "torus"
        not in Registries.from_plugin_manager(make_plugin_manager(blocked=["evogan.builtin.topology"]))[
            "topology"
        ]
    )


def test_a_gan_plugin_blocked_by_its_name_before_evogan_gan_is_blocked_with_a_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.warns(FutureWarning, match=r"'evogan\.builtin\.gan\.sngan' is called 'evogan_gan\.sngan' since"):
        pm = make_plugin_manager(blocked=["evogan.builtin.gan.sngan"])
    assert pm.get_plugin("evogan_gan.sngan") is None and pm.get_plugin("evogan_gan.images") is not None
    monkeypatch.setenv("EVOGAN_BLOCK_PLUGINS", "evogan.builtin.sparsity")
    with pytest.warns(FutureWarning, match=r"is called 'evogan_gan\.sparsity'"):
        assert "adapt-relax" not in Registries.from_plugin_manager(make_plugin_manager())["sparsity"]


def test_cli_lists_plugins_with_and_without_autoload() -> None:
    command = [sys.executable, "-m", "evogan", "plugins", "--json"]
    with_example = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    assert '"evogan-example"' in with_example
    env = {"EVOGAN_DISABLE_PLUGIN_AUTOLOAD": "1", "PATH": ""}
    without = subprocess.run(command, capture_output=True, text=True, check=True, env=env).stdout
    assert '"evogan-example"' not in without and '"evogan.builtin.selection"' in without


def test_every_hookspec_is_documented() -> None:
    from evogan import hookspecs

    contributing = (ROOT / "CONTRIBUTING.md").read_text()
    reference = (ROOT / "docs" / "reference.md").read_text()
    for name in dir(hookspecs):
        if name.startswith("evogan_"):
            assert getattr(hookspecs, name).__doc__, name
            where = reference if name.startswith("evogan_register_") else contributing
            assert f"`{name}(" in where, f"{name} is missing from CONTRIBUTING.md (registration: reference.md)"


def test_every_kind_follows_from_its_base_class() -> None:
    """kinds.KINDS is the one list of kinds: registry, registration hookspecs and docs follow from it."""
    from evogan import api, hookspecs
    from evogan.adversarial import contracts
    from evogan.api import Component
    from evogan.kinds import KINDS

    assert set(KINDS) == {*api.KINDS, *contracts.KINDS} and len(KINDS) == len(api.KINDS) + len(contracts.KINDS)

    assert list(KIND_HOOKS) == [base.kind for base in KINDS]
    assert set(KIND_HOOKS.values()) == {n for n in dir(hookspecs) if n.startswith("evogan_register")}
    pm = make_plugin_manager(autoload=False)
    for base in KINDS:
        assert issubclass(base, Component) and base.__doc__, base
        assert getattr(pm.hook, base.hook).spec.argnames == ("register",)
        assert f"{base.__module__}.{base.__name__}" in getattr(hookspecs, base.hook).__doc__


@pytest.mark.parametrize("name", MOVED_TO_ADVERSARIAL)
def test_moved_gan_contract_warns_once_and_is_the_same_class(name: str) -> None:
    """The adversarial problem's contracts left evogan.api (0.3.0): the old path warns once, naming the new."""
    import evogan.api as api
    from evogan.adversarial import contracts

    message = rf"evogan\.api\.{name} is deprecated .*: use evogan\.adversarial\.contracts\.{name}$"
    with pytest.warns(DeprecationWarning, match=message) as caught:
        exec(f"from evogan.api import {name} as old", namespace := {"__name__": "plugin_0_2"})
    assert len(caught) == 1 and caught[0].filename == "<string>"  # attributed to the importing line
    assert namespace["old"] is getattr(contracts, name)
    with pytest.warns(DeprecationWarning, match=name) as caught:
        assert getattr(api, name) is getattr(contracts, name)
    assert len(caught) == 1


OLD_GAN_IMPORTS = """
import warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    from evogan.builtin.gan.problem import GanProblem as Old
    import evogan.sparse.masks as old_masks
    import evogan.sparse.flops
    from evogan.builtin.gan import images
import evogan_gan.problem, evogan_gan.sparse.masks, evogan_gan.images
assert Old is evogan_gan.problem.GanProblem and old_masks is evogan_gan.sparse.masks and images is evogan_gan.images
assert old_masks.__spec__.name == "evogan_gan.sparse.masks"  # the module's own spec, not the alias's
for warning in caught:
    print(warning.category.__name__, warning.filename, warning.message)
"""


def test_the_gan_problems_old_module_paths_import_the_same_modules_with_one_warning_each() -> None:
    """evogan.builtin.gan and evogan.sparse moved to the evogan-gan distribution (0.3.0): an old plugin's
    imports still work, each moved package warns once (not once per submodule), naming its new home."""
    shown = subprocess.run([sys.executable, "-c", OLD_GAN_IMPORTS], capture_output=True, text=True, check=True)
    lines = shown.stdout.splitlines()
    assert len(lines) == 2, shown.stdout
    assert lines[0].startswith("DeprecationWarning <string> evogan.builtin.gan is deprecated")
    assert lines[0].endswith("use evogan_gan (the evogan-gan distribution)")
    assert lines[1].startswith("DeprecationWarning <string> evogan.sparse is deprecated")


def test_python_m_an_old_module_name_runs_the_moved_module_with_a_warning(tmp_path: Path) -> None:
    run_dir = run_tiny(write_tiny_recipe(tmp_path, generations=1))
    command = [sys.executable, "-m", "evogan.cost", str(run_dir)]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    assert "FutureWarning: python -m evogan.cost is deprecated: use python -m evogan_gan.cost" in done.stderr
    assert len(json.loads(done.stdout)["flops"]) == 1


def test_an_old_gan_module_path_without_the_distribution_names_what_to_install() -> None:
    code = "import sys; sys.modules['evogan_gan'] = None\nimport evogan.sparse.masks"
    failed = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True)
    assert failed.returncode == 1
    last = failed.stderr.strip().splitlines()[-1]
    assert last.startswith("ModuleNotFoundError: evogan.sparse moved to evogan_gan.sparse, in the distribution ")
    assert "evogan-gan (pip install -e plugins/evogan-gan" in last


@pytest.mark.parametrize("module", ["evogan.api", "evogan.adversarial.contracts"])
def test_stacked_training_is_the_training_backend_with_one_warning(module: str) -> None:
    """The contract both backends implement is TrainingBackend (0.3.0); StackedTraining, its old name at
    either old path, warns once and is the same class."""
    from evogan.adversarial.contracts import TrainingBackend

    old, new = f"{module}.StackedTraining", "evogan.adversarial.contracts.TrainingBackend"
    message = rf"{re.escape(old)} is deprecated .*: use {re.escape(new)}$"
    with pytest.warns(DeprecationWarning, match=message) as caught:
        exec(f"from {module} import StackedTraining as old", namespace := {"__name__": "plugin_0_2"})
    assert len(caught) == 1 and caught[0].filename == "<string>"
    assert namespace["old"] is TrainingBackend


# Built-in names that are also ordinary words in a module outside builtin/, each with what it means there.
ORDINARY_WORDS = {
    ("docs.py", "none"): "what the generated reference prints for an absent default",
    ("sparse/controller.py", "dense"): "the FLOPs ledger's key for the same steps at density 1",
    ("sparse/controller.py", "static"): "ADAPT's g_mask value: the generator keeps its initial mask",
    ("sparse/options.py", "static"): "ADAPT's g_mask value: the generator keeps its initial mask",
    ("sparse/flops.py", "dense"): "the FLOPs ledger's key for the same steps at density 1",
    ("sparse/defaults.py", "classifier"): "a layer name kept dense by default",
    ("sweep.py", "set"): "a sweep line's field: the run's --set overrides",
    ("compare.py", "set"): "a sweep line's field: the run's --set overrides",
    ("compare.py", "grid"): "a sparse benchmark line's field: the side of its square grid",
}


def test_core_knows_no_builtin_component_names() -> None:
    """Every module outside builtin/ asks the registries by name; it never names a built-in method itself,
    nor one of the GAN problem's (the module that defines a component may name it)."""
    registries = Registries.from_plugin_manager(make_plugin_manager(autoload=False, modules=GAN_PLUGINS))
    entries = [entry for kind in KIND_HOOKS for entry in registries[kind]]
    package = ROOT / "evogan"
    core = [path for path in sorted(package.rglob("*.py")) if "builtin" not in path.relative_to(package).parts]
    assert package / "runtime" / "worker.py" in core and package / "api.py" in core
    for path in core:
        where = path.relative_to(package).as_posix()
        module = "evogan." + where.removesuffix(".py").replace("/", ".")
        text = path.read_text()
        for entry in entries:
            if entry.component.__module__ == module or (where, entry.name) in ORDINARY_WORDS:
                continue
            name = entry.name
            assert f'"{name}"' not in text and f"'{name}'" not in text, f"{where} names {name!r}"
    assert all(module.startswith("evogan.builtin.") for module in BUILTIN_PLUGINS)


def test_plugins_named_in_the_environment_load_even_without_autoload(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVOGAN_PLUGINS", "evogan.builtin.reporter, ")
    monkeypatch.setenv("EVOGAN_DISABLE_PLUGIN_AUTOLOAD", "1")
    assert make_plugin_manager().get_plugin("evogan.builtin.reporter") is not None
    assert make_plugin_manager(blocked=["evogan.builtin.reporter"]).get_plugin("evogan.builtin.reporter") is None
    monkeypatch.setenv("EVOGAN_PLUGINS", "no_such_module_here")
    with pytest.raises(UserError, match=r"EVOGAN_PLUGINS: cannot import 'no_such_module_here'"):
        make_plugin_manager()


# ------------------------------------------------------------------------------------------ public API
OPTIONS_WARNING = r"evogan\.api\.Options is deprecated since evogan 0\.2\.0 .*: use evogan\.api\.ComponentOptions$"

# The options of a component as CONTRIBUTING.md showed them for 0.1, run as a module (a class body sees
# module globals, not a test function's locals).
PLUGIN_0_1 = """
from pydantic import Field

from evogan.api import Options, Selection


class Roulette(Selection):
    name = "roulette_0_1"

    class Options(Options):
        temperature: float = Field(1.0, gt=0)

    def select(self, population, k, *, rng):
        return list(population[:k])
"""


def test_options_is_a_deprecated_alias_that_0_1_plugins_can_subclass() -> None:
    import evogan.api as api
    from evogan.api import ComponentOptions

    namespace: dict[str, Any] = {"__name__": "plugin_0_1"}
    with pytest.warns(DeprecationWarning, match=OPTIONS_WARNING) as caught:
        exec(PLUGIN_0_1, namespace)
    assert len(caught) == 1 and caught[0].filename == "<string>"  # attributed to the importing line
    Roulette = namespace["Roulette"]
    assert Roulette.Options.__bases__ == (ComponentOptions,)
    assert Roulette.Options(temperature=0.5).temperature == 0.5
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        Roulette.Options(tempreature=0.5)
    with pytest.warns(DeprecationWarning, match="use evogan.api.ComponentOptions"):
        assert api.Options is ComponentOptions
    with pytest.raises(AttributeError, match="has no attribute 'Crossover'"):
        api.Crossover  # noqa: B018
    assert not hasattr(api.Problem, "network_budget")  # deprecated in 0.2.0, removed in 0.3.0


def test_moved_names_of_evogan_api_warn_once_from_the_line_that_reads_them() -> None:
    import evogan.api as api
    from evogan.transport.envelope import Received

    with pytest.warns(DeprecationWarning, match="use evogan.transport.envelope.Received") as caught:
        assert api.Received is Received
    assert len(caught) == 1 and caught[0].filename == __file__

    class Problem:
        pairing = "the problem's pairing"

    job = api.Variation(0, 1, {}, {}, {}, {}, rnd=None, problem=Problem())  # type: ignore[arg-type]
    with pytest.warns(DeprecationWarning, match=r"Variation\.pairing is deprecated .*: use the problem's") as caught:
        assert job.pairing == "the problem's pairing"
    assert len(caught) == 1 and caught[0].filename == __file__
    with pytest.warns(DeprecationWarning, match=r"Variation\.sparsity"):
        assert job.sparsity is None  # a problem without one


def test_changelog_records_every_deprecation_and_the_version() -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text()
    releases = re.findall(r"^## (\d+\.\d+\.\d+) - \d{4}-\d{2}-\d{2}$", changelog, flags=re.M)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert releases[0] == project == evogan.__version__, "CHANGELOG.md, pyproject.toml and evogan.__version__"
    assert changelog.index("## Unreleased") < changelog.index(f"## {releases[0]} ")
    for deprecation in DEPRECATIONS:
        # a deprecation of the coming release sits under Unreleased until that release is cut
        heading = deprecation.since if deprecation.since in releases else "Unreleased"
        release = changelog.split(f"\n## {heading}")[1].split("\n## ")[0]
        section = release.split("### Deprecated\n")[1].split("\n### ")[0]
        assert f"`{deprecation.old}`" in section, f"{deprecation.old} is missing from CHANGELOG.md"


def test_the_gan_problems_distribution_is_released_with_evogan() -> None:
    """evogan-gan is cut from the same tree: its version and its pin of evogan move with evogan's."""
    project = tomllib.loads((ROOT / "plugins" / "evogan-gan" / "pyproject.toml").read_text())["project"]
    assert project["version"] == evogan.__version__
    assert f"evogan=={evogan.__version__}" in project["dependencies"]


def test_reference_lists_every_public_name_from_all() -> None:
    reference = (ROOT / "docs" / "reference.md").read_text().split("## Public API\n")[1]
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        section = reference.split(f"### `{module_name}`\n")[1].split("\n### ")[0]
        for name in module.__all__:
            assert hasattr(module, name) and f"| `{name}` |" in section, f"{module_name}.{name}"
    for deprecation in DEPRECATIONS:
        assert f"`{deprecation.old}`" in reference


# ------------------------------------------------------------------------------- plugins that fail to load
DATA = ROOT / "tests" / "data"
BROKEN = {
    "broken-import": "evogan_broken_plugins.import_error",
    "broken-register": "evogan_broken_plugins.register_error",
    "broken-abstract": "evogan_broken_plugins.missing_method",
}
FROZEN = EntryPointPlugin("frozen-0-1", "frozen_plugin_0_1", "evogan-frozen-0-1", "0.1.0")


def pretend_installed(monkeypatch: pytest.MonkeyPatch, *sources: EntryPointPlugin) -> None:
    """Entry points as if ``sources`` were installed beside the real ones (no distribution installed)."""
    really = plugins.installed_plugins
    monkeypatch.setattr(plugins, "installed_plugins", lambda: [*really(), *sources])


@pytest.fixture
def broken(monkeypatch: pytest.MonkeyPatch) -> None:
    """The three plugins of tests/data/broken_plugins, as installed entry points."""
    monkeypatch.syspath_prepend(str(DATA / "broken_plugins"))
    sources = [EntryPointPlugin(name, value, "evogan-broken-plugins", "0.1.0") for name, value in BROKEN.items()]
    pretend_installed(monkeypatch, *sources)


@pytest.mark.parametrize(
    ("name", "error"),
    [
        ("broken-import", r"ImportError: cannot import name 'Crossover' from 'evogan\.api'"),
        ("broken-register", r"evogan_register_mutations: RuntimeError: broken on purpose: the registration hook"),
        (
            "broken-abstract",
            r"evogan_register_selections: ComponentConflictError: plugin 'broken-abstract' registered selection "
            r"'half' without select \(what every selection must implement\)$",
        ),
    ],
)
def test_a_plugin_that_fails_to_load_is_named_and_left_out(
    name: str, error: str, monkeypatch: pytest.MonkeyPatch, tiny_recipe
) -> None:
    monkeypatch.syspath_prepend(str(DATA / "broken_plugins"))
    pretend_installed(monkeypatch, EntryPointPlugin(name, BROKEN[name], "evogan-broken-plugins", "0.1.0"))
    heard: list[PluginFailure] = []
    with reporting_failures(heard.append):
        pm = make_plugin_manager()
        registries = Registries.from_plugin_manager(pm)
        Registries.from_plugin_manager(pm)  # built again (a worker, evaluate): nothing new to report
    assert [failure.name for failure in heard] == [failure.name for failure in pm.failures] == [name]
    failure = pm.failures[0]
    assert re.match(error, failure.error) and "\n" not in failure.error
    assert failure.plugin.label == f"{name} (evogan-broken-plugins 0.1.0)"
    assert f"--disable-plugin {name} or EVOGAN_BLOCK_PLUGINS={name}" in failure.warning()
    # Left out whole: no hooks, no components (the topology registered before the bad selection too).
    assert pm.get_plugin(name) is None and name not in pm.entry_points
    assert "broken_pair" not in registries["topology"] and "half" not in registries["selection"]
    assert "linear_rank" in registries["selection"] and "tournament" in registries["selection"]
    listed = {info.name: info for info in describe_plugins(pm)}
    assert (listed[name].status, listed[name].error, listed[name].distribution) == (
        "failed",
        failure.error,
        "evogan-broken-plugins",
    )
    assert listed["example"].status == "loaded"
    # What needs it names it; what does not goes on.
    with pytest.raises(UserError, match=rf"unknown selection 'half'.*; plugins that failed to load: {name} \("):
        recipes.load(tiny_recipe(), registries, ['selection.use="half"'])
    assert recipes.load(tiny_recipe(), registries).choices["selection"].name == "tournament"


@pytest.mark.parametrize(
    ("module", "error"),
    [
        ("typo", "implements evogan_register_selection, which evogan does not define"),
        ("taken", "'tournament' is registered twice: by plugin 'evogan.builtin.selection' and by plugin 'taken'"),
    ],
)
def test_unknown_hooks_and_taken_names_are_contained_too(
    module: str, error: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Tournament(Selection):
        name = "tournament"

        def select(self, population, k, *, rng):
            return list(population[:k])

    plugin = types.ModuleType(f"evogan_test_{module}")
    if module == "typo":
        plugin.evogan_register_selection = hookimpl(lambda register: None)  # type: ignore[attr-defined]
    else:
        plugin.evogan_register_selections = hookimpl(lambda register: register(Tournament))  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, plugin.__name__, plugin)
    pretend_installed(monkeypatch, EntryPointPlugin(module, plugin.__name__, f"evogan-{module}", "1.0"))
    with reporting_failures(lambda failure: None):
        pm = make_plugin_manager()
        Registries.from_plugin_manager(pm)
    assert [failure.name for failure in pm.failures] == [module] and error in pm.failures[0].error


def test_without_a_reporter_a_failure_is_a_warning(broken) -> None:
    with pytest.warns(plugins.PluginLoadWarning, match=r"plugin broken-import \(evogan-broken-plugins 0\.1\.0\)"):
        make_plugin_manager(blocked=["broken-register", "broken-abstract"])


def _cli(*args: str) -> Any:
    from click.testing import CliRunner

    from evogan.cli import _attach_commands, cli

    _attach_commands()
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_cli_lists_failed_plugins_warns_once_each_and_goes_on(
    broken, monkeypatch: pytest.MonkeyPatch, tiny_recipe
) -> None:
    listing = _cli("plugins")
    assert listing.exit_code == 0 and "warning" not in listing.stderr
    for name in BROKEN:  # a row, and the whole error on a line of its own
        assert re.search(rf"^ *{name} +evogan-broken-plug\S* +0\.1\.0 +failed +- *$", listing.stdout, flags=re.M)
        assert f"\nfailed: {name} (evogan-broken-plugins 0.1.0): " in listing.stdout
    rows = {row["name"]: row for row in json.loads(_cli("plugins", "--json").stdout)}
    assert rows["broken-import"]["status"] == "failed" and rows["broken-import"]["error"].startswith("ImportError")
    assert rows["example"]["status"] == "loaded" and rows["example"]["error"] == ""

    recipe = str(tiny_recipe(generations=1))
    checked = _cli("validate", recipe)
    assert checked.exit_code == 0 and "ok (torus" in checked.stdout
    warnings = checked.stderr.splitlines()
    assert len(warnings) == 3 and all(w.startswith("warning: plugin ") for w in warnings)
    for name in BROKEN:
        assert sum(f"plugin {name} (evogan-broken-plugins 0.1.0)" in w for w in warnings) == 1
        assert sum(f"--disable-plugin {name} or EVOGAN_BLOCK_PLUGINS={name}" in w for w in warnings) == 1

    monkeypatch.setenv("EVOGAN_BLOCK_PLUGINS", "broken-register")
    quieter = _cli("validate", "--disable-plugin", "broken-import", recipe).stderr
    assert quieter.count("warning:") == 1 and "plugin broken-abstract" in quieter
    monkeypatch.delenv("EVOGAN_BLOCK_PLUGINS")

    needs_it = _cli("validate", recipe, "--set", 'selection.use="half"')
    assert needs_it.exit_code == 2 and "Traceback" not in needs_it.output
    assert "unknown selection 'half'" in needs_it.stderr
    assert "plugins that failed to load: broken-import (" in needs_it.stderr

    # A run goes on; broken-register's evogan_run_start would raise if a failed plugin's hooks fired.
    ran = _cli("run", recipe, "--plain")
    assert ran.exit_code == 0, ran.output
    assert ran.stderr.count("warning: plugin ") == 3 and "best mixture ensemble" in ran.stdout


def test_a_worker_names_failed_plugins_once_per_node(capsys: pytest.CaptureFixture[str]) -> None:
    from evogan.runtime.environment import WorkerEnv
    from evogan.runtime.worker import _plugin_warning

    failure = PluginFailure(EntryPointPlugin("bad", "bad", "evogan-bad", "2.0"), "ImportError: no")
    for rank, local_rank, launched in [(2, 0, False), (3, 1, False), (3, 1, True)]:
        _plugin_warning(WorkerEnv(rank, 4, local_rank, 2, 0, "run"), failure, launched=launched)
    assert capsys.readouterr().err.splitlines() == [
        f"worker rank 2: warning: {failure.warning()}",  # torchrun: each node's local rank 0
        f"worker rank 3: warning: {failure.warning()}",  # evogan run: into the worker's own log
    ]


# ----------------------------------------------------------------------------- the plugin frozen at 0.1
def test_the_frozen_0_1_plugin_loads_runs_and_fires_its_hooks(monkeypatch: pytest.MonkeyPatch, tiny_recipe) -> None:
    monkeypatch.syspath_prepend(str(DATA / "frozen_plugin_0_1"))
    monkeypatch.delitem(sys.modules, "frozen_plugin_0_1", raising=False)  # its import is what warns
    pretend_installed(monkeypatch, FROZEN)
    with pytest.warns(DeprecationWarning, match=OPTIONS_WARNING):
        pm = make_plugin_manager()
    assert not pm.failures and pm.get_plugin("frozen-0-1") is not None
    frozen = sys.modules["frozen_plugin_0_1"]
    drawn: list[int] = []
    select = frozen.Roulette.select

    def counted(self: Any, population: Any, k: int, *, rng: Any) -> Any:
        drawn.append(k)
        return select(self, population, k, rng=rng)

    monkeypatch.setattr(frozen.Roulette, "select", counted)
    run_dir = run_tiny(tiny_recipe(generations=2), overrides=['selection={use="roulette", temperature=0.5}'])
    assert drawn, "the recipe's selection is the plugin's roulette"
    check_frozen_events(run_dir, cells=4, generations=2)


def check_frozen_events(run_dir: Path, *, cells: int, generations: int) -> None:
    """The frozen plugin's hook log: each lifecycle event of the run, once."""
    events = [json.loads(line) for line in (run_dir / "frozen-0-1-events.jsonl").read_text().splitlines()]
    counts = Counter(event["hook"] for event in events)
    assert counts["run_start"] == counts["run_end"] == 1
    assert sorted((e["cell"], e["generation"]) for e in events if e["hook"] == "generation_end") == [
        (c, g) for c in range(cells) for g in range(1, generations + 1)
    ]
    assert counts["exchange"] == cells * generations and counts["checkpoint"] >= cells


# ------------------------------------------------------------------------ installed from outside the repo
@pytest.fixture(scope="module")
def third_party(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The frozen 0.1 plugin and the broken plugins, copied out of the repository and installed with pip
    as a user would, into a throwaway directory on PYTHONPATH (no dependencies: evogan, pydantic and the
    rest come from this environment). Returns the environment that sees them."""
    root = tmp_path_factory.mktemp("third-party")
    sources = [shutil.copytree(DATA / name, root / "src" / name) for name in ("frozen_plugin_0_1", "broken_plugins")]
    site = root / "site-packages"
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index"]
    subprocess.run([*pip, "--target", str(site), *map(str, sources)], check=True, capture_output=True, text=True)
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])),
        "PYTHONWARNINGS": "always::DeprecationWarning:frozen_plugin_0_1",  # the frozen plugin's own, only
        "COLUMNS": "200",
    }


def evogan_command(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "evogan", *args], capture_output=True, text=True, env=env)


DEPRECATED_OPTIONS = "DeprecationWarning: evogan.api.Options is deprecated since evogan 0.2.0"


@pytest.mark.slow
def test_installed_broken_plugins_are_listed_and_toy_ring_still_runs(
    third_party: dict[str, str], tmp_path: Path
) -> None:
    listed = evogan_command(third_party, "plugins", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {row["name"]: row for row in json.loads(listed.stdout)}
    assert {name: rows[name]["status"] for name in [*BROKEN, "frozen-0-1"]} == {
        **dict.fromkeys(BROKEN, "failed"),
        "frozen-0-1": "loaded",
    }
    broken_import = rows["broken-import"]
    assert (broken_import["distribution"], broken_import["version"]) == ("evogan-broken-plugins", "0.1.0")
    assert rows["frozen-0-1"]["distribution"] == "evogan-frozen-0-1"
    assert "evogan_run_start" in rows["frozen-0-1"]["hooks"]

    quick = ["--generations", "1", "--set", "problem.batches_per_generation=5", "--plain"]
    toy_ring = str(ROOT / "recipes" / "toy-ring.toml")
    ran = evogan_command(third_party, "run", toy_ring, "--output-dir", str(tmp_path), *quick)
    assert ran.returncode == 0, ran.stderr
    warnings = [line for line in ran.stderr.splitlines() if line.startswith("warning: plugin ")]
    assert sorted(w.split()[2] for w in warnings) == sorted(BROKEN)
    assert DEPRECATED_OPTIONS in ran.stderr and "Traceback" not in ran.stderr
    (run_dir,) = tmp_path.glob("toy-ring-*")
    check_frozen_events(run_dir, cells=4, generations=1)


@pytest.mark.slow
def test_installed_frozen_plugin_runs_in_worker_processes(third_party: dict[str, str], tmp_path: Path) -> None:
    recipe = write_tiny_recipe(tmp_path, generations=2, overrides=['selection={use="roulette", temperature=0.5}'])
    ran = evogan_command(third_party, "run", str(recipe), "--workers", "2", "--plain")
    assert ran.returncode == 0, ran.stderr
    assert ran.stderr.count("warning: plugin ") == 3 and DEPRECATED_OPTIONS in ran.stderr
    (run_dir,) = (tmp_path / "runs").glob("tiny-*")
    check_frozen_events(run_dir, cells=4, generations=2)
    for rank in (0, 1):  # each worker loads the plugins itself and logs, labelled, what failed
        log = (run_dir / "logs" / f"worker-{rank:04d}.out").read_text()
        assert DEPRECATED_OPTIONS in log
        assert sorted(re.findall(rf"^worker rank {rank}: warning: plugin (\S+) ", log, flags=re.M)) == sorted(BROKEN)


# ------------------------------------------------- methods written for 0.1, before the engine's new keywords
class LossFor01(evogan.adversarial.contracts.Loss[evogan.api.ComponentOptions]):
    """BCE as a 0.1 plugin wrote it: ``generator_loss`` without the ``generator`` keyword."""

    name = "loss_for_0_1"
    calls = 0

    def generator_loss(self, fake_logits: Any) -> Any:
        import torch.nn.functional as F

        LossFor01.calls += 1
        return F.binary_cross_entropy_with_logits(fake_logits, fake_logits.new_ones(fake_logits.shape))

    def discriminator_loss(self, real_logits: Any, fake_logits: Any) -> Any:
        import torch.nn.functional as F

        real = F.binary_cross_entropy_with_logits(real_logits, real_logits.new_ones(real_logits.shape))
        return real + F.binary_cross_entropy_with_logits(fake_logits, fake_logits.new_zeros(fake_logits.shape))


class RegistersLossFor01:
    @hookimpl
    def evogan_register_losses(self, register: Any) -> None:
        register(LossFor01)


ADAPTED = r"LossFor01\.generator_loss does not accept stream \(passed since evogan 0\.2\.0\)"


def test_a_0_1_loss_without_the_new_keyword_is_adapted_with_a_warning_and_trains(tiny_recipe) -> None:
    with pytest.warns(DeprecationWarning, match=ADAPTED):
        registries = Registries.from_plugin_manager(make_plugin_manager(extra=[RegistersLossFor01()]))
    assert registries["loss"].get("loss_for_0_1") is LossFor01
    LossFor01.calls = 0
    with pytest.warns(DeprecationWarning, match=ADAPTED):  # every registration says so
        run_tiny(tiny_recipe(generations=1), RegistersLossFor01(), overrides=['problem.loss={use="loss_for_0_1"}'])
    assert LossFor01.calls > 0, "the recipe's loss is the 0.1 plugin's, called with the keyword dropped"


# ------------------------------------- the random stream's keyword, ``generator`` until 0.3.0, is ``stream``
RENAMES = r"LossFor02\.generator_loss names its random stream 'generator': evogan passes it as 'stream'"


def loss_for_0_2() -> type:
    """BCE as a 0.2 plugin wrote it, naming the stream ``generator``: its class warns when it is defined."""
    import torch.nn.functional as F

    class LossFor02(evogan.adversarial.contracts.Loss[evogan.api.ComponentOptions]):
        name = "loss_for_0_2"
        streams: list[Any] = []

        def generator_loss(self, fake_logits: Any, *, generator: Any = None) -> Any:
            LossFor02.streams.append(generator)
            return F.binary_cross_entropy_with_logits(fake_logits, fake_logits.new_ones(fake_logits.shape))

        def discriminator_loss(self, real_logits: Any, fake_logits: Any) -> Any:
            real = F.binary_cross_entropy_with_logits(real_logits, real_logits.new_ones(real_logits.shape))
            return real + F.binary_cross_entropy_with_logits(fake_logits, fake_logits.new_zeros(fake_logits.shape))

    return LossFor02


def test_a_0_2_loss_naming_the_stream_generator_warns_once_and_trains_with_the_cells_stream(tiny_recipe) -> None:
    with pytest.warns(DeprecationWarning, match=RENAMES) as caught:
        loss = loss_for_0_2()
    assert len(caught) == 1

    class Registers:
        @hookimpl
        def evogan_register_losses(self, register: Any) -> None:
            register(loss)

    run_tiny(tiny_recipe(generations=1), Registers(), overrides=['problem.loss={use="loss_for_0_2"}'])
    import torch

    # the engine passed stream=, which reached the old parameter: training steps draw from a stream,
    # fitness evaluation passes none
    assert any(isinstance(s, torch.Generator) for s in loss.streams)
    assert loss(evogan.api.ComponentOptions()).generator_loss(torch.zeros(2), stream=torch.Generator()) is not None


def test_a_caller_passing_generator_to_a_renamed_method_warns_and_gets_the_same_result() -> None:
    import torch
    from evogan_gan.augment import DiffAugment

    augment = DiffAugment(DiffAugment.Options())
    images = torch.rand(4, 1, 8, 8, generator=torch.Generator().manual_seed(0)) * 2 - 1
    expected = augment(images, stream=torch.Generator().manual_seed(1))
    renamed = r"Augment\.__call__\(generator=\) is deprecated .*: use .*Augment\.__call__\(stream=\)"
    with pytest.warns(DeprecationWarning, match=renamed):
        old = augment(images, generator=torch.Generator().manual_seed(1))
    assert torch.equal(old, expected)
    with pytest.raises(TypeError, match="both 'generator' and 'stream'"):
        augment(images, generator=torch.Generator(), stream=torch.Generator())


def test_every_renamed_keyword_is_a_listed_deprecation_and_the_contracts_name_stream() -> None:
    import inspect

    from evogan.deprecated import RENAMED_KEYWORDS

    listed = {d.old for d in DEPRECATIONS}
    for contract, methods in RENAMED_KEYWORDS.items():
        module, _, name = contract.rpartition(".")
        cls = getattr(importlib.import_module(module), name)
        for method in methods:
            assert f"{contract}.{method}(generator=)" in listed
            assert "stream" in inspect.signature(getattr(cls, method)).parameters, f"{contract}.{method}"


def test_an_adapted_method_refuses_what_0_1_could_not_do() -> None:
    from evogan.deprecated import adapt_signatures

    class TransportFor01:
        def gather(self, cell: int, peers: Any, generation: int, *, max_staleness: int, timeout: float) -> Any:
            return {"cell": cell, "generation": generation}

    class TakesEverything:
        def gather(self, cell: int, peers: Any, generation: int, **options: Any) -> Any:
            return options

    with pytest.warns(DeprecationWarning, match=r"TransportFor01\.gather does not accept substep"):
        assert adapt_signatures(TransportFor01, "transport") == ["gather"]
    transport = TransportFor01()
    assert transport.gather(1, [0], 3, max_staleness=0, timeout=1.0, substep=0) == {"cell": 1, "generation": 3}
    with pytest.raises(UserError, match=r"TransportFor01\.gather was written for evogan 0\.1 .* substep=5"):
        transport.gather(1, [0], 3, max_staleness=0, timeout=1.0, substep=5)  # exchange.every_batches
    assert adapt_signatures(TakesEverything, "transport") == []  # **options takes the new keywords
