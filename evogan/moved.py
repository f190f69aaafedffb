"""Modules that moved out of the ``evogan`` distribution keep importing under their old names for a
deprecation cycle: ``import evogan.sparse.masks`` warns once and answers with ``evogan_gan.sparse.masks``,
the same module object (so classes, isinstance checks and pickles agree). :func:`install` puts the finder
first on ``sys.meta_path``; ``import evogan`` calls it.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from collections.abc import Sequence
from types import CodeType, FrameType, ModuleType

from evogan.deprecated import MOVED_MODULES, moved_name, warn

# the distribution each moved module now lives in, named in the error when it is not installed
_DISTRIBUTION = {"evogan_gan": "evogan-gan (pip install -e plugins/evogan-gan; `make install` does it)"}


def _importer_level() -> int:
    """``warn``'s stacklevel that points at the line importing the old name, past this module's frames
    (``warnings`` itself skips importlib's frozen ones)."""
    frame: FrameType | None = sys._getframe(1)
    level = 2
    while frame is not None and frame.f_code.co_filename == __file__:
        frame, level = frame.f_back, level + 1
    return level


class _Alias(importlib.abc.Loader):
    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        if spec.name in MOVED_MODULES:  # one warning per moved package, not per submodule
            warn(spec.name, stacklevel=_importer_level())
        try:
            module = importlib.import_module(self.target)
        except ModuleNotFoundError:
            self._not_installed(spec.name)
            raise
        self._spec = module.__spec__  # the import system overwrites it with the alias's: restored below
        return module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = self._spec

    def get_code(self, fullname: str) -> CodeType | None:
        """The moved module's code, for ``python -m <old name>`` (runpy asks for it, not for the module)."""
        message = f"python -m {fullname} is deprecated: use python -m {self.target}"
        warnings.warn(message, FutureWarning, stacklevel=2)  # a command line: shown, unlike DeprecationWarning
        try:
            spec = importlib.util.find_spec(self.target)
        except ModuleNotFoundError:
            self._not_installed(fullname)
            raise
        loader = spec.loader if spec is not None else None
        return loader.get_code(self.target) if isinstance(loader, importlib.abc.InspectLoader) else None

    def _not_installed(self, name: str) -> None:
        """Raise the error that names the distribution to install, if that is what is missing."""
        top = self.target.partition(".")[0]
        if importlib.util.find_spec(top) is None:
            where = _DISTRIBUTION.get(top, top)
            message = f"{name} moved to {self.target}, in the distribution {where}"
            raise ModuleNotFoundError(message, name=name) from None


class _MovedFinder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        new = moved_name(fullname)
        return None if new is None else importlib.machinery.ModuleSpec(fullname, _Alias(new))


def install() -> None:
    """Put the moved modules' finder first on ``sys.meta_path`` (once per process)."""
    if not any(isinstance(finder, _MovedFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _MovedFinder())
