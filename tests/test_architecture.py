"""The import rules of ARCHITECTURE.md, checked on every module's imports (those inside functions
too): dependencies run one way, application -> engine -> partitioners -> datasets, with the
performance model beside the engine; no library module reaches into another's private names."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# where each installed package's source lives (pyproject's package-dir)
SOURCES = {"plexus": REPO / "plexus", "plexus.datasets": REPO / "datasets",
           "plexus.partitioners": REPO / "partitioners"}

# package -> the project packages its modules may import (besides itself)
ALLOWED = {
    "plexus.core": set(),
    "plexus.datasets": set(),
    "plexus.partitioners": {"plexus.datasets", "plexus.core"},
    "plexus.engine": {"plexus.core", "plexus.datasets", "plexus.partitioners"},
    "plexus.perfmodel": {"plexus.core", "plexus.datasets", "plexus.testing"},
    # users' layers on the engine's building blocks
    "plexus.nn": {"plexus.core", "plexus.datasets", "plexus.partitioners", "plexus.engine"},
    "plexus.runtime": {"plexus.core"},
    "plexus.testing": {"plexus.core", "plexus.datasets", "plexus.partitioners", "plexus.engine",
                       "plexus.perfmodel", "plexus.runtime"},
    "plexus.api": {"plexus.core", "plexus.datasets", "plexus.partitioners", "plexus.engine",
                   "plexus.runtime"},
    "plexus.train": {"plexus.core", "plexus.datasets", "plexus.partitioners", "plexus.engine",
                     "plexus.perfmodel", "plexus.runtime", "plexus.api"},
    # application level: drives plexus-train as a subprocess, reads its logs
    "plexus.studies": {"plexus.core", "plexus.datasets", "plexus.engine", "plexus.perfmodel",
                       "plexus.testing"},
}
PACKAGES = sorted(ALLOWED, key=len, reverse=True)


def modules() -> dict[str, Path]:
    """Every module of the project: dotted name -> file."""
    out = {}
    for root_name, root in SOURCES.items():
        for path in root.rglob("*.py"):
            rel = path.relative_to(root).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            name = ".".join([root_name, *parts])
            if root_name == "plexus" and len(parts) and parts[0] in ("datasets", "partitioners"):
                continue  # not there; listed for completeness
            out[name] = path
    return out


def package_of(module: str) -> str | None:
    """The sub-package of ``module`` named in ALLOWED (None for the top-level ``plexus``)."""
    return next((p for p in PACKAGES if module == p or module.startswith(p + ".")), None)


def imports(name: str, path: Path) -> list[tuple[str, str, int]]:
    """(imported module, imported name or "", line) of every import in the file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    is_pkg = path.name == "__init__.py"
    base = name.split(".") if is_pkg else name.split(".")[:-1]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, "", node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parent = base[:len(base) - node.level + 1]
                target = ".".join(parent + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for a in node.names:
                out.append((target, a.name, node.lineno))
    return out


ALL = modules()


def test_the_walk_sees_the_project():
    assert {"plexus.core.layout", "plexus.engine.ops.conv", "plexus.datasets.graph",
            "plexus.partitioners.plan", "plexus.train.cli", "plexus.perfmodel.model"} <= set(ALL)


@pytest.mark.parametrize("name", sorted(ALL))
def test_imports_follow_the_layers(name):
    own = package_of(name)
    bad = []
    for target, _, line in imports(name, ALL[name]):
        if target.split(".")[0] in ("benchmarks", "tests"):
            bad.append(f"line {line}: {target} (no library module imports benchmarks or tests)")
        if own is None or not target.startswith("plexus"):
            continue
        dep = package_of(target)
        if dep is None:
            if target != "plexus":
                bad.append(f"line {line}: {target} is outside every sub-package")
            continue
        if dep != own and dep not in ALLOWED[own]:
            bad.append(f"line {line}: {own} may not import {dep}")
    assert not bad, f"{name}: " + "; ".join(bad)


@pytest.mark.parametrize("name", sorted(ALL))
def test_no_private_names_across_modules(name):
    bad = [f"line {line}: {target}.{what}" for target, what, line in imports(name, ALL[name])
           if what.startswith("_") and not what.startswith("__") and target != name
           and target.startswith("plexus")]
    assert not bad, f"{name} imports private names of other modules: " + "; ".join(bad)


def test_tests_never_import_benchmark_scripts():
    bad = []
    for path in (REPO / "tests").glob("*.py"):
        for target, _, line in imports(f"tests.{path.stem}", path):
            if target.split(".")[0] == "benchmarks":
                bad.append(f"{path.name}:{line}")
    assert not bad, bad


def test_a_rule_violation_is_caught(tmp_path):
    # the checker itself: a datasets module importing the engine must be reported
    fake = tmp_path / "bad.py"
    fake.write_text("def f():\n    from plexus.engine.model import DistributedGCN\n")
    found = imports("plexus.datasets.bad", fake)
    assert ("plexus.engine.model", "DistributedGCN", 2) in found
    assert package_of("plexus.engine.model") not in ALLOWED["plexus.datasets"]
