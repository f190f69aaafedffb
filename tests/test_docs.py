from __future__ import annotations

from pathlib import Path

from evogan.docs import generate

ROOT = Path(__file__).resolve().parents[1]


def test_reference_is_up_to_date() -> None:
    committed = (ROOT / "docs" / "reference.md").read_text()
    assert committed == generate(), "docs/reference.md is stale: run `python -m evogan.docs`"


def test_readme_names_the_two_commands_and_links_the_reference() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "make demo" in readme and "make test" in readme and "docs/reference.md" in readme
    for image in ("docs/images/demo-samples.png", "docs/images/demo-metrics.png"):
        assert image in readme and (ROOT / image).exists()
