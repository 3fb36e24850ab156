"""Every file or folder the tools open to write goes through the one gate (issue 56, item 1):
`plexus_datasets.base.gate` and the modules built on it (`atomic`, `owned`, `lockfile`), which
refuse a path another user could have chosen before anything is written. This test parses every
module of the three projects and finds each call that opens, makes or copies a file or folder
for writing (``open`` with a write mode, ``os.open`` with write flags, ``Path.write_*``,
``mkdir``, ``np.save``, ``torch.save`` to a path, ``SummaryWriter``, ``tempfile``'s makers,
``shutil.copy*``, ...) outside them, as `test_one_owner_of_deletions` does for deletions.

On main at 1c5befa the walk found 63 sites in 26 modules; every one now goes through the gate
(``gate.make_folder``, ``temp_folder``, ``open_stream``, ``open_file``, ``save_text``,
``summary_writer``) but the few in `ALLOWED`, each with why it writes no file anyone could have
chosen. A reference to a writer that is not called where it is named (``save = np.savez``) is a
site too.
A write into a file object the gate opened (``with atomic_file(p) as f: torch.save(x, f)``),
or into ``os.devnull``, is not a site.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import helpers
from helpers import REPO

BASE = REPO / "datasets" / "plexus_datasets" / "base"
GATE = {BASE / "gate.py", BASE / "atomic.py", BASE / "owned.py", BASE / "lockfile.py"}
#: module -> the functions of it that write (an import of one under any name is a site too)
FUNCTIONS = {"os": {"open", "mkdir", "makedirs", "mkfifo", "link", "symlink", "truncate"},
             "np": {"save", "savez", "savez_compressed", "savetxt"},
             "numpy": {"save", "savez", "savez_compressed", "savetxt"},
             "torch": {"save"},
             "tempfile": {"mkstemp", "mkdtemp", "NamedTemporaryFile", "TemporaryFile",
                          "SpooledTemporaryFile"},
             "shutil": {"copy", "copy2", "copyfile", "copytree", "copyfileobj"}}
#: methods of paths that write
METHODS = {"write_text", "write_bytes", "mkdir", "touch", "symlink_to", "hardlink_to", "tofile"}
_WRITE_FLAGS = {"O_WRONLY", "O_RDWR", "O_CREAT", "O_TRUNC", "O_APPEND"}
#: the gate's openers: a name a ``with`` binds from one is a file the gate opened
GATED_OPENERS = {"atomic_file", "open_stream"}

#: The calls the walk finds that write no file anyone could have chosen, by module: what, and why
ALLOWED = {
    "datasets/plexus_datasets/files.py": {
        "os.fdopen(write)": "open_regular's descriptor is opened O_RDONLY (its mode is a read "
                            "mode the caller passes: 'rb' or 'r')"},
    "datasets/plexus_datasets/proteins_standin.py": {
        "numpy.savetxt": "formats rows into an io.StringIO buffer, no file"},
    "partitioners/plexus_partition/rankfile.py": {
        ".open(write)": "a member of the zip archive the caller writes into a file the gate "
                        "opened (gate.open_stream)"},
    "plexus/runtime/memstats.py": {
        "open(write)": "the kernel's /proc/self/clear_refs, a control file of this process "
                       "(nothing stored, no name anyone else chooses)"},
}

def _mode_writes(call: ast.Call, position: int) -> bool:
    mode = call.args[position] if len(call.args) > position else None
    mode = next((k.value for k in call.keywords if k.arg == "mode"), mode)
    if mode is None:
        return False
    if isinstance(mode, ast.Constant) and isinstance(mode.value, str):
        return any(c in mode.value for c in "wax+")
    return True  # a mode not known from the source: it may write


def _constant_mode_writes(call: ast.Call) -> bool:
    """A method ``open`` (a path's, gzip's, a zip's) given a writing mode in the source."""
    modes = [*call.args[:2], *(k.value for k in call.keywords if k.arg == "mode")]
    return any(isinstance(m, ast.Constant) and isinstance(m.value, str)
               and any(c in m.value for c in "wax+") for m in modes)


def _flags_write(call: ast.Call) -> bool:
    if len(call.args) < 2:
        return False
    names = {n.attr if isinstance(n, ast.Attribute) else getattr(n, "id", "")
             for n in ast.walk(call.args[1])}
    return bool(names & _WRITE_FLAGS) or "O_RDONLY" not in names


def _gated_files(tree: ast.AST) -> set[str]:
    """Names bound by ``with atomic_file(...) as NAME`` (files the gate opened)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                call, var = item.context_expr, item.optional_vars
                if isinstance(call, ast.Call) and isinstance(var, ast.Name):
                    func = call.func
                    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                    if name in GATED_OPENERS:
                        out.add(var.id)
    return out


def _devnull(call: ast.Call) -> bool:
    """Whether the call opens ``os.devnull`` (a sink, no file of anyone's)."""
    first = call.args[0] if call.args else None
    return isinstance(first, ast.Attribute) and first.attr == "devnull"


def write_calls(source: str) -> list[tuple[int, str]]:
    """(line, what) of every call in ``source`` that opens, makes or copies for writing."""
    tree = ast.parse(source)
    aliases: dict[str, str | tuple[str, str]] = {}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name in FUNCTIONS:
                    aliases[a.asname or a.name] = a.name
        elif isinstance(node, ast.ImportFrom) and node.module in FUNCTIONS:
            for a in node.names:
                if a.name in FUNCTIONS[node.module]:
                    aliases[a.asname or a.name] = (node.module, a.name)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").endswith("tensorboard"):
            found += [(node.lineno, f"import {a.name}") for a in node.names
                      if a.name == "SummaryWriter"]
    gated = _gated_files(tree)
    called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and id(node) not in called \
                and isinstance(node.value, ast.Name) and isinstance(aliases.get(node.value.id), str) \
                and node.attr in FUNCTIONS[aliases[node.value.id]] and node.attr != "open":
            found.append((node.lineno, f"{aliases[node.value.id]}.{node.attr} (named)"))
        if not isinstance(node, ast.Call) or _devnull(node):
            continue
        func = node.func
        if isinstance(func, ast.Name):
            alias = aliases.get(func.id)
            if func.id == "open" and _mode_writes(node, 1):
                found.append((node.lineno, "open(write)"))
            elif isinstance(alias, tuple):
                found.append((node.lineno, ".".join(alias)))
            continue
        if not isinstance(func, ast.Attribute):
            continue
        owner = func.value
        module = aliases.get(owner.id) if isinstance(owner, ast.Name) else None
        if isinstance(module, str):
            if module == "os" and func.attr == "fdopen" and _mode_writes(node, 1):
                found.append((node.lineno, "os.fdopen(write)"))
            if func.attr not in FUNCTIONS[module]:
                continue
            if module == "os" and func.attr == "open" and not _flags_write(node):
                continue
            target = node.args[1] if module == "torch" and len(node.args) > 1 else \
                node.args[0] if node.args else None
            if isinstance(target, ast.Name) and target.id in gated:
                continue  # into a file the gate opened
            found.append((node.lineno, f"{module}.{func.attr}"))
        elif func.attr in METHODS:
            found.append((node.lineno, f".{func.attr}()"))
        elif func.attr == "open" and _constant_mode_writes(node):
            found.append((node.lineno, ".open(write)"))
    return sorted(found)


def product_modules() -> list[Path]:
    return [p for p in helpers.product_modules() if p not in GATE]


def test_the_walk_sees_the_product_and_the_gate():
    assert all(p.is_file() for p in GATE) and len(product_modules()) > 100
    assert all((REPO / m).is_file() for m in ALLOWED), [m for m in ALLOWED
                                                       if not (REPO / m).is_file()]


@pytest.mark.parametrize("path", product_modules(), ids=lambda p: str(p.relative_to(REPO)))
def test_no_write_outside_the_gate_but_the_ones_listed(path):
    name = str(path.relative_to(REPO))
    calls = write_calls(path.read_text(encoding="utf-8"))
    allowed = ALLOWED.get(name, {})
    assert [what for _, what in calls if what not in allowed] == [], (
        f"{name}: {calls}; write through plexus_datasets.base.gate (atomic_file, open_stream, "
        "make_folder, temp_folder, open_file, lockfile.acquire)")
    assert sorted({what for _, what in calls}) == sorted(allowed), (
        f"{name}: {sorted(allowed)} allowed, {calls} found: remove what is gone from ALLOWED")


@pytest.mark.parametrize("snippet", [
    "open(p, 'w')", "open(p, mode='ab')", "open(p, m)", "import os\nos.open(p, os.O_WRONLY)",
    "import os\nos.open(p, flags)", "import os\nos.makedirs(d)", "p.write_text('x')",
    "p.write_bytes(b)", "p.mkdir(parents=True)", "p.open('w')", "import numpy as np\nnp.save(p, a)",
    "import torch\ntorch.save(obj, path)", "from torch.utils.tensorboard import SummaryWriter",
    "import tempfile\ntempfile.mkstemp(dir=d)", "from tempfile import mkdtemp as m\nm()",
    "import shutil\nshutil.copytree(a, b)", "import os\nos.fdopen(fd, 'w')", "a.tofile(p)",
    "import numpy as np\nsave = np.savez if c else np.savez_compressed\nsave(p, a=a)",
])
def test_every_spelling_of_a_write_is_caught(snippet):
    assert write_calls(snippet), snippet


@pytest.mark.parametrize("snippet", [
    "open(p)", "open(p, 'rb')", "import os\nos.open(p, os.O_RDONLY | os.O_NOFOLLOW)",
    "p.read_text()", "import os\nos.path.join(a, b)",
    "import torch\nwith atomic_file(p) as f:\n    torch.save(obj, f)",
    "import numpy as np\nwith gate.open_stream(p, 'wb') as f:\n    np.savez(f, a=a)",
    "import numpy as np\nnp.load(p)", "write_target(p, directory=True)",
    "import os\nos.open(os.devnull, os.O_WRONLY)", "open(os.devnull, 'w')",
])
def test_what_is_not_a_write_passes(snippet):
    assert not write_calls(snippet), snippet
