"""evogan export: a mixture as a torch.export file that samples it in a process that cannot import evogan."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

import evogan
from evogan.cli import _attach_commands, cli
from evogan.errors import UserError
from evogan.plugins import distribution_modules
from evogan.testing import run_tiny, write_tiny_recipe

_attach_commands()

# Runs in a fresh interpreter: a meta path finder refuses evogan (it is installed in this environment),
# the test checks that it does, then loads and samples the exported file with torch alone.
GAN_PLUGINS = distribution_modules("evogan-gan")  # the GAN problem's plugins, for autoload off

WITHOUT_EVOGAN = r"""
import json, sys

class NoEvogan:
    def find_spec(self, name, path=None, target=None):
        if name == "evogan" or name.startswith("evogan."):
            raise ImportError(f"{name} is blocked in this process")
        return None

sys.meta_path.insert(0, NoEvogan())
try:
    import evogan
except ImportError:
    pass
else:
    raise SystemExit("evogan was importable")

import torch

exported, inputs, outputs = sys.argv[1:4]
extra = {"evogan.json": ""}
sampler = torch.export.load(exported, extra_files=extra).module()
info = json.loads(extra["evogan.json"])
z, u = torch.load(inputs)
result = {"given": sampler(z, u)}
for n in (1, 300):  # any batch size; inputs drawn as evogan.json says
    shape = info["inputs"][0]["shape"]
    result[f"drawn{n}"] = sampler(torch.randn(n, *shape), torch.rand(n))
torch.save(result, outputs)
print(json.dumps({"cell": info["cell"], "weights": info["weights"], "modules": sorted(
    m for m in sys.modules if m == "evogan" or m.startswith("evogan."))}))
"""


def sample_without_evogan(exported: Path, z: torch.Tensor, u: torch.Tensor, tmp: Path) -> tuple[dict, dict]:
    torch.save((z, u), tmp / "inputs.pt")
    done = subprocess.run(
        [sys.executable, "-I", "-c", WITHOUT_EVOGAN, str(exported), str(tmp / "inputs.pt"), str(tmp / "out.pt")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), torch.load(tmp / "out.pt", weights_only=True)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run_tiny(write_tiny_recipe(tmp_path_factory.mktemp("export"), generations=2))


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.mark.parametrize("cell", [None, 2])
def test_exported_mixture_samples_as_evogan_does_without_evogan(run_dir: Path, tmp_path: Path, cell) -> None:
    out = tmp_path / "nested" / "mixture.pt2"
    result = invoke("export", str(run_dir), "-o", str(out), *(["--cell", str(cell)] if cell is not None else []))
    assert result.exit_code == 0, result.output
    run = evogan.load(run_dir)
    mixture = run.mixture(cell)
    assert f"wrote cell {mixture.cell}'s mixture" in result.output
    assert [p.name for p in out.parent.iterdir()] == ["mixture.pt2"]  # no temporary file left
    z, u = mixture.sampler_inputs(400, seed=5)
    info, samples = sample_without_evogan(out, z, u, tmp_path)
    assert info == {"cell": mixture.cell, "weights": mixture.weights, "modules": []}
    torch.testing.assert_close(samples["given"], run.sample(400, cell, seed=5), rtol=1e-5, atol=1e-6)
    assert samples["drawn1"].shape == (1, 2) and samples["drawn300"].shape == (300, 2)
    assert torch.isfinite(samples["drawn300"]).all()


def test_sparse_mixture_exports(tmp_path: Path) -> None:
    run_dir = run_tiny(write_tiny_recipe(tmp_path, generations=1, overrides=['problem.sparsity.use="adapt-relax"']))
    run = evogan.load(run_dir)
    exported = torch.export.load(run.export(tmp_path / "sparse.pt2", cell=1)).module()
    z, u = run.mixture(1).sampler_inputs(100, seed=2)
    torch.testing.assert_close(exported(z, u), run.sample(100, 1, seed=2), rtol=1e-5, atol=1e-6)


def test_export_replaces_a_file_whole(run_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "m.pt2"
    out.write_bytes(b"old")
    evogan.load(run_dir).export(out, cell=0)
    assert torch.export.load(out).module() is not None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.pt2"]


def test_errors_are_one_line(run_dir: Path, tmp_path: Path) -> None:
    result = invoke("export", str(run_dir), "-o", str(tmp_path / "m.pt2"), "--cell", "4")
    assert result.exit_code == 2 and "error: cell 4: the run has cells 0..3" in result.output
    assert not (tmp_path / "m.pt2").exists()
    result = invoke("export", str(tmp_path / "nope"), "-o", str(tmp_path / "m.pt2"))
    assert result.exit_code == 2 and "no such run directory" in result.output
    result = invoke("export", str(tmp_path), "-o", str(tmp_path / "m.pt2"))
    assert result.exit_code == 2 and "not a run directory" in result.output
    result = invoke("export", str(run_dir), "-o", str(tmp_path))
    assert result.exit_code == 2 and "is a directory; give the file to write" in result.output
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = invoke("export", str(run_dir), "-o", str(blocker / "m.pt2"))
    assert result.exit_code == 2 and f"{blocker / 'm.pt2'}: cannot write" in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1
    with pytest.raises(UserError, match="cannot write"):
        evogan.load(run_dir).export(blocker / "m.pt2")


@pytest.mark.parametrize(
    ("networks", "options", "shape"),
    [("conv32", {"ngf": 8, "ndf": 8}, (3, 32, 32)), ("sngan32", {"ngf": 8, "ndf": 8}, (3, 32, 32))],
)
def test_image_generators_export(networks: str, options: dict, shape: tuple[int, ...]) -> None:
    """Batch norm (conv32) and spectral-norm parametrizations (sngan32) go through torch.export; each row
    is the generator ``u`` picks, applied to its ``z``."""
    from evogan_gan.sampler import MixtureSampler, uniform_for

    from evogan.plugins import make_plugin_manager
    from evogan.registry import Registries

    pm = make_plugin_manager(autoload=False, modules=GAN_PLUGINS)
    component = Registries.from_plugin_manager(pm)["network"].get(networks)
    pair = component(component.Options(**options))
    generators = [pair.build("generator", shape, generator=torch.Generator().manual_seed(i)) for i in range(2)]
    sampler = MixtureSampler(generators, [0.25, 0.75])
    batch = torch.export.Dim("samples", min=1)
    z, u = torch.randn(2, *pair.latent_shape()), torch.rand(2)
    with torch.no_grad():
        program = torch.export.export(sampler, (z, u), dynamic_shapes=({0: batch}, {0: batch})).module()
        choice = torch.tensor([0, 1, 1, 0, 1])
        z = torch.randn(5, *pair.latent_shape(), generator=torch.Generator().manual_seed(9))
        out = program(z, uniform_for(choice, [0.25, 0.75]))
        for network in generators:
            network.eval()
        expected = torch.stack([generators[int(k)](z[i : i + 1])[0] for i, k in enumerate(choice)])
    assert out.shape == (5, *shape)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-5)
