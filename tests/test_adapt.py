"""ADAPT's balance control (issue 10): the band rule on hand-computed windows, the calibrated band, the
grid bookkeeping of BR samples and decisions, SEMA, resume, and option errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from click.testing import CliRunner
from evogan_gan import sparsity as builtin
from evogan_gan.sparse import balance, controller, masks
from test_sparse import FakeIndividual, make, pair, rng, train

from evogan.adversarial.contracts import GeneratorStep
from evogan.cli import _attach_commands, cli
from evogan.engine.rundir import RunDirectory
from evogan.runtime.single import prepare, run_in_process


def newest_checkpoint(run_dir: Path, cell: int) -> dict[str, Any]:
    directory = RunDirectory(run_dir)
    return directory.load_checkpoint(cell, directory.checkpoint_generations(cell)[0])


class ScriptedProblem:
    """``discriminator_logits`` returning prescribed means: fake (after the G step) = fG, real = r."""

    def __init__(self) -> None:
        self.f_g, self.r = 0.0, 1.0

    def discriminator_logits(self, *_: Any) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.full((4,), self.f_g), torch.full((4,), self.r)


def feed(ctrl: Any, g: FakeIndividual, d: FakeIndividual, samples: list[tuple[float, float, float]]) -> None:
    """One G step (and one D step) per ``(fG, fD, r)`` sample, through the controller's real path."""
    problem = ScriptedProblem()
    for f_g, f_d, r in samples:
        problem.f_g, problem.r = f_g, r
        step = GeneratorStep(torch.zeros(4, 4), torch.zeros(4, 2), torch.full((4,), f_d), 0)
        ctrl.after_generator_step(g, d, step, problem)
        d.network.zero_grad()
        d.network(torch.randn(4, 2)).mean().backward()  # growth by gradient needs D's gradient
        ctrl.after_discriminator_step(d)


def adapt(cls: type = builtin.AdaptRelax, **options: Any) -> tuple[Any, FakeIndividual, FakeIndividual]:
    # fallback_after 0: the band-rule tests walk D to its bounds on purpose (the fallback has its own tests)
    base = dict(density_g=0.3, density_d=0.3, br_freq=1, da_iters=4, d_interval=4, g_interval=1000, fallback_after=0)
    ctrl = make(cls, **{**base, **options})
    g, d = pair()
    ctrl.prepare(g, stream=rng(0))
    ctrl.prepare(d, stream=rng(1))
    return ctrl, g, d


# ------------------------------------------------------------------------------------------ band rule
UP = [(1.2, 0.2, 2.2), (0.7, -0.3, 1.2), (0.1, 0.0, 0.2), (0.9, 0.5, 1.0)]  # 0.5, 2/3, 0.5, 0.8
DOWN = [(0.1, 0.0, 1.0), (0.5, 0.0, 1.0), (-0.2, 0.0, 2.0), (0.3, 0.1, 0.6)]  # 0.1, 0.5, -0.1, 0.4
# mean of ratios (0.5 + 1.0) / 2 = 0.75 is above the band; the ratio of means 0.6 / 1.1 = 0.545 inside it
MEAN_OF_RATIOS = [(0.5, 0.0, 1.0), (0.1, 0.0, 0.1)] * 2


@pytest.mark.parametrize(
    ("samples", "br", "density"),
    [
        (UP, (0.5 + 2 / 3 + 0.5 + 0.8) / 4, 0.35),
        (DOWN, (0.1 + 0.5 - 0.1 + 0.4) / 4, 0.25),
        (MEAN_OF_RATIOS, 0.75, 0.35),
    ],
)
def test_hand_computed_window_moves_the_density(samples: list, br: float, density: float) -> None:
    ctrl, g, d = adapt()
    total = masks.total_count(d.sparse["masks"])
    feed(ctrl, g, d, samples[:3])
    assert d.sparse["balance"]["decisions"] == 0 and d.sparse["density"] == 0.3  # window not yet due
    feed(ctrl, g, d, samples[3:])
    state = d.sparse["balance"]
    assert state["decisions"] == 1 and state["br"] == pytest.approx(br)
    assert d.sparse["density"] == pytest.approx(density)
    assert masks.active_count(d.sparse["masks"]) == round(density * total)


# ------------------------------------------------------------------------------------------ calibrated band
def test_calibrated_band_rule() -> None:
    assert balance.calibrated_band([0.1, 0.3, 0.2], 0.1, 0.0) == pytest.approx((0.18, 0.22))
    assert balance.calibrated_band([-0.2, -0.4, -0.3], 0.5, 0.0) == pytest.approx((-0.45, -0.15))
    assert balance.calibrated_band([0.0, 0.0], 0.1, 0.01) == pytest.approx((-0.01, 0.01))
    with pytest.raises(ValueError, match="empty"):
        balance.calibrated_band([], 0.1, 0.01)


def test_calibrated_band_from_a_synthetic_br_sequence() -> None:
    ctrl, g, d = adapt(da_iters=2, d_interval=2, calibrate={"warmup": 6, "width": 0.2})
    # per-sample ratios (fD = 0, r = 1): 0.1 0.3 0.2 0.6 1.0 0.2 -> window BRs at ticks 2..6
    warmup = [(v, 0.0, 1.0) for v in (0.1, 0.3, 0.2, 0.6, 1.0, 0.2)]
    feed(ctrl, g, d, warmup)
    state = d.sparse["balance"]
    assert state["calibration"] == pytest.approx([0.2, 0.25, 0.4, 0.8, 0.6])
    assert state["band"] == pytest.approx([0.4 * 0.8, 0.4 * 1.2]) and state["warmup_end"] == 6
    assert state["decisions"] == 0 and d.sparse["density"] == 0.3  # held at d_G during the warm-up
    assert ctrl.metrics(g, d)["br_lower"] == pytest.approx(0.32)
    feed(ctrl, g, d, [(0.3, 0.0, 1.0), (0.4, 0.0, 1.0)])  # tick 8: BR 0.35, inside [0.32, 0.48]
    assert state["decisions"] == 1 and d.sparse["density"] == 0.3
    feed(ctrl, g, d, [(0.6, 0.0, 1.0)] * 2)  # tick 10: 0.6, D too weak
    assert d.sparse["density"] == pytest.approx(0.35)
    feed(ctrl, g, d, [(0.2, 0.0, 1.0)] * 4)  # ticks 12 and 14: 0.2, D too strong twice
    assert state["decisions"] == 4 and d.sparse["density"] == pytest.approx(0.25)
    assert state["calibration"] == pytest.approx([0.2, 0.25, 0.4, 0.8, 0.6])  # frozen after the warm-up


def test_band_settle_leaves_the_warm_up_transient_out_of_the_calibration() -> None:
    ctrl, g, d = adapt(da_iters=2, d_interval=2, calibrate={"warmup": 6, "settle": 3, "width": 0.2})
    warmup = [(v, 0.0, 1.0) for v in (0.1, 0.3, 0.2, 0.6, 1.0, 0.2)]  # window BRs 0.2 0.25 0.4 0.8 0.6
    feed(ctrl, g, d, warmup)
    state = d.sparse["balance"]
    assert state["calibration"] == pytest.approx([0.4, 0.8, 0.6])  # ticks 4..6 only
    assert state["band"] == pytest.approx([0.6 * 0.8, 0.6 * 1.2])


def test_fixed_band_decides_from_the_first_full_window() -> None:
    ctrl, g, d = adapt(da_iters=2, d_interval=2)
    feed(ctrl, g, d, [(0.1, 0.0, 1.0)] * 2)
    assert d.sparse["balance"]["decisions"] == 1 and d.sparse["balance"]["band"] is None
    assert d.sparse["density"] == pytest.approx(0.25)


def test_decide_after_holds_the_density_through_the_early_transient() -> None:
    ctrl, g, d = adapt(da_iters=2, d_interval=2, decide_after=4)
    feed(ctrl, g, d, [(0.1, 0.0, 1.0)] * 4)  # BR far below the band, but the first decision waits past tick 4
    assert d.sparse["balance"]["decisions"] == 0 and d.sparse["density"] == 0.3
    feed(ctrl, g, d, [(0.1, 0.0, 1.0)] * 2)  # tick 6: the first decision
    assert d.sparse["balance"]["decisions"] == 1 and d.sparse["density"] == pytest.approx(0.25)


# ------------------------------------------------------------------------------------------ verify
def windows(*brs: float) -> list[tuple[float, float, float]]:
    """Two samples per decision (da_iters = d_interval = 2), each with ratio ``br`` (fD = 0, r = 1)."""
    return [(br, 0.0, 1.0) for br in brs for _ in range(2)]


def test_verify_shrink_undoes_a_lowering_that_did_not_raise_br_and_keeps_its_floor() -> None:
    ctrl, g, d = adapt(da_iters=2, d_interval=2, verify="shrink")
    state = d.sparse["balance"]
    feed(ctrl, g, d, windows(0.1))  # D too strong: lower 0.30 -> 0.25
    assert d.sparse["density"] == pytest.approx(0.25) and state["last_move"] == pytest.approx([-1, 0.1, 0.3])
    feed(ctrl, g, d, windows(0.2))  # BR rose: the lowering acted; still too strong, lower again
    assert d.sparse["density"] == pytest.approx(0.20)
    feed(ctrl, g, d, windows(0.15))  # BR fell after the lowering: undone, 0.25 is the floor
    assert d.sparse["density"] == pytest.approx(0.25) and state["floor"] == pytest.approx(0.25)
    assert masks.active_count(d.sparse["masks"]) == round(0.25 * masks.total_count(d.sparse["masks"]))
    feed(ctrl, g, d, windows(0.1, 0.05))  # too strong twice more: the floor holds
    assert d.sparse["density"] == pytest.approx(0.25) and state["decisions"] == 5
    assert ctrl.metrics(g, d)["density_d_floor"] == pytest.approx(0.25)
    feed(ctrl, g, d, windows(0.9, 0.9))  # too weak: raising is not checked under "shrink"
    assert d.sparse["density"] == pytest.approx(0.35)


def test_verify_after_holds_the_density_and_checks_the_move_later() -> None:
    ctrl, g, d = adapt(da_iters=2, d_interval=2, verify="shrink", verify_after=3)
    state = d.sparse["balance"]
    feed(ctrl, g, d, windows(0.1, 0.1, 0.1))  # lower 0.30 -> 0.25, then two decisions wait for BR to answer
    assert d.sparse["density"] == pytest.approx(0.25) and state["decisions"] == 3 and state["unanswered"] == 0
    feed(ctrl, g, d, windows(0.2))  # three decisions on, BR rose by the half-width: kept, and lowered again
    assert d.sparse["density"] == pytest.approx(0.20) and state["lowerings"] == 2
    feed(ctrl, g, d, windows(0.2, 0.2, 0.15))  # waited twice; then BR fell: undone, 0.25 is the floor
    assert d.sparse["density"] == pytest.approx(0.25) and state["floor"] == pytest.approx(0.25)
    assert state["undos"] == 1 and state["in_band"] == 0


@pytest.mark.parametrize(
    ("after", "kept"),
    [(0.14, False), (0.151, True), (0.5, True)],  # band [0.45, 0.55]: half-width 0.05
)
def test_verify_treats_a_rise_below_the_half_width_as_noise(after: float, kept: bool) -> None:
    ctrl, g, d = adapt(da_iters=2, d_interval=2, verify="shrink")
    feed(ctrl, g, d, windows(0.1, after))  # lower at BR 0.1, then check
    assert d.sparse["density"] == pytest.approx(0.20 if kept and after < 0.45 else 0.25 if kept else 0.30)
    assert d.sparse["balance"]["floor"] == (0.0 if kept else pytest.approx(0.3))


def test_verify_undoes_a_lowering_that_only_reached_the_band_edge() -> None:
    ctrl, g, d = adapt(da_iters=2, d_interval=2, verify="shrink")
    feed(ctrl, g, d, windows(0.44, 0.46))  # inside the band now, but BR moved by less than the half-width
    assert d.sparse["density"] == pytest.approx(0.30) and d.sparse["balance"]["floor"] == pytest.approx(0.3)


def test_verify_both_undoes_a_raising_that_did_not_lower_br() -> None:
    ctrl, g, d = adapt(da_iters=2, d_interval=2, verify="both")
    feed(ctrl, g, d, windows(0.9))  # too weak: 0.30 -> 0.35
    feed(ctrl, g, d, windows(0.95))  # BR did not fall: undone, ceiling 0.30
    assert d.sparse["density"] == pytest.approx(0.30) and d.sparse["balance"]["ceiling"] == pytest.approx(0.3)
    feed(ctrl, g, d, windows(0.9))
    assert d.sparse["density"] == pytest.approx(0.30)
    feed(ctrl, g, d, windows(0.1, 0.2))  # lowerings are still allowed (and checked)
    assert d.sparse["density"] == pytest.approx(0.20)


def test_without_verify_a_falling_br_walks_d_to_the_floor() -> None:
    ctrl, g, d = adapt(da_iters=2, d_interval=2)
    feed(ctrl, g, d, windows(0.3, 0.2, 0.1, 0.05, 0.02, 0.01))
    assert d.sparse["density"] == pytest.approx(0.05)


# ------------------------------------------------------------------------------------------ records, fallback
def test_every_decision_is_counted_in_the_records() -> None:
    ctrl, g, d = adapt(da_iters=2, d_interval=2, verify="shrink")
    # 0.30 -> 0.35 (raise), hold (in band), 0.30 and 0.25 (lowerings; BR rose after the first), undone back to
    # 0.30 (BR fell), then blocked at that floor
    feed(ctrl, g, d, windows(0.9, 0.5, 0.1, 0.2, 0.1, 0.1))
    m = ctrl.metrics(g, d)
    assert (m["adapt_decisions"], m["adapt_raises"], m["adapt_lowerings"]) == (6, 1, 2)
    assert (m["adapt_undos"], m["adapt_blocked"], m["adapt_static"]) == (1, 1, 0)
    assert m["br_in_band"] == pytest.approx(1 / 6) and "br" in m
    assert d.sparse["density"] == pytest.approx(0.30)


def test_br_that_does_not_answer_the_density_falls_back_to_static() -> None:
    ctrl, g, d = adapt(da_iters=2, d_interval=2, verify="shrink", fallback_after=3)
    state = d.sparse["balance"]
    feed(ctrl, g, d, windows(0.1, 0.1))  # lower 0.30 -> 0.25; BR did not rise: undone (1), floor 0.30
    feed(ctrl, g, d, windows(0.1))  # too strong at the floor: blocked (2)
    assert not state["fell_back"] and state["unanswered"] == 2
    feed(ctrl, g, d, windows(0.1))  # blocked (3): falls back
    assert state["fell_back"] and state["fell_back_at"] == state["clock"] == 8
    samples, mask = state["samples"], d.sparse["masks"]
    feed(ctrl, g, d, windows(0.9, 0.9, 0.9))  # D too weak now, but the controller no longer acts
    assert state["decisions"] == 4 and state["samples"] == samples and state["clock"] == 8
    assert d.sparse["density"] == pytest.approx(0.30) and d.sparse["masks"] is mask
    m = ctrl.metrics(g, d)
    assert m["adapt_static"] == 1 and "br" not in m  # the window stopped filling: no stale BR in the records


def test_a_move_that_acts_resets_the_count_toward_the_fallback() -> None:
    ctrl, g, d = adapt(da_iters=2, d_interval=2, verify="shrink", fallback_after=2, density_min=0.25)
    state = d.sparse["balance"]
    feed(ctrl, g, d, windows(0.1, 0.2))  # lower to 0.25, BR rose: acted; at 0.25 = density_min: blocked (1)
    assert state["unanswered"] == 1 and d.sparse["density"] == pytest.approx(0.25)
    feed(ctrl, g, d, windows(0.5))  # in band: the count starts again
    assert state["unanswered"] == 0 and not state["fell_back"]
    feed(ctrl, g, d, windows(0.1, 0.1))  # blocked twice at density_min: falls back
    assert state["fell_back"] and state["blocked"] == 3


# ------------------------------------------------------------------------------------------ grid bookkeeping
def test_g_steps_against_a_foreign_copy_credit_the_cell_own_discriminator() -> None:
    ctrl, g, own = adapt(br_freq=2, da_iters=8, d_interval=8)
    _, _, foreign = adapt()
    before = json.dumps(foreign.sparse["balance"])
    ctrl.begin_generation([g], [own])
    problem = ScriptedProblem()
    step = GeneratorStep(torch.zeros(4, 4), torch.zeros(4, 2), torch.zeros(4), 0)
    faced = [foreign, foreign, foreign, own, own, foreign, foreign, own, foreign, foreign]
    # samples fall due at ticks 2, 4, 6, 8, 10 and are taken on steps facing `own`: ticks 4, 5, 8
    for opponent in faced:
        ctrl.after_generator_step(g, opponent, step, problem)
    ctrl.end_generation([g], [own])
    state = own.sparse["balance"]
    assert state["clock"] == 10 and state["samples"] == 3 and state["due"] == 2
    assert len(state["window"]) == 3 and json.dumps(foreign.sparse["balance"]) == before


def test_offspring_share_the_lineage_state_with_the_incumbent() -> None:
    ctrl, g, incumbent = adapt()
    offspring = FakeIndividual("discriminator", incumbent.network, incumbent.optimizer)
    offspring.sparse = {**incumbent.sparse, "balance": controller.new_balance()}  # e.g. a foreign parent's
    ctrl.begin_generation([g], [offspring], [incumbent])
    assert offspring.sparse["balance"] is incumbent.sparse["balance"]


def records(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


ADAPT = (
    '{use="adapt-relax", density_g=0.5, density_d=0.5, br_freq=4, da_iters=16, d_interval=4, g_interval=100}'
)


@pytest.mark.parametrize("selection", [False, True])
def test_2x2_grid_local_windows_fill_and_decide_on_schedule(
    tiny_recipe, monkeypatch: pytest.MonkeyPatch, selection: bool
) -> None:
    """Reference pairing on a 2x2 torus (each G step faces the own D or one of two neighbours' copies):
    the cell's own D ticks once per G step of its cell, its samples come at one per br_freq ticks, only
    from steps that faced it, and decisions fall on the d_interval multiples once the window is full."""
    ticks: list[tuple[int, bool, int, int]] = []  # (cell, faced, clock, samples taken so far)
    decided: list[tuple[int, int]] = []
    tick, decide = controller.MaskedController._tick, controller.MaskedController._decide

    def spy_tick(self: Any, d: Any, g: Any, step: Any, problem: Any, g_cost: Any, d_cost: Any) -> None:
        tick(self, d, g, step, problem, g_cost, d_cost)
        assert d.origin == g.origin  # only the cell's own (or offspring) discriminators tick
        state = d.extra["sparse"]["balance"]
        ticks.append((g.origin, d_cost is not None, state["clock"], state["samples"]))

    def spy_decide(self: Any, d: Any, params: Any) -> None:
        decided.append((d.origin, d.extra["sparse"]["balance"]["clock"]))
        decide(self, d, params)

    monkeypatch.setattr(controller.MaskedController, "_tick", spy_tick)
    monkeypatch.setattr(controller.MaskedController, "_decide", spy_decide)
    generations = 8
    prepared = prepare(
        tiny_recipe(seed=2, generations=generations),
        overrides=[f"problem.sparsity={ADAPT}", f"population.selection={str(selection).lower()}"],
    )
    run_in_process(prepared)
    steps = generations * 4  # 4 G steps per generation
    for cell in range(4):
        clocks = [c for origin, _, c, _ in ticks if origin == cell]
        assert clocks == list(range(1, steps + 1))  # one tick per G step, lineage kept across generations
        faced = sum(f for origin, f, _, _ in ticks if origin == cell)
        # without selection the reference pairing also draws neighbours' copies; with it (population 1)
        # every G step faces the cell's one offspring D
        assert faced == steps if selection else 0 < faced < steps
        state = newest_checkpoint(prepared.run_dir.path, cell)["discriminators"][0]["sparse"]["balance"]
        assert state["clock"] == steps and state["samples"] + state["due"] == steps // 4  # none lost
        assert state["samples"] <= faced
        # decisions: exactly at the multiples of d_interval (4) where the window (4 samples) was full
        taken = {c: n for origin, _, c, n in ticks if origin == cell}
        expected = [c for c in range(4, steps + 1, 4) if taken[c] >= 4]
        assert [c for origin, c in decided if origin == cell] == expected and expected
    if selection:  # rejected offspring: the lineage's clock still ran (asserted above)
        assert any(not r["replaced"]["discriminator"] for r in records(prepared.run_dir.path))


# ------------------------------------------------------------------------------------------ SEMA
def test_sema_is_masked_on_a_g_mask_change() -> None:
    ctrl = make(builtin.RigL, density_g=0.3, density_d=0.3, g_interval=3, total_steps=12, sema=0.9)
    g, d = pair()
    ctrl.prepare(g, stream=rng(0))
    ctrl.prepare(d, stream=rng(1))
    expected = {n: p.detach().clone() for n, p in g.network.named_parameters()}
    original = ctrl.after_generator_step

    def check(gen: Any, disc: Any, step: Any, problem: Any) -> None:
        updates = gen.sparse["mask_updates"]
        original(gen, disc, step, problem)
        changed = gen.sparse["mask_updates"] != updates
        for name, p in gen.network.named_parameters():
            if changed and name in gen.sparse["masks"]:
                expected[name] *= gen.sparse["masks"][name]
            expected[name] = 0.9 * expected[name] + 0.1 * p.detach()

    ctrl.after_generator_step = check  # type: ignore[method-assign]
    train(ctrl, g, d, steps=7)
    assert g.sparse["mask_updates"] == 2
    average = g.sparse["sema"]
    for name, mask in g.sparse["masks"].items():
        assert not average[name][~mask].any()  # pruned positions of the average are zero
    for name, value in expected.items():
        torch.testing.assert_close(average[name], value)
    evaluated = ctrl.evaluation_network(g)
    assert evaluated is not g.network
    for name, p in evaluated.named_parameters():
        assert torch.equal(p, average[name]) and not p.requires_grad
    assert ctrl.evaluation_network(d) is d.network
    plain = make(builtin.RigL)
    g2, _ = pair()
    plain.prepare(g2, stream=rng(0))
    assert "sema" not in g2.sparse and plain.evaluation_network(g2) is g2.network


# ------------------------------------------------------------------------------------------ resume
AUTO = (
    '{use="adapt-relax", density_g=0.5, density_d=0.5, br_freq=1, da_iters=2, d_interval=2, g_interval=3, '
    'total_steps=24, calibrate={warmup=6}, sema=0.5, verify="both"}'
)


def test_resume_restores_the_calibration_state_exactly(tiny_recipe) -> None:
    path = tiny_recipe(seed=4, generations=4, rows=1, cols=2)
    straight = prepare(path, overrides=[f"problem.sparsity={AUTO}", "run.checkpoint_every=1"])
    run_in_process(straight)
    first = prepare(path, overrides=[f"problem.sparsity={AUTO}", "run.checkpoint_every=1", "run.generations=1"])
    run_in_process(first)  # stops after generation 1: warm-up half done (4 of 6 ticks)
    state = newest_checkpoint(first.run_dir.path, 0)
    balance_state = state["discriminators"][0]["sparse"]["balance"]
    assert balance_state["clock"] == 4 and balance_state["band"] is None and balance_state["calibration"]
    run_in_process(prepare(None, resume_dir=first.run_dir.path, overrides=["run.generations=4"]))
    assert records(first.run_dir.path) == records(straight.run_dir.path)
    for cell in range(2):
        a, b = (newest_checkpoint(p.run_dir.path, cell) for p in (first, straight))
        assert a["discriminators"][0]["sparse"]["balance"] == b["discriminators"][0]["sparse"]["balance"]
        assert a["discriminators"][0]["sparse"]["balance"]["band"] is not None
        assert a["discriminators"][0]["sparse"]["balance"]["decisions"] > 0  # verify's state compared too
        sema_a, sema_b = (x["generators"][0]["sparse"]["sema"] for x in (a, b))
        assert all(torch.equal(sema_a[n], sema_b[n]) for n in sema_a)
    assert "br_lower" in records(first.run_dir.path)[-1]["sparsity"]


# ------------------------------------------------------------------------------------------ option errors
@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('{use="adapt-relax", calibrate="median"}', "problem.sparsity.calibrate: "),
        ('{use="adapt-relax", calibrate={}, density_d=0.5}', "density_d (0.5) must equal density_g"),
        ('{use="adapt-relax", calibrate={warmup=100}}', "calibrate.warmup (100) must be at least da_iters"),
        ('{use="adapt-strict", calibrate={width=0}}', "problem.sparsity.calibrate.width: "),
        ('{use="adapt-relax", calibrate={settle=2000}}', "settle (2000) must be below warmup (2000)"),
        ('{use="adapt-relax", calibrate={min_width=-1}}', "problem.sparsity.calibrate.min_width: "),
        ('{use="adapt-relax", calibrate={warm_up=10}}', "problem.sparsity.calibrate.warm_up: "),
        ('{use="adapt-relax", g_mask="frozen"}', "problem.sparsity.g_mask: "),
        ('{use="adapt-relax", verify="always"}', "problem.sparsity.verify: "),
        ('{use="adapt-relax", verify_after=0}', "problem.sparsity.verify_after: "),
        ('{use="adapt-relax", fallback_after=-1}', "problem.sparsity.fallback_after: "),
        ('{use="adapt-relax", decide_after=-1}', "problem.sparsity.decide_after: "),
        ('{use="adapt-relax", decide_after="soon"}', "problem.sparsity.decide_after: "),
        ('{use="rigl", sema=1.0}', "problem.sparsity.sema: "),
        ('{use="static", sema=-0.1}', "problem.sparsity.sema: "),
    ],
)
def test_bad_band_and_sema_options_are_one_line_recipe_errors(tiny_recipe, table: str, message: str) -> None:
    _attach_commands()
    path = tiny_recipe()
    result = CliRunner().invoke(cli, ["validate", str(path), "--set", f"problem.sparsity={table}"])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and f"{path}: problem.sparsity" in lines[0] and message in lines[0], result.output


# ------------------------------------------------------------------------------------------ 0.2's band keys
def test_the_flat_band_keys_of_0_2_still_work_with_a_warning_each(tiny_recipe) -> None:
    old = {"band": "auto", "band_warmup": 6, "band_settle": 3, "band_width": 0.2, "band_min_width": 0.02}
    with pytest.warns(FutureWarning) as caught:
        options = builtin.AdaptRelax.Options(br_freq=1, da_iters=2, **old)
    assert sorted(str(w.message).split(" is deprecated")[0] for w in caught) == sorted(f"sparsity.{k}" for k in old)
    assert "use sparsity.calibrate.warmup" in " ".join(str(w.message) for w in caught)
    assert options.calibrate == builtin.AdaptRelax.Options(
        br_freq=1, da_iters=2, calibrate={"warmup": 6, "settle": 3, "width": 0.2, "min_width": 0.02}
    ).calibrate
    with pytest.warns(FutureWarning):
        assert builtin.AdaptRelax.Options(band="fixed").calibrate is None

    _attach_commands()  # the CLI: one warning line per key, then the run's own output
    path = tiny_recipe()
    table = '{use="adapt-relax", density_g=0.5, density_d=0.5, band="auto", band_warmup=1000}'
    result = CliRunner().invoke(cli, ["validate", str(path), "--set", f"problem.sparsity={table}"])
    assert result.exit_code == 0, result.output
    warned = [line for line in result.output.splitlines() if line.startswith("warning:")]
    assert len(warned) == 2 and "sparsity.band_warmup is deprecated since evogan 0.3.0" in " ".join(warned)
