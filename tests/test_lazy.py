"""evogan.lazy: a stand-in that imports its module at the first attribute read, then gets out of the way."""

from __future__ import annotations

import sys
import types

import pytest

from evogan.lazy import LazyModule, lazy


def test_the_first_read_imports_and_replaces_the_stand_in(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "colorsys", raising=False)
    namespace: dict[str, object] = {}
    namespace["colours"] = lazy("colorsys", namespace)
    assert isinstance(namespace["colours"], LazyModule) and "colorsys" not in sys.modules
    assert namespace["colours"].rgb_to_hsv(1.0, 0.0, 0.0) == (0.0, 1.0, 1.0)  # type: ignore[attr-defined]
    assert isinstance(namespace["colours"], types.ModuleType) and namespace["colours"] is sys.modules["colorsys"]


def test_errors_pass_through() -> None:
    namespace: dict[str, object] = {}
    namespace["missing"] = lazy("evogan_no_such_module", namespace)
    with pytest.raises(ModuleNotFoundError):
        _ = namespace["missing"].anything  # type: ignore[attr-defined]
    namespace["json"] = lazy("json", namespace)
    with pytest.raises(AttributeError):
        _ = namespace["json"].no_such_function  # type: ignore[attr-defined]
    assert "lazy module 'evogan_no_such_module'" in repr(namespace["missing"])
