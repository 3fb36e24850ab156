"""Every remove, replace and rename-over of the product goes through `plexus_datasets.base.owned`,
the one module that proves what it acts on is this user's Plexus's (issue 46, item 1): no other
module of the three projects calls ``shutil.rmtree``,
``os.remove``/``unlink``/``replace``/``rename``/``rmdir``, or a path's
``unlink``/``rmdir``/``rename``/``replace``, by any name."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import helpers
from helpers import REPO

OWNER = REPO / "datasets" / "plexus_datasets" / "base" / "owned.py"
#: module -> its destructive functions (an import of one under any name is a call site too)
FUNCTIONS = {"os": {"remove", "unlink", "replace", "rename", "renames", "rmdir", "removedirs"},
             "shutil": {"rmtree", "move"},
             "tempfile": {"TemporaryDirectory"}}  # its cleanup: an rmtree by name
#: methods of pathlib paths that remove or rename-over (``replace``: one positional argument
#: and no keyword, which neither ``str.replace`` nor ``dataclasses.replace`` call takes)
METHODS = {"unlink", "rmdir", "rename", "replace"}


def destructive_calls(source: str) -> list[tuple[int, str]]:
    """(line, what) of every destructive file operation in ``source`` outside the owner."""
    tree = ast.parse(source)
    aliases = {}  # local name -> module, for ``import os as o`` / ``import shutil``
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name in FUNCTIONS:
                    aliases[a.asname or a.name] = a.name
        elif isinstance(node, ast.ImportFrom) and node.module in FUNCTIONS:
            for a in node.names:
                if a.name in FUNCTIONS[node.module] or a.name == "*":
                    found.append((node.lineno, f"from {node.module} import {a.name}"))
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        attr, owner = node.func.attr, node.func.value
        module = aliases.get(owner.id) if isinstance(owner, ast.Name) else None
        if module is not None:
            if attr in FUNCTIONS[module]:
                found.append((node.lineno, f"{module}.{attr}"))
            continue
        if attr not in METHODS:
            continue
        if attr == "replace" and (len(node.args) != 1 or node.keywords
                                  or isinstance(owner, ast.Constant)
                                  or (isinstance(owner, ast.Name) and owner.id == "dataclasses")):
            continue
        found.append((node.lineno, f".{attr}()"))
    return sorted(found)


def product_modules() -> list[Path]:
    return [p for p in helpers.product_modules() if p != OWNER]


def test_the_walk_sees_the_product_and_the_owner():
    assert OWNER.is_file() and len(product_modules()) > 100


@pytest.mark.parametrize("path", product_modules(), ids=lambda p: str(p.relative_to(REPO)))
def test_no_destructive_file_operation_outside_the_owner(path):
    calls = destructive_calls(path.read_text(encoding="utf-8"))
    assert not calls, (f"{path.relative_to(REPO)}: {calls}; remove, replace or rename through "
                       "plexus_datasets.base.owned (remove_tree, remove_file, replace_file, move, scratch_dir)")


@pytest.mark.parametrize("snippet", [
    "import shutil\nshutil.rmtree(p)",
    "import shutil as sh\nsh.rmtree(p, ignore_errors=True)",
    "from shutil import rmtree",
    "import os\nos.remove(p)", "import os\nos.unlink(p)", "import os\nos.replace(a, b)",
    "import os\nos.rename(a, b)", "import os\nos.rmdir(p)", "from os import unlink as u",
    "p.unlink(missing_ok=True)", "(d / 'x').unlink()", "p.rmdir()", "tmp.rename(b)",
    "tmp.replace(path)", "Path(t).replace(Path(f))",
    "import tempfile\nwith tempfile.TemporaryDirectory() as d: pass",
])
def test_every_spelling_of_a_deletion_is_caught(snippet):
    assert destructive_calls(snippet), snippet


@pytest.mark.parametrize("snippet", [
    "s.replace('a', 'b')", "dataclasses.replace(plan, grid=g)", "'x'.replace('-')",
    "x.replace(a, b, 1)", "import os\nos.path.join(a, b)", "owned.remove_tree(p, quiet=True)",
])
def test_what_is_not_a_deletion_passes(snippet):
    assert not destructive_calls(snippet), snippet
