"""One masked sparsity controller; Static, SET, RigL and ADAPT relax/strict are configurations of it.

The engine calls ``prepare`` (initial masks), ``begin_generation`` (which discriminators this cell trains),
``after_generator_step`` (G's mask and prune-and-grow, SEMA, the balance clock, BR samples) and
``after_discriminator_step`` (D's mask, a flagged density decision), all counting FLOPs. Decisions wait for a D
step so that growth ranks on D's own gradient, not the G loss's. The clock of the cell's own D ticks on every G step
of the cell, even against a neighbour's frozen copy, so its window fills at one sample per ``br_freq`` G steps.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, cast

from evogan.adversarial.contracts import GeneratorStep, SparsityController
from evogan.api import Problem
from evogan.individual import SPARSE
from evogan.lazy import lazy
from evogan_gan.sparse.options import AdaptOptions, AdaptStrictOptions, DstOptions, StaticOptions

if TYPE_CHECKING:
    import torch
    from torch import nn

    from evogan import average as sema
    from evogan.adversarial import AdversarialProblem
    from evogan.individual import Individual
    from evogan_gan.sparse import balance, dst, flops
    from evogan_gan.sparse import masks as _masks
    from evogan_gan.sparse import state as _state
    from evogan_gan.sparse import wire as _wire
else:  # the options are read without torch (evogan validate); the controller's work imports it
    torch = lazy("torch", globals())
    balance, dst = lazy("evogan_gan.sparse.balance", globals()), lazy("evogan_gan.sparse.dst", globals())
    flops, sema = lazy("evogan_gan.sparse.flops", globals()), lazy("evogan.average", globals())
    _masks, _state = lazy("evogan_gan.sparse.masks", globals()), lazy("evogan_gan.sparse.state", globals())
    _wire = lazy("evogan_gan.sparse.wire", globals())


class MaskedController(SparsityController[StaticOptions]):
    """Masks for G and D; what changes them is set by the class variables of each registered variant."""

    Options: ClassVar[type[StaticOptions]] = StaticOptions
    stackable: ClassVar[bool] = True  # masks, regrowth and SEMA change tensors in place only
    g_growth: ClassVar[dst.Growth | None] = None  # None: the generator's mask never changes
    adapt: ClassVar[bool] = False  # BR-driven discriminator density
    strict: ClassVar[bool] = False  # at the cap, a weak D gets a DST step instead

    def __init__(self, options: StaticOptions) -> None:
        super().__init__(options)
        # id(generator) -> the discriminators its cell trains this generation (begin_generation)
        self._home: dict[int, list[Individual]] = {}

    @property
    def opts(self) -> StaticOptions:
        return self.options

    # ------------------------------------------------------------------------------------------ lifecycle
    def prepare(self, individual: Individual, *, stream: torch.Generator) -> None:
        o = self.opts
        density = o.density_g if individual.role == "generator" else o.density_d
        params = _masks.maskable_parameters(individual.network, o.keep_dense)
        counts = _masks.layer_counts({n: p.shape for n, p in params.items()}, density, o.distribution)
        masks = _masks.random_masks(params, counts, generator=stream)
        if o.init == "fan_in":
            _masks.scale_to_active_fan_in(individual.network, masks)
        _masks.apply_masks(params, masks, individual.trainer)
        seed = int(torch.randint(0, 2**62, (1,), generator=stream, device=stream.device))
        state = _state.state_of(individual)
        state.clear()
        state.update(
            format=_state.FORMAT,
            controller=self.name,
            role=individual.role,
            keep_dense=list(o.keep_dense),
            masks=masks,
            density=float(density),
            steps=0,
            mask_updates=0,
            seed=seed,
            ledger=flops.new_ledger(),
        )
        if individual.role == "discriminator":
            state["balance"] = new_balance()
        elif o.sema:
            state["sema"] = sema.start(individual.network)

    def begin_generation(
        self,
        generators: Sequence[Individual],
        discriminators: Sequence[Individual],
        incumbents: Sequence[Individual] = (),
    ) -> None:
        """Remember the discriminators this cell trains; under selection (``incumbents``: the cell's own
        discriminators, ``discriminators`` their offspring) offspring ``i`` shares incumbent ``i``'s
        balance state, so the lineage keeps it whichever of the two survives replacement."""
        for g in generators:
            self._home[id(g)] = list(discriminators)
        if not incumbents or {id(d) for d in incumbents} == {id(d) for d in discriminators}:
            return
        seen: set[int] = set()
        for incumbent in incumbents:  # a D that replaced twice may share its state: split it
            state = _state.state_of(incumbent).get("balance")
            if state is not None and id(state) in seen:
                _state.state_of(incumbent)["balance"] = state = copy.deepcopy(state)
            if state is not None:
                seen.add(id(state))
        for i, offspring in enumerate(discriminators):
            state = _state.state_of(incumbents[i % len(incumbents)]).get("balance")
            if state is not None and "balance" in _state.state_of(offspring):
                _state.state_of(offspring)["balance"] = state

    def after_generator_step(
        self, generator: Individual, discriminator: Individual, step: GeneratorStep, problem: Problem
    ) -> None:
        o = self.opts
        gs = _state.state_of(generator)
        params = _params(generator)
        _masks.apply_masks(params, _state.masks_of(generator), generator.trainer)
        gs["steps"] += 1
        g_cost = _cost(generator, step.z)
        d_cost = _cost(discriminator, step.real)
        batch = len(step.z)
        flops.charge(
            gs["ledger"],
            flops.generator_step_cost(g_cost[0], d_cost[0], batch),
            flops.generator_step_cost(g_cost[1], d_cost[1], batch),
        )
        # Without begin_generation (an engine that does not call it) the faced D is taken as the cell's.
        for home in self._home.get(id(generator)) or [discriminator]:
            hs = _state.state_of(home)
            hs["batch"], hs["g_cost"] = len(step.real), list(g_cost)
            if "balance" in hs:
                faced = home is discriminator
                self._tick(home, generator, step, problem, g_cost, d_cost if faced else None)
        new_masks = None
        growth = self._g_growth(o)
        if growth is not None and isinstance(o, DstOptions) and gs["steps"] % o.g_interval == 0:
            fraction = dst.cosine_fraction(gs["steps"], o.total_steps, o.drop_fraction, o.drop_fraction_end)
            new_masks, _ = dst.prune_and_grow(
                params,
                _state.masks_of(generator),
                fraction,
                growth=growth,
                generator=_event_rng(gs),
                optimizer=generator.trainer,
                moments=o.grown_moments,
            )
            _set_masks(generator, new_masks)
        if o.sema and "sema" in gs:
            sema.update(gs["sema"], generator.network, o.sema, new_masks)

    def _g_growth(self, o: StaticOptions) -> dst.Growth | None:
        """How G's mask changes; None when it does not (Static, or ADAPT with g_mask = "static")."""
        if isinstance(o, AdaptOptions) and o.g_mask == "static":
            return None
        return self.g_growth

    def _tick(
        self,
        discriminator: Individual,
        generator: Individual,
        step: GeneratorStep,
        problem: Problem,
        g_cost: tuple[float, float],
        d_cost: tuple[float, float] | None,
    ) -> None:
        """One G step of the cell on ``discriminator``'s balance clock; ``d_cost`` when the step faced it."""
        o = self.opts
        state = _state.state_of(discriminator)["balance"]
        if state.get("fell_back"):
            return  # fell back to static sparsity: no samples, no decisions
        size = balance.window_size(o.da_iters, o.br_freq) if o.br_freq else 0
        state["clock"] += 1
        if o.br_freq and state["clock"] % o.br_freq == 0:
            state["due"] = min(state["due"] + 1, size)
        if o.br_freq and state["due"] and d_cost is not None:
            gan = cast("AdversarialProblem[Any]", problem)
            sample = balance.measure(gan, discriminator.network, generator.network, step)
            balance.push(state["window"], sample, size)
            state["due"] -= 1
            state["samples"] += 1
            flops.charge(
                _state.state_of(discriminator)["ledger"], len(step.z) * (g_cost[0] + 2 * d_cost[0]), 0.0, key="br"
            )
            settled = not isinstance(o, AdaptOptions) or o.calibrate is None or state["clock"] > o.calibrate.settle
            if self._calibrating(state) and settled and len(state["window"]) >= size:
                state["calibration"].append(
                    balance.balance_ratio(state["window"], eps=o.br_eps, clip=o.br_clip)
                )
        if not (self.adapt and isinstance(o, AdaptOptions)):
            return
        if self._calibrating(state):
            assert o.calibrate is not None
            if state["clock"] < o.calibrate.warmup or not state["calibration"]:
                return  # warm-up (extended until one window has filled)
            state["band"] = list(
                balance.calibrated_band(state["calibration"], o.calibrate.width, o.calibrate.min_width)
            )
            state["warmup_end"] = state["clock"]
        if (
            state["clock"] % o.d_interval == 0
            and state["clock"] > max(state.get("warmup_end", 0), o.decide_after)
            and len(state["window"]) >= size
        ):
            state["pending"] = True

    def _calibrating(self, state: dict[str, Any]) -> bool:
        o = self.opts
        return isinstance(o, AdaptOptions) and self.adapt and o.calibrate is not None and state.get("band") is None

    def after_discriminator_step(self, discriminator: Individual) -> None:
        ds = _state.state_of(discriminator)
        params = _params(discriminator)
        _masks.apply_masks(params, _state.masks_of(discriminator), discriminator.trainer)
        ds["steps"] += 1
        if "cost" in ds and "g_cost" in ds:
            d_cost, g_cost, batch = ds["cost"], ds["g_cost"], ds["batch"]
            flops.charge(
                ds["ledger"],
                flops.discriminator_step_cost(d_cost[0], g_cost[0], batch),
                flops.discriminator_step_cost(d_cost[1], g_cost[1], batch),
            )
        state = ds.get("balance")
        if self.adapt and state is not None and state["pending"]:
            state["pending"] = False
            self._decide(discriminator, params)

    def end_generation(self, generators: Sequence[Individual], discriminators: Sequence[Individual]) -> None:
        """Forget this generation's pairing; every decision is taken on a step, where gradients exist."""
        for g in generators:
            self._home.pop(id(g), None)

    def check(self, individual: Individual) -> None:
        _state.validate_sparse_state(individual, controller=self.name)

    def wire_state(self, state: Mapping[str, Any]) -> dict[str, Any]:
        return _wire.sparse_meta(state)

    def check_wire_state(self, state: Any, role: str, local: Mapping[str, Any] | None) -> dict[str, Any]:
        return _wire.check_sparse_meta(state, role, local)

    def conflict(self, problem: Problem[Any]) -> str:
        if getattr(problem, "generator_candidates", 1) > 1:  # masks, ledger and RigL's gradients follow one step
            return f"problem.egan: sparsity {self.name} masks one generator per step; E-GAN trains several children"
        if self.opts.sema and getattr(problem, "generator_decay", 0):  # one moving average per generator
            return "problem.g_ema: problem.sparsity.sema already averages the generator (with its masks)"
        return ""

    def evaluation_network(self, individual: Individual) -> nn.Module:
        """The SEMA copy of a generator when ``sema`` is on (and the individual has one), else its network."""
        average = individual.extra.get(SPARSE, {}).get("sema") if self.opts.sema else None
        if individual.role != "generator" or not average:
            return individual.network
        return sema.averaged_copy(individual.network, average)

    def metrics(self, generator: Individual, discriminator: Individual) -> dict[str, float]:
        o = self.opts
        gs, ds = _state.state_of(generator), _state.state_of(discriminator)
        out = {
            "density_g": _masks.overall_density(_state.masks_of(generator)),
            "density_d": _masks.overall_density(_state.masks_of(discriminator)),
        }
        state = ds.get("balance") or {}
        if state.get("window") and not state.get("fell_back"):  # after a fallback the window is stale
            out["br"] = balance.balance_ratio(state["window"], eps=o.br_eps, clip=o.br_clip)
        if self.adapt and isinstance(o, AdaptOptions) and state:
            out.update(_decision_metrics(state))
        if self.adapt and isinstance(o, AdaptOptions):
            band = (o.br_lower, o.br_upper) if o.calibrate is None else state.get("band")
            if band:
                out["br_lower"], out["br_upper"] = float(band[0]), float(band[1])
            if o.verify != "off":
                out["density_d_floor"], out["density_d_ceiling"] = _density_bounds(o, state)
        train = gs["ledger"]["train"] + ds["ledger"]["train"]
        dense = gs["ledger"]["dense"] + ds["ledger"]["dense"]
        out.update(flops_train=train, flops_dense=dense, flops_br=gs["ledger"]["br"] + ds["ledger"]["br"])
        if dense > 0:
            out["flops_ratio"] = train / dense
        return out

    # ------------------------------------------------------------------------------------------ ADAPT
    def _decide(self, discriminator: Individual, params: dict[str, torch.nn.Parameter]) -> None:
        """The band rule of adapt.md 3.5 on a full window, with D's gradient of the step just taken."""
        o = self.opts
        assert isinstance(o, AdaptOptions)
        ds = _state.state_of(discriminator)
        state = ds["balance"]
        masks = _state.masks_of(discriminator)
        br = balance.balance_ratio(state["window"], eps=o.br_eps, clip=o.br_clip)
        state["br"] = br
        state["decisions"] += 1
        lower, upper = (o.br_lower, o.br_upper) if o.calibrate is None else state["band"]
        density = float(ds["density"])
        moved_at = int(state.get("moved_at", state["decisions"] - 1))
        if o.verify != "off" and state.get("last_move") and state["decisions"] - moved_at < o.verify_after:
            _count_decision(o, state, br, (lower, upper), "wait")  # the last move's effect is not due yet
            return
        undo = self._verify_last_move(state, br, lower, upper)
        low, high = _density_bounds(o, state)
        state["last_move"] = None
        # how every D mask update of this decision grows and restarts weights
        update: dict[str, Any] = {
            "growth": o.d_growth,
            "generator": _event_rng(ds),
            "optimizer": discriminator.trainer,
            "moments": o.grown_moments,
        }
        # The last move did not act on BR: back to the density it started from (the mask is resized by the
        # growth rule, not restored), and no new move at this decision.
        if undo is not None:
            move, density = "undo", undo
        elif br >= upper and density < high:
            state["last_move"], state["moved_at"] = [1, br, density], state["decisions"]
            move, density = "raise", min(high, round(density + o.density_step, 9))
        elif br <= lower and density > low:
            state["last_move"], state["moved_at"] = [-1, br, density], state["decisions"]
            move, density = "lower", max(low, round(density - o.density_step, 9))
        elif br >= upper and self.strict:
            move = "dst"
        else:
            move = "blocked" if br >= upper or br <= lower else "hold"
        _count_decision(o, state, br, (lower, upper), move)
        if move == "dst":
            assert isinstance(o, AdaptStrictOptions)
            # Progress in G steps on the balance clock, like total_steps: D steps run n_critic (or
            # 1 / (d_skip + 1)) times as fast, and the paper's D schedule spans the whole run.
            progress = int(state["clock"])
            fraction = dst.cosine_fraction(progress, o.total_steps, o.d_drop_fraction, o.drop_fraction_end)
            new, _ = dst.prune_and_grow(params, masks, fraction, **update)
            _set_masks(discriminator, new)
            return
        if move in ("blocked", "hold"):
            return
        ds["density"] = density
        target = round(density * _masks.total_count(masks))
        _set_masks(discriminator, dst.resize(params, masks, target, **update))

    def _verify_last_move(self, state: dict[str, Any], br: float, lower: float, upper: float) -> float | None:
        """``verify``: the density to return to when the last move did not act on BR, else None. A
        lowering acted when BR rose by at least the band's half-width (also when the step was clipped at a
        bound: a smaller move is held to the same test) (the controller's own resolution:
        smaller changes are window noise, and a BR that hovers at the band's edge whatever D's density
        would pass any weaker test); a raising, when BR fell by as much. That density becomes D's floor
        (after a lowering) or ceiling (after a raising) for the rest of the run."""
        o = self.opts
        assert isinstance(o, AdaptOptions)
        last = state.get("last_move")
        if o.verify == "off" or not last:
            return None
        direction, br_before, start = int(last[0]), float(last[1]), float(last[2])
        half = (upper - lower) / 2
        if direction < 0 and br < br_before + half:
            state["floor"] = start
            return start
        if direction > 0 and o.verify == "both" and br > br_before - half:
            state["ceiling"] = start
            return start
        return None


def _count_decision(
    o: AdaptOptions, state: dict[str, Any], br: float, band: tuple[float, float], move: str
) -> None:
    """Count a decision by what it did (``move``: "raise", "lower", "undo", "blocked", "dst", "hold" or
    "wait" for a move's check); after ``fallback_after`` decisions in a row that could not act on BR
    (undone, or blocked at a density bound), the controller falls back to static sparsity from this G
    step on."""
    if band[0] < br < band[1]:
        state["in_band"] = state.get("in_band", 0) + 1
    if move == "wait":
        return
    counter = {"raise": "raises", "lower": "lowerings", "undo": "undos", "blocked": "blocked"}.get(move)
    if counter:
        state[counter] = state.get(counter, 0) + 1
    state["unanswered"] = state.get("unanswered", 0) + 1 if move in ("undo", "blocked") else 0
    if o.fallback_after and state["unanswered"] >= o.fallback_after:
        state["fell_back"], state["fell_back_at"] = True, int(state["clock"])


def _decision_metrics(state: Mapping[str, Any]) -> dict[str, float]:
    """The decision counters as records (zero in states checkpointed before they existed)."""
    decisions = int(state.get("decisions", 0))
    out = {
        "adapt_decisions": float(decisions),
        "adapt_raises": float(state.get("raises", 0)),
        "adapt_lowerings": float(state.get("lowerings", 0)),
        "adapt_undos": float(state.get("undos", 0)),
        "adapt_blocked": float(state.get("blocked", 0)),
        "adapt_static": float(bool(state.get("fell_back"))),
    }
    if decisions:
        out["br_in_band"] = state.get("in_band", 0) / decisions
    return out


def _density_bounds(o: AdaptOptions, state: dict[str, Any]) -> tuple[float, float]:
    """D's density range: the options' bounds, narrowed by what ``verify`` learnt (absent from states
    checkpointed before ``verify`` existed)."""
    return max(o.density_min, float(state.get("floor", 0.0))), min(o.density_max, float(state.get("ceiling", 1.0)))


def new_balance() -> dict[str, Any]:
    """A discriminator lineage's balance state (see :mod:`evogan_gan.sparse.state`)."""
    return {
        "clock": 0,
        "samples": 0,
        "due": 0,
        "window": [],
        "pending": False,
        "decisions": 0,
        "calibration": [],
        "band": None,
        "last_move": None,  # verify: [direction, BR before it, density before it]
        "moved_at": 0,  # verify: the decision that made it
        "floor": 0.0,  # verify: D's density bounds learnt from moves that did not act on BR
        "ceiling": 1.0,
        # what the decisions did (records), and the fallback to static sparsity (fallback_after)
        "in_band": 0,
        "raises": 0,
        "lowerings": 0,
        "undos": 0,
        "blocked": 0,
        "unanswered": 0,
        "fell_back": False,
    }


# ---------------------------------------------------------------------------------------------- helpers
def _params(individual: Individual) -> dict[str, torch.nn.Parameter]:
    params = dict(individual.network.named_parameters())
    return {name: params[name] for name in _state.masks_of(individual)}


def _event_rng(state: dict[str, Any]) -> torch.Generator:
    """A CPU generator for one mask event, from the individual's seed and step: reproducible on resume."""
    return torch.Generator().manual_seed((int(state["seed"]) + 1_000_003 * int(state["steps"])) % 2**63)


def _cost(individual: Individual, example: torch.Tensor) -> tuple[float, float]:
    """Per-sample forward FLOPs ``(sparse, dense)``; probes the network on first use."""
    s = _state.state_of(individual)
    if "cost" not in s:
        if "flops" not in s:
            s["flops"] = flops.count_forward_flops(
                individual.network, example[:2], _state.masks_of(individual)
            ).to_state()
        _refresh_cost(s)
    return float(s["cost"][0]), float(s["cost"][1])


def _refresh_cost(s: dict[str, Any]) -> None:
    if "flops" in s:
        counted = flops.NetworkFlops.from_state(s["flops"])
        s["cost"] = [counted.forward(_masks.layer_densities(s["masks"])), counted.forward()]


def _set_masks(individual: Individual, masks: dict[str, torch.Tensor]) -> None:
    s = _state.state_of(individual)
    s["masks"] = masks
    s["mask_updates"] += 1
    _refresh_cost(s)


__all__ = ["MaskedController", "new_balance"]
