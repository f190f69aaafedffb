"""The ``evogan`` command line. Commands are thin: they build the context and call the library."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from types import FrameType
from typing import Any

import click
from rich.console import Console

from evogan import __version__
from evogan.cli_common import disable_option, fail, handle_errors, leave, plugin_manager
from evogan.errors import EvoganError, RecipeError, UserError


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="evogan")
def cli() -> None:
    """evogan: spatial coevolution of GANs on a grid of cells, with plugins for everything that varies."""


# ---------------------------------------------------------------------------------------------- run
class StopFlag:
    """First Ctrl-C: finish the current generation, write checkpoints, stop. Second: abort now."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.requested = False

    def __call__(self) -> bool:
        return self.requested

    def handle(self, signum: int, frame: FrameType | None) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        self.console.print("[yellow]stopping after this generation; Ctrl-C again to abort without saving[/]")


def overrides_from(
    seed: int | None,
    generations: int | None,
    grid: str | None,
    output_dir: Path | None,
    workers: int | None,
    sets: tuple[str, ...],
) -> list[str]:
    from evogan.training import overrides_for

    overrides = []
    if grid is not None:
        rows, sep, cols = grid.lower().partition("x")
        if not sep or not rows.isdigit() or not cols.isdigit():
            raise click.BadParameter("expected ROWSxCOLS, e.g. 3x3", param_hint="--grid")
        overrides += [f"topology.rows={rows}", f"topology.cols={cols}"]
    return overrides_for(seed, generations, output_dir, workers, [*overrides, *sets])


NNODES_HELP = (
    "Machines in the run. Above 1, ZeroMQ listens on every interface and advertises this node's address "
    "towards the rendezvous ($EVOGAN_NODE_ADDRESS overrides; exchange.options.bind/advertise too)."
)


@cli.command()
@click.argument("recipe", required=False, type=click.Path(path_type=Path))
@click.option(
    "--resume",
    "resume_dir",
    type=click.Path(path_type=Path),
    metavar="RUN_DIR",
    help="Continue a run from its last checkpoints (the recipe is read from RUN_DIR).",
)
@click.option("--seed", type=int, help="Override run.seed.")
@click.option("--generations", type=click.IntRange(min=1), help="Override run.generations.")
@click.option("--grid", metavar="ROWSxCOLS", help="Override topology.rows and topology.cols, e.g. 3x3.")
@click.option("--output-dir", type=click.Path(path_type=Path), help="Override run.output_dir.")
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    help="Override run.workers (processes on this machine). More than one per cell is an error; a recipe's "
    "run.workers above the cells is cut to them, with a note.",
)
@click.option(
    "--set",
    "sets",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override any recipe key, e.g. --set problem.batch_size=64. Repeatable.",
)
@click.option(
    "--run-dir",
    "run_dir_path",
    type=click.Path(path_type=Path),
    help="Use this run directory instead of OUTPUT_DIR/<name>-<timestamp> (the same on every node); "
    "if it holds checkpoints, the run resumes.",
)
@click.option("--nnodes", type=click.IntRange(min=1), default=1, show_default=True, help=NNODES_HELP)
@click.option(
    "--rdzv-endpoint",
    metavar="HOST:PORT",
    default="",
    help="Where the nodes' agents meet (with --nnodes > 1; hosted by the node whose address it is).",
)
@click.option("--rdzv-id", default="", help="Run id the nodes share (default: from the run directory name).")
@click.option(
    "--join-timeout",
    type=click.FloatRange(min=1),
    default=600.0,
    show_default=True,
    help="Seconds a node waits for the others at the rendezvous.",
)
@click.option(
    "--node-timeout",
    type=click.FloatRange(min=1),
    default=45.0,
    show_default=True,
    help="With --nnodes > 1: seconds a node may go unheard (link down, agent gone) before every node that "
    "notices stops the run; shorter outages are waited out.",
)
@click.option(
    "--rdzv-host",
    type=click.Choice(["auto", "yes", "no"]),
    default="auto",
    show_default=True,
    help="Whether this node hosts the rendezvous store; auto: the node that has the endpoint's address on one "
    "of its interfaces.",
)
@click.option("--quiet", "-q", is_flag=True, help="Print nothing but errors.")
@click.option(
    "--plain", is_flag=True, help="Plain lines instead of the live view (default when not a terminal)."
)
@click.option(
    "--download",
    is_flag=True,
    help="Fetch missing datasets and weights (download = true for every component) into the cache "
    "($EVOGAN_CACHE_DIR, else $XDG_CACHE_HOME/evogan or ~/.cache/evogan).",
)
@disable_option
@handle_errors
def run(
    recipe: Path | None,
    resume_dir: Path | None,
    seed: int | None,
    generations: int | None,
    grid: str | None,
    output_dir: Path | None,
    workers: int | None,
    sets: tuple[str, ...],
    run_dir_path: Path | None,
    nnodes: int,
    rdzv_endpoint: str,
    rdzv_id: str,
    join_timeout: float,
    node_timeout: float,
    rdzv_host: str,
    quiet: bool,
    plain: bool,
    download: bool,
    disable: tuple[str, ...],
) -> None:
    """Train the grid a RECIPE describes (or --resume a run). Writes runs/<name>-<timestamp>/."""
    if download:  # read by every component that can download, in this process and the workers it starts
        from evogan.download import DOWNLOAD_ENV

        os.environ[DOWNLOAD_ENV] = "1"
    from evogan.builtin.reporter import TerminalReporter
    from evogan.runtime.launcher import Nodes
    from evogan.runtime.single import prepare

    console = Console(soft_wrap=True)
    mode = "quiet" if quiet else ("plain" if plain or not console.is_terminal else "live")
    reporter = TerminalReporter(console, mode)  # type: ignore[arg-type]
    pm = plugin_manager(disable, (reporter,))
    overrides = overrides_from(seed, generations, grid, output_dir, workers, sets)
    from evogan.training import workers_explicit

    explicit = workers_explicit(workers, sets)
    prepared = prepare(
        recipe,
        resume_dir=resume_dir,
        overrides=overrides,
        pm=pm,
        run_dir_path=run_dir_path,
        cap_workers=not explicit,
        nodes=nnodes,
    )
    if not quiet:
        for note in prepared.notes:
            console.print(note, markup=False, highlight=False)
    hosts = {"yes": True, "no": False}.get(rdzv_host)
    nodes = Nodes(nnodes, rdzv_endpoint, rdzv_id, join_timeout, hosts, node_timeout)
    stop = StopFlag(console)
    previous = signal.signal(signal.SIGINT, stop.handle)
    try:
        _run_prepared(prepared, stop, console, quiet, disable, nodes)
    except UserError:
        if not prepared.resume:  # e.g. missing data: leave no empty run directory behind
            prepared.run_dir.discard_if_unused()
        raise
    finally:
        signal.signal(signal.SIGINT, previous)
    if stop.requested:
        leave(130)


def _run_prepared(
    prepared: Any, stop: StopFlag, console: Console, quiet: bool, disable: tuple[str, ...], nodes: Any
) -> None:
    from evogan.training import execute

    try:
        execute(prepared, stop=stop, console=console, quiet=quiet, disable=disable, nodes=nodes)
    except KeyboardInterrupt:
        console.print("[red]aborted; the last written checkpoints are intact[/]")
        leave(130)


# ---------------------------------------------------------------------------------------------- validate
@cli.command()
@click.argument("recipes", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override a recipe key. Repeatable.")
@disable_option
@handle_errors
def validate(recipes: tuple[Path, ...], sets: tuple[str, ...], disable: tuple[str, ...]) -> None:
    """Check RECIPES without running them; every problem is one line."""
    from evogan import recipe as recipe_module
    from evogan.registry import Registries

    registries = Registries.from_plugin_manager(plugin_manager(disable))
    lines: list[str] = []
    for path in recipes:
        try:
            recipe = recipe_module.load(path, registries, sets)
        except RecipeError as error:
            lines.extend(error.lines)
        except EvoganError as error:
            lines.append(str(error))
        else:
            click.echo(
                f"{path}: ok ({recipe.choices['topology'].name}, problem {recipe.choices['problem'].name})"
            )
    if lines:
        fail(RecipeError(lines))


# ---------------------------------------------------------------------------------------------- plugins
@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@disable_option
@handle_errors
def plugins(as_json: bool, disable: tuple[str, ...]) -> None:
    """List plugins: name, distribution, version, hooks; one that failed to load as failed, with its error."""
    from rich.markup import escape
    from rich.table import Table

    from evogan.plugins import describe_plugins, reporting_failures
    from evogan.registry import Registries

    with reporting_failures(lambda failure: None):  # listed below, not warned about
        pm = plugin_manager(disable)
        Registries.from_plugin_manager(pm)  # runs the registration hooks: a failing one is a failed plugin
    infos = describe_plugins(pm)
    if as_json:
        click.echo(json.dumps([info.__dict__ for info in infos], indent=2))
        return
    table = Table("plugin", "distribution", "version", "status", "hooks", box=None, header_style="bold")
    for info in infos:
        failed = info.status == "failed"
        status, hooks = ("[red]failed[/]", "-") if failed else (info.status, ", ".join(info.hooks))
        table.add_row(info.name, info.distribution, info.version, status, hooks)
    console = Console()
    console.print(table)
    for info in infos:  # whole lines, however narrow the terminal: what to report or block
        if info.status == "failed":
            line = f"{info.name} ({info.distribution} {info.version}): {info.error}"
            console.print(f"[red]failed:[/] {escape(line)}", soft_wrap=True)


@cli.command()
@click.argument("kind", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@disable_option
@handle_errors
def components(kind: str | None, as_json: bool, disable: tuple[str, ...]) -> None:
    """List registered components by KIND, with their options and defaults."""
    from rich.table import Table

    from evogan.errors import UserError
    from evogan.registry import KIND_HOOKS, Registries

    registries = Registries.from_plugin_manager(plugin_manager(disable))
    if kind is not None and kind not in KIND_HOOKS:
        raise UserError(f"unknown kind {kind!r}; kinds: {', '.join(KIND_HOOKS)}")
    kinds = [kind] if kind else list(KIND_HOOKS)
    listing: dict[str, list[dict[str, Any]]] = {}
    for name in kinds:
        listing[name] = []
        for entry in registries[name]:
            options = {
                field: {
                    "default": None if info.is_required() else _jsonable(info.get_default(call_default_factory=True)),
                    "description": info.description or "",
                }
                for field, info in entry.component.Options.model_fields.items()
            }
            listing[name].append(
                {
                    "name": entry.name,
                    "plugin": entry.plugin,
                    "description": entry.component.description,
                    "options": options,
                }
            )
    if as_json:
        click.echo(json.dumps(listing, indent=2))
        return
    console = Console()
    for name, entries in listing.items():
        table = Table(title=f"[bold]{name}[/]", title_justify="left", box=None, header_style="bold")
        for column in ("name", "plugin", "options (default)", "description"):
            table.add_column(column)
        for item in entries:
            shown = ", ".join(f"{k}={_short(v['default'])}" for k, v in item["options"].items()) or "-"
            table.add_row(item["name"], item["plugin"], shown, item["description"])
        console.print(table)
        console.print()


def _jsonable(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump()
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple):
        return list(value)
    return value


def _short(value: Any) -> str:
    if isinstance(value, dict) and "use" in value:
        return str(value["use"])
    return json.dumps(value) if isinstance(value, str) else str(value)


def _attach_commands() -> None:
    """Commands that live beside the modules they drive, added at start-up (not at import time)."""
    from evogan.commands import COMMANDS

    for command in COMMANDS:
        if command.name not in cli.commands:
            cli.add_command(command)


def main() -> None:
    _attach_commands()
    cli(prog_name="evogan")


__all__ = ["cli", "main"]
