"""The suite's own layout: a folder per subject, file names unique across folders (pytest imports
each by its name), and a fast subset (`-m "not slow"`) that never starts a shared world."""

from __future__ import annotations

import ast
import tomllib
from collections import Counter
from pathlib import Path

from helpers import REPO

TESTS = REPO / "tests"
FAST = './run test -m "not slow"'
# shared fixtures that are plain data written in a moment (no world, no run): fast tests may share
# them with slow ones
DATA_FIXTURES = {"datasets/test_proteins.py::standin", "partitioners/test_stream_partition.py::toy"}


def suite_files() -> list[Path]:
    return sorted(TESTS.rglob("test_*.py"))


def test_every_test_file_sits_in_a_subject_folder_under_a_name_used_once():
    files = suite_files()
    assert not [p.name for p in files if p.parent == TESTS], "test files belong in a subject folder"
    twice = [name for name, n in Counter(p.name for p in files).items() if n > 1]
    assert not twice, f"test file names used in two folders: {twice}"


def _is_slow(node: ast.expr) -> bool:
    return ast.unparse(node) == "pytest.mark.slow"


def _slow_module(tree: ast.Module) -> bool:
    return any(isinstance(n, ast.Assign) and any(getattr(t, "id", None) == "pytestmark"
                                                 for t in n.targets) and
               any(_is_slow(e) for e in ast.walk(n.value)) for n in tree.body)


def _module_fixtures(tree: ast.Module) -> set[str]:
    """Names of the module- or session-scoped fixtures a file defines (its shared worlds)."""
    names = set()
    for n in tree.body:
        if isinstance(n, ast.FunctionDef):
            for d in n.decorator_list:
                if isinstance(d, ast.Call) and ast.unparse(d.func) == "pytest.fixture" and any(
                        k.arg == "scope" and getattr(k.value, "value", None) in ("module", "session")
                        for k in d.keywords):
                    names.add(n.name)
    return names


def test_a_shared_fixture_is_used_by_slow_tests_only_or_by_fast_tests_only():
    """A module-scoped fixture (a world, a trained run) used by one fast test would be started by
    the fast subset anyway: its users are all slow or all fast."""
    mixed = []
    for path in suite_files():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if _slow_module(tree):
            continue
        shared = _module_fixtures(tree)
        users: dict[str, set[bool]] = {}
        for n in tree.body:
            if isinstance(n, ast.FunctionDef) and n.name.startswith("test_"):
                slow = any(_is_slow(d) for d in n.decorator_list)
                for arg in n.args.args:
                    if arg.arg in shared:
                        users.setdefault(arg.arg, set()).add(slow)
        where = path.relative_to(TESTS)
        mixed += [f"{where}::{name}" for name, kinds in users.items()
                  if len(kinds) == 2 and f"{where}::{name}" not in DATA_FIXTURES]
    assert not mixed, f"fixtures shared by slow and fast tests: {mixed}"


def test_the_slow_marker_is_registered_and_the_fast_subset_documented():
    options = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert any(m.startswith("slow:") for m in options["markers"])
    assert "-m" not in options.get("addopts", ""), "the whole suite must run everything"
    for doc in ("README.md", "ARCHITECTURE.md"):
        assert FAST in (REPO / doc).read_text(encoding="utf-8"), doc
