"""Recipes: TOML files validated into typed models before any work starts.

A recipe has fixed tables (``[run]``, ``[population]``, ``[mixture]``, ``[exchange]``) and one table per
extension point of the engine (``[topology]``, ``[selection]``, ``[problem]``) whose ``use`` key names a
registered component (an optional table left out gets the kind's default component, if it has one); the
table's other keys are validated against that component's ``Options``. Components may nest references to
other components: the GAN problem's ``[problem.data]``, and the parts of its training loop,
``[problem.pairing]``, ``[problem.mutation]`` and ``[problem.sparsity]`` (top-level tables before 0.3.0,
still read with one warning each: :data:`PROBLEM_PARTS`). Every problem becomes one line
``recipe.toml: selection.tournament_size: must be >= 1``.
"""

from __future__ import annotations

import copy
import hashlib
import json
import tomllib
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar, get_args

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from evogan import deprecated
from evogan.api import Component, ComponentOptions, ComponentRegistries, ConnectableTransport
from evogan.errors import RecipeError, UserError
from evogan.precision import PrecisionName
from evogan.registry import Registries


# ------------------------------------------------------------------------------------------ fixed tables
def _auto_or_bool(value: Any) -> Any:
    """``"auto"``, true or false exactly (pydantic would read 1, "yes" and "on" as true)."""
    if value == "auto" or isinstance(value, bool):
        return value
    raise ValueError(f'must be "auto", true or false (got {value!r})')


Pool = Literal["neighbourhood", "all"]  # which ensembles mixture optimisation works on
POOLS: tuple[str, ...] = get_args(Pool)
AutoOrBool = Annotated[Literal["auto", True, False], BeforeValidator(_auto_or_bool)]


class _Table(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RunSection(_Table):
    name: str | None = Field(None, description="run name; default: the recipe file's stem")
    seed: int = Field(1, ge=0, description="the one seed of the run, split per cell and generation")
    generations: int = Field(10, ge=1, description="generations (Lipizzaner iterations) per cell")
    output_dir: Path = Field(Path("runs"), description="parent of the run directory <name>-<timestamp>")
    checkpoint_every: int = Field(5, ge=0, description="checkpoint every k generations (0: only at the end)")
    samples_every: int = Field(
        0, ge=0, description="write sample pictures every k generations (0: at the end)"
    )
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto: cuda:LOCAL_RANK if present")
    workers: int = Field(1, ge=1, description="worker processes; 1 runs every cell in this process")
    threads: int = Field(
        0,
        ge=0,
        description="torch threads per process (0: torch's default in one process; with workers, this "
        "machine's cores divided by the worker processes on it, at least 1)",
    )
    max_restarts: int = Field(3, ge=0, description="restarts of the worker group after a worker dies")
    vectorize: AutoOrBool = Field(
        "auto",
        description="train the cells of a process as one batched computation (stacked networks, vmap); "
        "records agree with the looped path within float tolerance. auto: looped everywhere until "
        "`make gpu-check` has passed on a GPU (then on CUDA where supported; the CPU stays looped, "
        "bitwise equal for any number of cells per process); true: vectorised, an error where it cannot be",
    )
    precision: PrecisionName = Field(
        "fp32",
        description="the arithmetic of training, fitness and scoring forwards: fp32, or autocast to bf16 "
        "(CUDA from compute capability 8.0; CPUs with bf16 units) or fp16 (CUDA, with a loss scale); "
        "weights, optimizer state, losses and metrics stay fp32",
    )
    keep_checkpoints: int = Field(
        3, ge=1, description="checkpoints kept per cell (the newest ones); resume picks the newest all cells share"
    )
    watchdog: float = Field(
        0.0,
        ge=0,
        description=(
            "seconds a worker may go without progress beyond what its current phase needs before it is "
            "killed and restarted (0: automatic, 10x the longest phase seen so far, at least 60 s; 600 s "
            "before the first phase has been timed)"
        ),
    )



class PopulationSection(_Table):
    size: int = Field(1, ge=1, description="individuals of each role per cell (a GAN's generators and discriminators)")
    selection: bool = Field(True, description="tournament selection and replacement (Lipizzaner)")
    fitness_mode: Literal["average", "best", "worst"] = Field(
        "average", description="how a loss against each opponent becomes one fitness"
    )
    replacement: Literal["if_better", "always", "generational", "mixture"] = Field(
        "if_better",
        description="the best offspring replaces the worst local only if better (if_better) or always; "
        "generational: the offspring replace the whole population (comma replacement); mixture: as if_better, "
        "but the scored role's offspring (a GAN's generator) is judged by the cell's mixture with it in place "
        "of the worst local, on the validation stream",
    )
    opponents: Literal["offspring", "neighbourhood"] = Field(
        "offspring",
        description="with selection on, whom offspring train against: the other role's offspring "
        "(Lipizzaner), or those and the neighbours' copies (what the pairings draw from with selection off)",
    )
    migration_every: int = Field(
        0,
        ge=0,
        description="every k generations a cell takes its best neighbour's pair (its best of each role) in place "
        "of its worst when that neighbour's scored individual (a GAN's generator) scores better on the "
        "validation stream (0: never)",
    )
    restore_lr: float = Field(
        0.5,
        gt=0,
        le=1,
        description="an individual whose numbers turn non-finite in training is restored (its copy from before "
        "the generation, else its cell's best, else its best neighbour's) with its learning rate times this "
        "(1: unchanged)",
    )


class OptimizeSection(_Table):
    """``[mixture.optimize]``: the (1+1)-ES on mixture weights after training (Lipizzaner's
    ``optimize_mixture``), also ``evogan optimize RUN_DIR``. It reads the checkpoints and writes
    ``optimized-mixture.json``; it changes no training number, so these keys are not in the digest."""

    generations: int = Field(
        0, ge=0, description="ES generations after the last training generation (0: none; Lipizzaner 10, configs 50)"
    )
    samples: int = Field(
        0,
        ge=0,
        description="samples per validation score, on noise fixed for every candidate (0: problem's "
        "score_samples); the test re-score of the result uses the problem's test count",
    )
    random_init: bool = Field(
        False, description="start from random normalised weights instead of the trained ones (es_random_init)"
    )
    sigma: float = Field(0.01, gt=0, description="standard deviation of the Gaussian weight mutation")
    pool: Pool = Field(
        "neighbourhood",
        description="each cell's neighbourhood mixture, or one ensemble of every cell's best generator",
    )


class MixtureSection(_Table):
    enabled: bool = Field(
        True,
        description="evolve mixture weights with a (1+1)-ES each generation; false: no mixture, each cell "
        "stands for its best individual alone (records and summary carry no weights)",
    )
    sigma: float = Field(0.01, gt=0, description="standard deviation of the Gaussian weight mutation")
    optimize: OptimizeSection = Field(
        default_factory=lambda: OptimizeSection.model_validate({}),
        description="the ES after training ([mixture.optimize])",
    )


class ExchangeSection(_Table):
    transport: str | None = Field(
        None,
        description="transport component; default: in-process for one worker, ZeroMQ for several",
        json_schema_extra={"evogan_kind": "transport"},
    )
    max_staleness: int = Field(0, ge=0, description="accept neighbour models this many generations old")
    timeout: float = Field(60.0, gt=0, description="seconds to wait for fresh neighbour models")
    every_batches: int = Field(
        0,
        ge=0,
        description="also exchange after every k training batches inside a generation (0: once per generation)",
    )
    optimizer_state: AutoOrBool = Field(
        "auto",
        description="send the optimizer's state (Adam moments, step counts) with the models; "
        "auto: when selection is on, as Lipizzaner does",
    )
    wire: Literal["fp32", "bf16"] = Field(
        "fp32",
        description="precision of the floating-point tensors sent between cells (weights, their average, "
        "optimizer moments): bf16 halves the bytes and rounds what neighbours receive; scalars such as Adam's "
        "step count stay fp32, and received tensors are fp32 again",
    )
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="the transport's options (e.g. bind, advertise, curve_dir); node-specific, so not hashed",
    )


    def carries_optimizer(self, selection: bool) -> bool:
        """Whether models travel with their optimizer state (``auto``: only when selection can adopt them)."""
        return selection if self.optimizer_state == "auto" else bool(self.optimizer_state)


FIXED_TABLES: dict[str, type[_Table]] = {
    "run": RunSection,
    "population": PopulationSection,
    "mixture": MixtureSection,
    "exchange": ExchangeSection,
}
# [run] keys that may change between a run and its resumption without changing its numbers
OPERATIONAL_KEYS = (
    "generations",
    "output_dir",
    "checkpoint_every",
    "samples_every",
    "workers",
    "max_restarts",
    "keep_checkpoints",
    "watchdog",
    "device",
    "threads",
    "name",
)
# table -> (component kind, required?)
COMPONENT_TABLES: dict[str, tuple[str, bool]] = {
    "topology": ("topology", True),
    "selection": ("selection", True),
    "problem": ("problem", True),
}
# Top-level tables of 0.2 that the problem owns since 0.3.0 ([problem.pairing], ...): read from the old
# place with one FutureWarning each (evogan.deprecated.RECIPE_KEYS), as are --set overrides of them.
PROBLEM_PARTS: tuple[str, ...] = ("pairing", "mutation", "sparsity")


# ------------------------------------------------------------------------------------------ nested refs
class ComponentRef(BaseModel):
    """A nested ``{use = "name", ...options}`` table inside a component's options."""

    model_config = ConfigDict(extra="allow", frozen=True)
    use: str

    @property
    def settings(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


def component_field(kind: str, default: str, description: str) -> Any:
    """Declare an Options field that names another component, e.g. the GAN problem's dataset."""
    return Field(
        default_factory=lambda: ComponentRef(use=default),
        description=description,
        json_schema_extra={"evogan_kind": kind},
    )


def component_names_field(kind: str, default: tuple[str, ...], description: str, **constraints: Any) -> Any:
    """Declare an Options field that lists components of one kind by name (their default options), e.g.
    E-GAN's losses; the recipe's validation checks each name against the registry."""
    return Field(default, description=description, json_schema_extra={"evogan_names": kind}, **constraints)


def _check_names(
    registries: Registries, options: BaseModel, path: str, source: str, errors: list[str]
) -> None:
    """Check the fields of ``options`` declared with :func:`component_names_field`, in nested tables too."""
    for field_name, info in type(options).model_fields.items():
        value = getattr(options, field_name)
        extra = info.json_schema_extra
        if isinstance(extra, dict) and "evogan_names" in extra:
            for name in value:
                try:
                    registries[str(extra["evogan_names"])].get(name)
                except UserError as exc:
                    errors.append(f"{source}: {path}.{field_name}: {exc}")
        elif isinstance(value, BaseModel) and not isinstance(value, ComponentRef):
            _check_names(registries, value, f"{path}.{field_name}", source, errors)


def nested_kinds(options_type: type[BaseModel]) -> dict[str, str]:
    """Field name -> component kind, for the fields declared with :func:`component_field`."""
    kinds = {}
    for field_name, info in options_type.model_fields.items():
        extra = info.json_schema_extra
        if isinstance(extra, dict) and "evogan_kind" in extra:
            kinds[field_name] = str(extra["evogan_kind"])
    return kinds


# ------------------------------------------------------------------------------------------ errors
def _message(error: Mapping[str, Any]) -> str:
    kind, ctx = error["type"], error.get("ctx") or {}
    symbols = {"greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<=", "less_than": "<"}
    if kind in symbols:
        bound = next(iter(ctx.values()))
        return f"must be {symbols[kind]} {bound}"
    if kind == "extra_forbidden":
        return "unknown key"
    if kind == "missing":
        return "required key is missing"
    message = str(error["msg"])
    message = message.replace("Input should be", "must be").replace("Value error, ", "")
    if error.get("input") is not None and kind.endswith(("_type", "_parsing")):
        message += f" (got {error['input']!r})"
    return message


def format_errors(source: str, prefix: str, exc: ValidationError) -> list[str]:
    lines = []
    for error in exc.errors():
        location = ".".join(str(part) for part in (prefix, *error["loc"]) if part != "")
        lines.append(f"{source}: {location}: {_message(error)}")
    return lines


# ------------------------------------------------------------------------------------------ choices
ComponentT = TypeVar("ComponentT", bound=Component[Any])


def create(
    kind: type[ComponentT], component: type[Component[Any]], options: ComponentOptions, *args: Any
) -> ComponentT:
    """``component(options, *args)``, checked to be a ``kind`` (a registry only checks the kind's name)."""
    instance = component(options, *args)
    if not isinstance(instance, kind):
        raise TypeError(f"{component.__qualname__} is registered as a {kind.__name__} but does not subclass it")
    return instance


@dataclass(frozen=True)
class Choice:
    """A validated component choice: the class, its options, and where it sits in the recipe."""

    path: str
    component: type[Component[Any]]
    options: ComponentOptions

    @property
    def name(self) -> str:
        return self.component.name

    def create(self, kind: type[ComponentT], *args: Any) -> ComponentT:
        """The chosen component with its options (``args`` follow them: a problem's context)."""
        return create(kind, self.component, self.options, *args)


def resolve_choice(
    registries: Registries,
    kind: str,
    table: Mapping[str, Any],
    path: str,
    source: str,
    errors: list[str],
    *,
    options_path: str | None = None,
) -> Choice | None:
    """Validate one ``{use = ..., ...}`` table (and its nested references) against the registry."""
    if not isinstance(table, Mapping):
        errors.append(f"{source}: {path}: must be a table")
        return None
    name = table.get("use")
    if not isinstance(name, str):
        errors.append(f"{source}: {path}.use: required: the name of a {kind} component")
        return None
    try:
        component = registries[kind].get(name)
    except UserError as exc:
        errors.append(f"{source}: {path}.use: {exc}")
        return None
    settings = {key: value for key, value in table.items() if key != "use"}
    try:
        options = component.Options.model_validate(settings)
    except ValidationError as exc:
        errors.extend(format_errors(source, options_path or path, exc))
        return None
    _check_names(registries, options, path, source, errors)
    for field_name, nested_kind in nested_kinds(component.Options).items():
        ref = getattr(options, field_name)
        if ref is None:  # an optional part left out (the GAN problem's sparsity)
            continue
        resolve_choice(
            registries, nested_kind, {"use": ref.use, **ref.settings}, f"{path}.{field_name}", source, errors
        )
    return Choice(path, component, options)


def build_nested(registries: ComponentRegistries, kind: type[ComponentT], ref: ComponentRef) -> ComponentT:
    """The component a nested reference names, with its options (already validated with the recipe)."""
    component = registries[kind.kind].get(ref.use)
    return create(kind, component, component.Options.model_validate(ref.settings))


# ------------------------------------------------------------------------------------------ the recipe
@dataclass(frozen=True)
class Recipe:
    path: Path
    data: dict[str, Any]  # the recipe as run: the file's tables after command-line overrides
    run: RunSection
    population: PopulationSection
    mixture: MixtureSection
    exchange: ExchangeSection
    choices: dict[str, Choice]

    @property
    def name(self) -> str:
        return self.run.name or self.path.stem

    @property
    def digest(self) -> str:
        """Hash of everything that decides the numbers (not how long, where or on how many workers
        the run goes): workers on different nodes compare it, and ``--resume`` checks it."""
        data = copy.deepcopy(self.data)
        problem = data.get("problem")
        if isinstance(problem, dict):  # hashed where 0.2 had them: runs started before the move resume
            for part in PROBLEM_PARTS:
                if part in problem:
                    data[part] = problem.pop(part)
        for key in OPERATIONAL_KEYS:
            data.get("run", {}).pop(key, None)
        if data.get("run", {}).get("precision") == "fp32":  # the default, written out: the same numbers
            del data["run"]["precision"]
        mixture = data.get("mixture", {})
        if "optimize" in mixture:  # after training: changes no number of the run itself
            del mixture["optimize"]
            if not mixture:
                del data["mixture"]
        exchange = data.get("exchange", {})
        if "options" in exchange:  # addresses and key paths differ between nodes
            del exchange["options"]
            if not exchange:
                del data["exchange"]
        return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]

    def to_toml(self) -> str:
        return dumps_toml(self.data)


def read_toml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"{path}: recipe not found") from None
    except IsADirectoryError:
        raise UserError(f"{path}: is a directory, not a recipe file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read recipe: {exc}") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{path}: invalid TOML: {exc}") from None


def apply_overrides(data: dict[str, Any], overrides: Iterable[str], source: str) -> dict[str, Any]:
    """Apply ``dotted.key=value`` overrides; values are parsed as TOML (``3``, ``"x"``, ``true``)."""
    data = copy.deepcopy(data)
    warned: set[str] = set()
    for override in overrides:
        key, sep, raw = override.partition("=")
        if not sep or not key.strip():
            raise UserError(f"--set {override!r}: expected KEY=VALUE, e.g. run.seed=3")
        try:
            value = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw  # a bare word: treat as a string
        *parents, leaf = key.strip().split(".")
        head = (parents or [leaf])[0]
        problem = data.get("problem")
        if head in PROBLEM_PARTS and head not in data and isinstance(problem, dict) and head in problem:
            # --set pairing.use=x on a recipe with [problem.pairing]: where the table is now
            if head not in warned:
                warned.add(head)
                deprecated.warn(f"[{head}]")
            parents = ["problem", *parents] if parents else ["problem"]
        table = data
        for part in parents:
            table = table.setdefault(part, {})
            if not isinstance(table, dict):
                raise UserError(f"--set {override!r}: {part} is not a table in {source}")
        table[leaf] = value
    return data


def validate(data: dict[str, Any], registries: Registries, *, path: Path = Path("recipe.toml")) -> Recipe:
    """Validate a recipe's tables; raise :class:`RecipeError` with every problem, one line each."""
    source = str(path)
    errors: list[str] = []
    data = move_problem_parts(data, registries, source)
    known = set(FIXED_TABLES) | set(COMPONENT_TABLES)
    for key in data:
        if key not in known:
            errors.append(f"{source}: {key}: unknown table (known: {', '.join(sorted(known))})")
    fixed: dict[str, Any] = {}  # table -> its section model
    for table, model in FIXED_TABLES.items():
        try:
            fixed[table] = model.model_validate(data.get(table, {}))
        except ValidationError as exc:
            errors.extend(format_errors(source, table, exc))
    choices: dict[str, Choice] = {}
    for table, (kind, required) in COMPONENT_TABLES.items():
        if table not in data:
            if required:
                errors.append(f"{source}: {table}: required table is missing")
            elif (default := registries[kind].default()) is not None:
                # Not written into the recipe's data: its digest (and resumability) stays as it was.
                choices[table] = Choice(table, default, default.Options())
            continue
        choice = resolve_choice(registries, kind, data[table], table, source, errors)
        if choice is not None:
            choices[table] = choice
    transport = fixed["exchange"].transport if "exchange" in fixed else None
    if transport is not None:
        options = fixed["exchange"].options
        resolve_choice(
            registries,
            "transport",
            {"use": transport, **options},
            "exchange.transport",
            source,
            errors,
            options_path="exchange.options",
        )
    if "run" in fixed:  # what the engine cannot stack, known from the recipe; the device is not known yet
        sparsity = _sparsity_component(choices.get("problem"), registries)
        every_batches = fixed["exchange"].every_batches if "exchange" in fixed else 0
        obstacle = vectorize_obstacle(sparsity, every_batches)
        try:
            vectorize_choice(fixed["run"].vectorize, device="", cells=0, obstacle=obstacle)
        except UserError as error:
            errors.append(f"{source}: {error}")
    if errors:
        raise RecipeError(errors)
    return Recipe(
        path=path,
        data=data,
        run=fixed["run"],
        population=fixed["population"],
        mixture=fixed["mixture"],
        exchange=fixed["exchange"],
        choices=choices,
    )


def move_problem_parts(data: dict[str, Any], registries: Registries, source: str = "recipe.toml") -> dict[str, Any]:
    """``data`` with 0.2's top-level ``[pairing]``, ``[mutation]`` and ``[sparsity]`` moved into ``[problem]``,
    one ``FutureWarning`` per table moved. A problem whose options take no such part (0.2 made the sorting
    networks name a mutation that changed nothing) had it ignored by the engine: such a pairing or mutation is
    dropped, with a warning saying so."""
    old = [part for part in PROBLEM_PARTS if part in data]
    if not old:
        return data
    data = copy.deepcopy(data)
    problem = data.get("problem")
    if not isinstance(problem, dict):  # no [problem] (or not a table): validation names it
        return data
    try:
        fields = registries["problem"].get(str(problem.get("use"))).Options.model_fields
    except UserError:
        fields = None  # an unknown problem: move them, validation names the problem
    for part in old:
        table = data.pop(part)
        # A sparsity the problem cannot take was an error and stays one (problem.sparsity: unknown key).
        if fields is not None and part not in fields and part != "sparsity":
            warnings.warn(
                f"[{part}] is deprecated since evogan 0.3.0 and ignored: problem {problem.get('use')} has no "
                f"{part} (the engine never used it); remove the table",
                FutureWarning,
                stacklevel=3,
            )
            continue
        deprecated.warn(f"[{part}]")
        if part in problem:
            raise RecipeError([f"{source}: {part}: a deprecated top-level table, and problem.{part} too: keep one"])
        problem[part] = table
    return data


def _sparsity_component(problem: Choice | None, registries: Registries) -> type[Component[Any]] | None:
    """The sparsity controller class the problem's options name (``[problem.sparsity]``), if any."""
    ref = getattr(problem.options, "sparsity", None) if problem is not None else None
    if not isinstance(ref, ComponentRef):
        return None
    try:
        return registries["sparsity"].get(ref.use)
    except UserError:
        return None  # validation named it


def transport_choice(recipe: Recipe, registries: Registries, *, processes: int) -> Choice:
    """The transport a run of ``processes`` processes uses, with ``[exchange.options]`` validated against
    its ``Options``: every runtime asks here, once.

    Several processes need a :class:`~evogan.api.ConnectableTransport`, one process one that is not (nothing
    would connect it): ``exchange.transport``, else the kind's default if it fits, else the only one that fits.
    ``[exchange.options]`` apply to a named transport and to the one several processes pick, not to a single
    process's default. Problems are one-line ``RecipeError``s.
    """
    connectable = processes > 1
    registry, source = registries["transport"], str(recipe.path)

    def fits(component: type[Component[Any]]) -> bool:
        return issubclass(component, ConnectableTransport) == connectable

    where = "run.workers > 1" if connectable else "one process"
    name = recipe.exchange.transport
    if name is None:
        default = registry.default()
        fitting = [entry.name for entry in registry if fits(entry.component)]
        if default is not None and fits(default):
            name = default.name
        elif len(fitting) == 1:
            name = fitting[0]
        else:
            found = f"several fit ({', '.join(fitting)}): name one" if fitting else "none is registered"
            raise RecipeError([f"{source}: exchange.transport: a transport for {where}: {found}"])
    # Options set for the transport of several processes do not apply to the in-process default.
    options = recipe.exchange.options if recipe.exchange.transport or connectable else {}
    errors: list[str] = []
    choice = resolve_choice(
        registries,
        "transport",
        {"use": name, **options},
        "exchange.transport",
        source,
        errors,
        options_path="exchange.options",
    )
    if choice is None:
        raise RecipeError(errors)
    if not fits(choice.component):
        why = "cannot connect worker processes (run.workers > 1)" if connectable else "needs run.workers > 1"
        raise RecipeError([f"{source}: exchange.transport: {name!r} {why}"])
    return choice


# ------------------------------------------------------------------------------------------ vectorize
AUTO_VECTORIZES_ON: frozenset[str] = frozenset()
"""Device types on which ``run.vectorize = "auto"`` trains a process's cells vectorised: only paths that
have run. ``cuda`` joins once ``make gpu-check`` has passed on a GPU and its verdict line is recorded in
benchmarks/RESULTS.md ("GPU check"); the CPU stays out (looped, bitwise the same for any number of cells
per process, where vectorised records agree only within float tolerance)."""


def vectorize_obstacle(sparsity: type[Any] | None, every_batches: int) -> str:
    """What keeps the engine from training cells together, known from the recipe ('' when nothing)."""
    if sparsity is not None and not getattr(sparsity, "stackable", False):
        return f"sparsity {sparsity.name} is not marked stackable (its hooks may replace tensors the stack shares)"
    if every_batches:
        return "exchange.every_batches: cells exchange inside the generation, taking turns"
    return ""


def vectorize_choice(setting: bool | str, *, device: str, cells: int, obstacle: str = "") -> tuple[bool, str]:
    """Whether a process trains its ``cells`` on ``device`` (a type: ``cpu``, ``cuda``) vectorised, and the
    log line saying so: the one rule, asked by recipe validation, the engine and its probe of the problem.
    ``obstacle`` says why it cannot be done ('' when it can); ``true`` with an obstacle is a UserError."""
    if setting is False:
        return False, "training: looped (run.vectorize = false)"
    if setting is True and obstacle:
        raise UserError(f"run.vectorize: true, but {obstacle}")
    if setting == "auto" and device not in AUTO_VECTORIZES_ON:
        where = ", ".join(sorted(AUTO_VECTORIZES_ON))
        why = f"vectorises on {where} only" if where else "is looped until make gpu-check has passed on a GPU"
        return False, f"training: looped (run.vectorize = auto {why}; true vectorises)"
    if setting == "auto" and cells < 2:
        return False, "training: looped (one cell in this process)"
    if obstacle:
        return False, f"training: looped ({obstacle})"
    return True, f"training: vectorised over the {cells} cells of this process"


def load(path: Path, registries: Registries, overrides: Iterable[str] = ()) -> Recipe:
    data = apply_overrides(read_toml(path), overrides, str(path))
    return validate(data, registries, path=path)


# ------------------------------------------------------------------------------------------ writing
def toml_value(value: Any) -> str:
    """``value`` as a TOML value (a string quoted, a dict an inline table); TypeError for anything else."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str | Path):
        return json.dumps(str(value))
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot write {value!r} as TOML")


def dumps_toml(data: Mapping[str, Any], prefix: str = "") -> str:
    """A small TOML writer for recipes (tables of scalars, lists and nested tables)."""
    scalars = {k: v for k, v in data.items() if not isinstance(v, Mapping)}
    tables = {k: v for k, v in data.items() if isinstance(v, Mapping)}
    lines = [f"{json.dumps(k) if not k.isidentifier() else k} = {toml_value(v)}" for k, v in scalars.items()]
    out = ""
    if prefix and (scalars or not tables):
        out += f"[{prefix}]\n"
    if lines:
        out += "\n".join(lines) + "\n\n"
    for key, table in tables.items():
        out += dumps_toml(table, f"{prefix}.{key}" if prefix else key)
    return out


__all__ = [
    "AUTO_VECTORIZES_ON",
    "COMPONENT_TABLES",
    "FIXED_TABLES",
    "PROBLEM_PARTS",
    "Choice",
    "ComponentRef",
    "ExchangeSection",
    "MixtureSection",
    "OptimizeSection",
    "PopulationSection",
    "Recipe",
    "RunSection",
    "apply_overrides",
    "build_nested",
    "component_field",
    "component_names_field",
    "dumps_toml",
    "load",
    "move_problem_parts",
    "read_toml",
    "toml_value",
    "transport_choice",
    "validate",
    "vectorize_choice",
    "vectorize_obstacle",
]
