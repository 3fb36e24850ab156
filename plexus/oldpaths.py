"""The import paths of modules that moved to the datasets and partitioner projects keep working
through 0.2.x (deprecated in 0.2.0, removed in 0.3.0): ``plexus.datasets.graph`` *is* ``plexus_datasets.graph`` (the same module
object, so a monkeypatch through either name patches both), with a `DeprecationWarning` naming
the new path.

`plexus/__init__.py` puts `OldPaths` first on `sys.meta_path` (before the path finder, which
would otherwise load a second copy of the module from the new package's folder).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from importlib.machinery import ModuleSpec
from types import ModuleType

# old module (or package prefix) -> new one; the longest matching prefix wins
MOVED: dict[str, str] = {
    "plexus.datasets": "plexus_datasets",
    "plexus.partitioners": "plexus_partition",
    "plexus.core.ops": "plexus_partition.model.ops",
    **{f"plexus.core.{name}": f"plexus_datasets.base.{name}"
       for name in ("owned", "atomic", "lockfile", "tasks", "values", "writebehind")},
    **{f"plexus.core.{name}": f"plexus_partition.model.{name}"
       for name in ("bounds", "cli", "grid", "layout", "model", "modelopts", "schedule")},
    **{f"plexus.runtime.{name}": f"plexus_partition.launch.{name}"
       for name in ("env", "hostmem", "lifeline", "group")},
}


#: the old names, longest first (the longest matching prefix wins); sorted once, not on every
#: import the finder is asked about
_PREFIXES = sorted(MOVED, key=len, reverse=True)


def new_name(old: str) -> str | None:
    """The module's name today, or None where ``old`` did not move."""
    for prefix in _PREFIXES:
        if old == prefix or old.startswith(prefix + "."):
            return MOVED[prefix] + old[len(prefix):]
    return None


class _Alias(importlib.abc.Loader):
    """Loads an old name as the new module itself (no second copy)."""

    def __init__(self, new: str) -> None:
        self.new = new
        self.spec: ModuleSpec | None = None

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        module = importlib.import_module(self.new)
        self.spec = module.__spec__  # the import system overwrites it: put it back below
        return module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = self.spec


class OldPaths(importlib.abc.MetaPathFinder):
    """Finds a moved module by its old name."""

    def find_spec(self, fullname: str, path: object = None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        new = new_name(fullname)
        if new is None:
            return None
        warnings.warn(f"{fullname} moved to {new}: import it by that name (the old one is "
                      "removed in 0.3.0)", DeprecationWarning, stacklevel=2)
        return importlib.util.spec_from_loader(fullname, _Alias(new))


def install() -> None:
    """Puts `OldPaths` first on `sys.meta_path`, once."""
    if not any(isinstance(finder, OldPaths) for finder in sys.meta_path):
        sys.meta_path.insert(0, OldPaths())
