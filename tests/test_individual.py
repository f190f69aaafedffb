"""An individual's state beyond its network lives in one slot, ``Individual.extra`` (issue 38): checkpoints
keep the layout they had (so those written before load alike), and ``Individual.sparse`` / ``.average``
still work for a deprecation cycle, each read or write with one ``DeprecationWarning``."""

from __future__ import annotations

import io
import warnings
from typing import Any

import pytest
import torch
from torch import nn

from evogan.individual import AVERAGE, SPARSE, Individual, individual_tensors, layout_extra, wire_masks


def make_optimizer(role: str, network: nn.Module, lr: float) -> torch.optim.Optimizer:
    return torch.optim.Adam(network.parameters(), lr=lr)


def individual() -> Individual:
    network = nn.Linear(3, 2)
    made = Individual("generator", network, make_optimizer("generator", network, 0.1), {"lr": 0.1}, 0, "0/G")
    made.extra = {
        "p": torch.zeros(()),  # a problem's own tensor (its extra_layout)
        SPARSE: {"format": 2, "masks": {"weight": torch.ones(2, 3, dtype=torch.bool)}, "steps": 3},
        AVERAGE: {name: p.detach().clone() for name, p in network.named_parameters()},
    }
    return made


def saved(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` through torch.save and torch.load(weights_only=True), as a checkpoint."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    loaded: dict[str, Any] = torch.load(buffer, weights_only=True)
    return loaded


def test_the_checkpoint_layout_is_the_one_before_the_slot_moved() -> None:
    state = individual().state()
    kept = {"role", "uid", "origin", "hyper", "fitness", "network", "optimizer", "sparse", "average", "extra"}
    assert set(state) == kept
    assert state["sparse"]["steps"] == 3 and set(state["average"]) == {"weight", "bias"}
    assert set(state["extra"]) == {"p"}  # the problem's tensors only, as before


@pytest.mark.parametrize("era", ["0.2", "0.1"])
def test_a_checkpoint_written_before_loads_into_the_slot(era: str) -> None:
    state = saved(individual().state())
    if era == "0.1":  # before the moving average and the problem's extra
        del state["average"], state["extra"]
        state["sparse"] = {}
    network = nn.Linear(3, 2)
    loaded = Individual.from_state(state, network, make_optimizer)
    if era == "0.1":
        assert loaded.extra == {} and wire_masks(loaded) == {}
        return
    assert set(loaded.extra) == {"p", SPARSE, AVERAGE} and loaded.extra[SPARSE]["steps"] == 3
    assert torch.equal(wire_masks(loaded)["weight"], torch.ones(2, 3, dtype=torch.bool))
    assert layout_extra(loaded) == {"p": loaded.extra["p"]}
    again = loaded.state()
    assert set(again) == set(state) and again["sparse"] == state["sparse"]


def test_clone_copies_the_whole_slot_and_finite_sees_the_average() -> None:
    original = individual()
    copy = original.clone(make_optimizer)
    assert copy.extra[SPARSE] is not original.extra[SPARSE] and copy.extra[AVERAGE] is not original.extra[AVERAGE]
    assert copy.extra[SPARSE]["steps"] == 3
    tensors = {id(t) for t in individual_tensors(original)}
    assert all(id(t) in tensors for t in original.extra[AVERAGE].values())  # the average is checked...
    assert id(original.extra[SPARSE]["masks"]["weight"]) not in tensors  # ...the controller's state is not


def test_the_old_properties_work_with_one_warning_each() -> None:
    made = individual()
    with pytest.warns(DeprecationWarning, match=r"Individual\.sparse is deprecated .*extra\[\"sparse\"\]") as caught:
        assert made.sparse is made.extra[SPARSE]
    assert len(caught) == 1 and caught[0].filename == __file__  # it points at the caller
    with pytest.warns(DeprecationWarning, match=r"Individual\.average is deprecated"):
        assert made.average is made.extra[AVERAGE]
    with pytest.warns(DeprecationWarning):
        made.average = None
    assert AVERAGE not in made.extra
    with pytest.warns(DeprecationWarning):
        made.sparse = {"steps": 4}
    assert made.extra[SPARSE] == {"steps": 4}
    bare = Individual("generator", nn.Linear(1, 1), None, {}, 0, "0/G")
    with pytest.warns(DeprecationWarning):
        bare.sparse["masks"] = {}  # a plugin writing into the state it reads: the write stays
    assert bare.extra[SPARSE] == {"masks": {}}


def test_evogan_itself_never_uses_the_old_properties() -> None:
    made = individual()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        made.clone(make_optimizer).state()
        list(individual_tensors(made))


def test_a_variations_old_pairing_mutation_and_sparsity_read_the_problems_with_a_warning() -> None:
    """0.2 gave a problem's vary() the pairing, mutation and sparsity on the job; they live on the problem."""
    from types import SimpleNamespace

    from evogan.api import Variation

    problem = SimpleNamespace(pairing="the pairing", mutation="the mutation")
    job = Variation(0, 1, {}, {}, {}, {}, None, problem=problem)  # type: ignore[arg-type]
    for name, expected in (("pairing", "the pairing"), ("mutation", "the mutation"), ("sparsity", None)):
        with pytest.warns(DeprecationWarning, match=rf"Variation\.{name} is deprecated .*\[problem\.{name}\]"):
            assert getattr(job, name) == expected


def _modules() -> dict[str, nn.Module]:
    from torch.nn.utils.parametrizations import spectral_norm

    tied = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 3))
    tied[1].weight = tied[0].weight
    hooked = nn.Linear(2, 2)
    hooked.register_forward_hook(lambda module, args, out: out * 2)
    odd = nn.Linear(2, 2)
    odd.table = {"a": torch.zeros(1)}  # type: ignore[assignment]  # an attribute the fast copy does not know
    return {
        "mlp": nn.Sequential(nn.Linear(4, 8), nn.LeakyReLU(0.2), nn.Linear(8, 2), nn.Tanh()),
        "conv, batch norm, spectral norm": nn.Sequential(
            nn.ConvTranspose2d(3, 4, 4, 2, 1),
            nn.BatchNorm2d(4),
            nn.ReLU(),
            spectral_norm(nn.Conv2d(4, 2, 3, padding=1)),
        ),
        "tied": tied,
        "hooked": hooked,
        "odd": odd,
    }


@pytest.mark.parametrize("name", list(_modules()))
def test_copy_network_is_deepcopy_whichever_path_it_takes(name: str) -> None:
    import copy

    from evogan.individual import _copy_plain, _NotPlain, copy_network

    original = _modules()[name]
    original(
        torch.randn(2, 3, 4, 4)
        if "conv" in name
        else torch.randn(2, 4 if name == "mlp" else 3 if name == "tied" else 2)
    ).sum().backward()
    reference, fast = copy.deepcopy(original), copy_network(original)
    plain = name not in ("hooked", "odd")  # the others fall back to deepcopy
    try:
        _copy_plain(original, {}, [])
    except _NotPlain:
        assert not plain
    else:
        assert plain
    assert type(fast) is type(original) and set(vars(fast)) == set(vars(reference))
    assert list(fast.state_dict()) == list(reference.state_dict())
    for key, value in reference.state_dict().items():
        assert torch.equal(fast.state_dict()[key], value)
    assert [(p.requires_grad, p.grad) for p in fast.parameters()] == [
        (p.requires_grad, None) for p in reference.parameters()
    ]
    originals = {t.data_ptr() for t in [*original.parameters(), *original.buffers()]}
    assert not originals & {t.data_ptr() for t in [*fast.parameters(), *fast.buffers()]}  # nothing shared
    if name == "tied":
        assert fast[1].weight is fast[0].weight  # sharing inside the module is kept
    if name == "hooked":
        assert torch.equal(fast(torch.ones(1, 2)), original(torch.ones(1, 2)))  # the hook came along
    if name == "odd":
        assert fast.table is not original.table and torch.equal(fast.table["a"], original.table["a"])
    with torch.no_grad():
        next(fast.parameters()).add_(1.0)
    assert torch.equal(next(reference.parameters()), next(original.parameters()))


def test_a_module_left_to_deepcopy_has_no_tensor_copied_before(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fast path finds a hook before copying any tensor: the fallback is the only copy made."""
    import evogan.individual as individual

    copied: list[torch.Tensor] = []
    fast_copy = individual._copy_tensor
    monkeypatch.setattr(individual, "_copy_tensor", lambda tensor: copied.append(tensor) or fast_copy(tensor))
    hooked = _modules()["hooked"]
    individual.copy_network(hooked)
    assert copied == []
    individual.copy_network(_modules()["mlp"])
    assert len(copied) == len(list(_modules()["mlp"].parameters()))
