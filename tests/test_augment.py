"""DiffAugment ([problem.augment]): each transform does what the paper's does, per sample, differentiably
and from the stream it is given; runs with it stay reproducible; bad uses are one-line errors."""

from __future__ import annotations

import pytest
import torch
from evogan_gan.augment import DiffAugment, NoAugment
from test_run import metrics, one_line_error, run  # pytest puts tests/ on sys.path (rootdir conftest, prepend mode)

IMAGES = (
    'problem.data={use="mnist_demo"}',
    'problem.network={use="mnist_mlp", hidden=32, latent_size=16}',
    'problem.metric={use="classifier", samples=100}',
    "problem.score_samples=64",
)


def augment(*policy: str, **options: float) -> DiffAugment:
    return DiffAugment(DiffAugment.Options(policy=policy, **options))


def batch(n: int = 16, seed: int = 0) -> torch.Tensor:
    return torch.rand(n, 1, 8, 8, generator=torch.Generator().manual_seed(seed)) * 2 - 1


def shifted(x: torch.Tensor, dy: int, dx: int) -> torch.Tensor:
    """``x`` (C, H, W) moved by (dy, dx) with zeros coming in."""
    out = torch.zeros_like(x)
    h, w = x.shape[1:]
    out[:, max(0, -dy) : h - max(0, dy), max(0, -dx) : w - max(0, dx)] = x[
        :, max(0, dy) : h - max(0, -dy), max(0, dx) : w - max(0, -dx)
    ]
    return out


def test_translation_moves_each_sample_by_at_most_an_eighth_of_its_side() -> None:
    x = batch()
    out = augment("translation")(x, stream=torch.Generator().manual_seed(1))
    moves = set()
    for before, after in zip(x, out, strict=True):
        found = [(dy, dx) for dy in range(-1, 2) for dx in range(-1, 2) if torch.equal(after, shifted(before, dy, dx))]
        assert found, "every sample is its image shifted by at most 1 pixel (8 x 0.125)"
        moves.add(found[0])
    assert len(moves) > 1  # each sample draws its own shift


def test_cutout_zeroes_one_square_of_half_the_side_per_sample() -> None:
    x = batch() + 3  # no pixel is 0 before the cutout
    out = augment("cutout")(x, stream=torch.Generator().manual_seed(2))
    for before, after in zip(x, out, strict=True):
        zero = after[0] == 0
        rows, cols = zero.any(dim=1).nonzero().flatten(), zero.any(dim=0).nonzero().flatten()
        assert 1 <= len(rows) <= 4 and 1 <= len(cols) <= 4  # a 4 x 4 square, clipped at the border
        assert int(zero.sum()) == len(rows) * len(cols)  # ...and a rectangle
        assert torch.equal(after[~zero.unsqueeze(0)], before[~zero.unsqueeze(0)])  # the rest untouched


def test_color_is_an_affine_change_of_each_sample_and_gradients_flow() -> None:
    x = batch().requires_grad_(True)
    out = augment("color")(x, stream=torch.Generator().manual_seed(3))
    for before, after in zip(x.detach(), out.detach(), strict=True):
        a, b = before.flatten() - before.mean(), after.flatten() - after.mean()
        assert torch.allclose(b, a * (b @ a / (a @ a)), atol=1e-5)  # contrast: a scaled copy about the mean
    out.sum().backward()
    assert x.grad is not None and bool(x.grad.abs().sum() > 0)


def test_the_stream_decides_and_probability_spares_some_samples() -> None:
    x, full = batch(64), augment("color", "translation", "cutout")
    first = full(x, stream=torch.Generator().manual_seed(4))
    assert torch.equal(first, full(x, stream=torch.Generator().manual_seed(4)))
    assert not torch.equal(first, full(x, stream=torch.Generator().manual_seed(5)))
    some = augment("cutout", probability=0.5)(x, stream=torch.Generator().manual_seed(6))
    untouched = sum(torch.equal(a, b) for a, b in zip(x, some, strict=True))
    assert 10 < untouched < 54
    stream = torch.Generator().manual_seed(7)
    state = stream.get_state()
    assert NoAugment(NoAugment.Options())(x, stream=stream) is x and torch.equal(stream.get_state(), state)


def test_a_run_with_diffaugment_is_reproducible_and_trains_differently(tiny_recipe) -> None:
    path = tiny_recipe(generations=2)
    plain = metrics(run(path, *IMAGES))
    on = ('problem.augment={use="diffaugment"}',)
    first, second = metrics(run(path, *IMAGES, *on)), metrics(run(path, *IMAGES, *on))
    assert first == second
    assert [r["g_loss"] for r in first] != [r["g_loss"] for r in plain]


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (('problem.augment={use="diffaugment"}',), "problem.augment: diffaugment transforms images (C, H, W)"),
        (('problem.augment={use="diffaugment", translation=0.9}',), "problem.augment.translation: "),
    ],
)
def test_bad_uses_are_one_line_errors(tiny_recipe, sets: tuple[str, ...], message: str) -> None:
    assert message in one_line_error(tiny_recipe(generations=1), *sets)
