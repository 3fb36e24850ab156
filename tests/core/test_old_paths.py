"""The import paths of what moved to the datasets and partitioner projects (issue 47) keep
working through 0.2.x (removed in 0.3.0): the old name is the new module itself (one object, so a monkeypatch
through either name is seen through both), a `DeprecationWarning` names the new path, and no
code of the repository still uses an old name."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys

import pytest

from helpers import REPO, product_modules

# old name -> new name, written out by hand (not read from plexus.oldpaths)
PAIRS = {
    "plexus.datasets": "plexus_datasets",
    "plexus.datasets.graph": "plexus_datasets.graph",
    "plexus.partitioners": "plexus_partition",
    "plexus.partitioners.store": "plexus_partition.store",
    "plexus.core.owned": "plexus_datasets.base.owned",
    "plexus.core.tasks": "plexus_datasets.base.tasks",
    "plexus.core.grid": "plexus_partition.model.grid",
    "plexus.core.model": "plexus_partition.model.model",
    "plexus.core.ops": "plexus_partition.model.ops",
    "plexus.core.ops.gat": "plexus_partition.model.ops.gat",
    "plexus.runtime.env": "plexus_partition.launch.env",
    "plexus.runtime.lifeline": "plexus_partition.launch.lifeline",
}
OLD = ("plexus.datasets", "plexus.partitioners", "plexus.core.owned", "plexus.core.atomic",
       "plexus.core.lockfile", "plexus.core.tasks", "plexus.core.values", "plexus.core.writebehind",
       "plexus.core.bounds", "plexus.core.cli", "plexus.core.grid", "plexus.core.layout",
       "plexus.core.model", "plexus.core.modelopts", "plexus.core.schedule", "plexus.core.ops",
       "plexus.runtime.env", "plexus.runtime.hostmem", "plexus.runtime.lifeline",
       "plexus.runtime.group")


def _fresh(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-W", "always::DeprecationWarning", "-c", code],
                          capture_output=True, text=True, timeout=120, cwd=REPO)


@pytest.mark.parametrize("old,new", sorted(PAIRS.items()))
def test_an_old_path_is_the_new_module(old, new):
    done = _fresh(f"import importlib, {new.split('.')[0]}\n"
                  f"old = importlib.import_module({old!r})\n"
                  f"new = importlib.import_module({new!r})\n"
                  "assert old is new, (old, new)\n"
                  f"assert new.__spec__.name == {new!r}, new.__spec__\n"
                  "print('same')")
    assert done.returncode == 0 and done.stdout.strip() == "same", done.stderr[-2000:]
    assert f"{old} moved to {new}" in done.stderr


@pytest.mark.slow  # a tool's process or a world's ranks (issue 58: the slow rule at run time)
def test_from_imports_and_names_of_the_old_paths_work():
    done = _fresh("from plexus.core import grid, owned\n"
                  "from plexus.core.grid import GridShape\n"
                  "from plexus.datasets import load_dataset\n"
                  "import plexus_partition.model.grid as g, plexus_datasets as d\n"
                  "assert grid is g and GridShape is g.GridShape and load_dataset is d.load_dataset\n"
                  "import plexus_datasets.base.owned as o\nassert owned is o\nprint('ok')")
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_a_monkeypatch_through_the_old_name_is_seen_through_the_new(monkeypatch):
    import plexus  # noqa: F401 (installs the old paths)
    import plexus_partition.launch.env as env

    with pytest.warns(DeprecationWarning):
        old = importlib.import_module("plexus.runtime.env")
    monkeypatch.setattr("plexus.runtime.env.THREADS_ENV", "PLEXUS_TEST_THREADS")
    assert env.THREADS_ENV == "PLEXUS_TEST_THREADS" and old is env


@pytest.mark.slow  # a tool's process or a world's ranks (issue 58: the slow rule at run time)
def test_a_name_that_never_existed_is_still_an_import_error():
    done = _fresh("import plexus.core.nosuchmodule")
    assert done.returncode != 0 and "ModuleNotFoundError" in done.stderr


def _uses_old_name(target: str) -> bool:
    return any(target == old or target.startswith(old + ".") for old in OLD)


def test_no_code_of_the_repository_imports_an_old_name():
    files = [*product_modules(), *REPO.joinpath("tests").rglob("*.py"),
             *REPO.joinpath("benchmarks").rglob("*.py"), *REPO.joinpath("examples").rglob("*.py")]
    bad = []
    for path in files:
        if path.name in ("oldpaths.py", "test_old_paths.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            bad += [f"{path.relative_to(REPO)}:{node.lineno} {n}" for n in names
                    if _uses_old_name(n)]
    assert not bad, bad


def test_the_check_of_old_names_can_fail():
    assert _uses_old_name("plexus.core.grid") and _uses_old_name("plexus.datasets.graph")
    assert not _uses_old_name("plexus.core.units") and not _uses_old_name("plexus_datasets")


def test_the_specs_old_class_name_still_imports_with_a_warning():
    """``Operator`` is ``KindSpec`` since a kind's torch code moved to the engine (issue 57)."""
    from plexus_partition.model.ops import KindSpec
    from plexus_partition.model.ops.gcn import GCN

    with pytest.warns(DeprecationWarning, match="Operator is KindSpec"):
        from plexus_partition.model.ops import Operator
    assert Operator is KindSpec and issubclass(GCN, Operator)
