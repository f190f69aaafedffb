"""ADA's adaptive augmentation probability (``problem.augment = {use = "ada"}``): p rises while a
discriminator is confidently right on reals and falls otherwise, within [0, 1]; it belongs to each
discriminator, so it is checkpointed, copied by selection and sent with the model; records show it; and the
stacked steps augment as the looped ones do."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from evogan_gan.augment import Ada
from test_augment import IMAGES
from test_exchange import two_cells  # pytest puts tests/ on sys.path (rootdir conftest, prepend mode)
from test_run import metrics, run
from test_vectorized import LOOPED, VECTORISED, assert_close

from evogan.engine.rundir import RunDirectory
from evogan.runtime.single import prepare, run_in_process

# p moves 0.032 per D step of 32 images: visible within a tiny run's 4 batches a generation
ADA = ('problem.augment={use="ada", interval=1, ramp=1000}', *IMAGES)


def ada(**options: Any) -> Ada:
    return Ada(Ada.Options(**options))


def discriminators(run_dir: Path, cell: int, generation: int) -> list[dict[str, Any]]:
    return RunDirectory(run_dir).load_checkpoint(cell, generation)["discriminators"]


def p_values(run_dir: Path) -> list[float]:
    return [r["individual_metrics"]["d_aug_p"] for r in metrics(run_dir)]


def test_p_rises_while_d_is_confidently_right_on_reals_and_falls_otherwise() -> None:
    augment = ada(interval=4, ramp=1000, target=0.6)
    state = augment.start()
    assert float(state["aug_p"]) == 0.0
    confident, unsure = torch.full((32, 1), 5.0), torch.tensor([[1.0], [-1.0]]).repeat(16, 1)
    for step in range(1, 5):  # r_t is measured over `interval` steps, p adjusted after the last
        augment.observe(state, confident)
        assert float(state["aug_p"]) == (0.0 if step < 4 else pytest.approx(4 * 32 / 1000))
    assert int(state["aug_steps"]) == 0 and float(state["aug_signs"]) == 0  # a new measurement starts
    for _ in range(4):
        augment.observe(state, unsure)  # r_t = 0 < 0.6: p falls by as much
    assert float(state["aug_p"]) == pytest.approx(0.0)
    for _ in range(4):
        augment.observe(state, unsure)
    assert float(state["aug_p"]) == 0.0  # clamped at 0...
    fast = ada(interval=1, ramp=10)
    state = fast.start()
    fast.observe(state, confident)
    assert float(state["aug_p"]) == 1.0  # ...and at 1
    assert fast.metrics(state) == {"aug_p": 1.0} and fast.metrics(None) == {"aug_p": 0.0}


def test_p_decides_which_samples_are_augmented_and_draws_the_same_at_any_p() -> None:
    x = torch.rand(64, 1, 8, 8, generator=torch.Generator().manual_seed(0)) * 2 - 1
    augment = ada(policy=("cutout",))
    state = augment.start()
    untouched = []
    for p in (0.0, 0.5, 1.0):
        state["aug_p"].fill_(p)
        stream = torch.Generator().manual_seed(1)
        out = augment(x, stream=stream, state=state)
        untouched.append(sum(torch.equal(a, b) for a, b in zip(x, out, strict=True)))
        assert torch.equal(stream.get_state(), _after(augment, x))  # as many draws whatever p is
    assert untouched[0] == 64 and 10 < untouched[1] < 54 and untouched[2] == 0
    assert torch.equal(augment(x, stream=torch.Generator().manual_seed(1)), x)  # no state yet: p = 0


def _after(augment: Ada, x: torch.Tensor) -> torch.Tensor:
    stream = torch.Generator().manual_seed(1)
    augment(x, stream=stream)
    return stream.get_state()


def test_a_run_reports_p_and_is_reproducible(tiny_recipe) -> None:
    path = tiny_recipe(generations=2)
    first, second = run(path, *ADA), run(path, *ADA)
    assert (first / "metrics.jsonl").read_bytes() == (second / "metrics.jsonl").read_bytes()
    values = p_values(first)
    assert len(values) == 8 and all(0 <= p <= 1 for p in values) and any(p > 0 for p in values)
    (d,) = discriminators(first, 0, 2)
    assert float(d["extra"]["aug_p"]) == metrics(first)[4]["individual_metrics"]["d_aug_p"]
    plain = metrics(run(path, *IMAGES))
    assert "individual_metrics" not in plain[0]  # records without ADA are as they were


def test_resume_is_exact_with_p(tiny_recipe) -> None:
    path = tiny_recipe(seed=4, generations=3)
    # 4 D steps a generation, p adjusted every 3: the checkpoint holds a measurement under way
    straddling = ('problem.augment={use="ada", interval=3, ramp=1000}', *IMAGES)
    straight = run(path, *straddling)
    stopped = run(path, *straddling, "run.checkpoint_every=1", stop_after=1)
    assert int(discriminators(stopped, 0, 1)[0]["extra"]["aug_steps"]) == 1
    run_in_process(prepare(None, resume_dir=stopped))
    assert metrics(stopped) == metrics(straight)
    for cell in range(4):
        a, b = discriminators(straight, cell, 3)[0]["extra"], discriminators(stopped, cell, 3)[0]["extra"]
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_selection_copies_p_and_the_exchange_carries_it(tiny_recipe) -> None:
    sender, receiver = two_cells(tiny_recipe(), *ADA)
    d = sender.best("discriminator")
    assert set(d.extra) == {"aug_p", "aug_signs", "aug_images", "aug_steps"}
    d.extra["aug_p"].fill_(0.25)
    copy = d.clone(sender.problem.make_optimizer)
    assert copy.extra is not d.extra and copy.extra["aug_p"] is not d.extra["aug_p"]
    assert all(torch.equal(copy.extra[k], v) for k, v in d.extra.items())

    receiver.receive({0: sender.message()})
    assert not receiver.exchange.dropped
    received = receiver.foreign[0]["discriminator"].extra
    assert all(torch.equal(received[k], v) for k, v in d.extra.items())
    assert receiver.foreign[0]["generator"].extra == {}

    good = dict(d.extra)
    for broken in (
        {**good, "aug_p": torch.zeros(2, dtype=torch.float64)},  # wrong shape
        {**good, "aug_p": torch.zeros((), dtype=torch.float32)},  # wrong dtype
        {k: v for k, v in good.items() if k != "aug_steps"},  # one missing
        {**good, "surprise": torch.zeros(())},  # not in the problem's layout
    ):
        d.extra = broken
        receiver.exchange.dropped.clear()
        receiver.receive({0: sender.message()})
        assert receiver.exchange.dropped == {"extra": 1}
    assert float(receiver.foreign[0]["discriminator"].extra["aug_p"]) == 0.25  # the last good one stays


def test_the_generator_step_augments_fakes_with_each_defenders_state(tiny_recipe, monkeypatch) -> None:
    sender, _ = two_cells(tiny_recipe(), *ADA)
    problem = sender.problem
    g, d = sender.best("generator"), sender.best("discriminator")
    real = next(problem.training_batches(stream=torch.Generator().manual_seed(0)))
    seen: list[Any] = []
    original = Ada.__call__

    def spy(self: Ada, images: torch.Tensor, *, stream: torch.Generator, state: Any = None) -> torch.Tensor:
        seen.append(state)
        return original(self, images, stream=stream, state=state)

    monkeypatch.setattr(Ada, "__call__", spy)
    problem.generator_step(g, d.network, real, stream=torch.Generator().manual_seed(1), defenders=[d])
    pairs = [(d.network, 0.5), (d.network, 0.5)]
    problem.generator_step(g, pairs, real, stream=torch.Generator().manual_seed(1), defenders=[d, d])
    problem.generator_step(g, d.network, real, stream=torch.Generator().manual_seed(1))
    assert seen == [d.extra, d.extra, d.extra, None]  # once per defender, with its state (none given: p = 0)


@pytest.mark.parametrize(
    "options",
    [
        (),
        ("population.size=2",),  # a cell's rows share its stream: drawn in the looped order all the same
        # several weighted defenders (the neighbours' copies among them), each with its own p
        ('problem.pairing={use="g_mixture"}', "population.opponents=neighbourhood"),
    ],
    ids=["default", "pop2", "weighted"],
)
def test_stacked_training_augments_as_the_looped_training(tiny_recipe, options: tuple[str, ...]) -> None:
    path = tiny_recipe(seed=4, generations=2)
    looped = run(path, LOOPED, *ADA, *options)
    stacked = run(path, VECTORISED, *ADA, *options)
    assert "training: vectorised over the 4 cells" in (stacked / "logs" / "cell-0000.log").read_text()
    left, right = metrics(looped), metrics(stacked)
    assert len(set(p_values(looped))) > 2  # the cells' discriminators differ in p
    for a, b in zip(left, right, strict=True):
        assert_close(a, b)
    same_weights(looped, stacked, 2)


def same_weights(looped: Path, stacked: Path, generation: int) -> None:
    """The networks agree far closer than the records' tolerance (about 1e-8 here): an augmentation
    drawn with another state or from another place in the stream moves them by about 1e-3."""
    for cell in range(4):
        a, b = (RunDirectory(d).load_checkpoint(cell, generation) for d in (looped, stacked))
        for role in ("generators", "discriminators"):
            for x, y in zip(a[role], b[role], strict=True):
                for name, tensor in x["network"].items():
                    torch.testing.assert_close(tensor, y["network"][name], rtol=0, atol=1e-6)
                assert x["extra"].keys() == y["extra"].keys()
                assert all(torch.equal(x["extra"][k], y["extra"][k]) for k in x["extra"])


def test_stacked_diffaugment_matches_looped_and_is_reproducible(tiny_recipe) -> None:
    path = tiny_recipe(seed=4, generations=2)
    on = ('problem.augment={use="diffaugment", probability=0.5}', *IMAGES)
    looped, stacked, again = run(path, LOOPED, *on), run(path, VECTORISED, *on), run(path, VECTORISED, *on)
    for a, b in zip(metrics(looped), metrics(stacked), strict=True):
        assert_close(a, b)
    same_weights(looped, stacked, 2)
    assert (stacked / "metrics.jsonl").read_bytes() == (again / "metrics.jsonl").read_bytes()
