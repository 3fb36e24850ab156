"""The import rules of ARCHITECTURE.md, checked on every module's imports (those inside functions
too): dependencies run one way, the engine (plexus) -> the partitioner project (plexus_partition)
-> the datasets project (plexus_datasets), and inside each from its table's top down; no library
module reaches into another's private names."""

from __future__ import annotations

import ast
import graphlib
import re
from pathlib import Path

import pytest

from helpers import REPO
# the three projects: each folder's tree is its package tree (every module lives where its dotted
# name says)
SOURCES = {"plexus": REPO / "plexus", "plexus_datasets": REPO / "datasets" / "plexus_datasets",
           "plexus_partition": REPO / "partitioners" / "plexus_partition"}
# bottom up: a project's packages may import only its own and lower projects'
PROJECTS = ["plexus_datasets", "plexus_partition", "plexus"]


def allowed_from_architecture_md() -> dict[str, set[str]]:
    """package -> the project packages its modules may import (besides itself), read from the
    table in ARCHITECTURE.md: the one source of the rule (names before any parenthesis)."""
    table, found = {}, False
    for line in (REPO / "ARCHITECTURE.md").read_text(encoding="utf-8").splitlines():
        if line.startswith("| package | may import"):
            found = True
            continue
        if found and not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        if not found or len(cells) != 2 or cells[0].startswith("---"):
            continue
        package = cells[0].strip("`")
        table[package] = set(re.findall(r"`([a-z_.]+)`", cells[1].split("(")[0]))
    return table


ALLOWED = allowed_from_architecture_md()
PACKAGES = sorted(ALLOWED, key=len, reverse=True)


def modules() -> dict[str, Path]:
    """Every module of the project: dotted name -> file."""
    out = {}
    for root_name, root in SOURCES.items():
        for path in root.rglob("*.py"):
            rel = path.relative_to(root).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            name = ".".join([root_name, *parts])
            out[name] = path
    return out


def package_of(module: str) -> str | None:
    """The package of ``module`` named in ALLOWED, the longest that holds it (None for the
    engine's top-level ``plexus`` modules)."""
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
    assert {"plexus_partition.model.layout", "plexus_partition.model.ops.conv", "plexus_datasets.graph",
            "plexus_partition.plan", "plexus.train.cli", "plexus.perfmodel.model"} <= set(ALL)


@pytest.mark.parametrize("name", sorted(ALL))
def test_imports_follow_the_layers(name):
    own = package_of(name)
    bad = []
    for target, _, line in imports(name, ALL[name]):
        if target.split(".")[0] in ("benchmarks", "tests"):
            bad.append(f"line {line}: {target} (no library module imports benchmarks or tests)")
        if target.split(".")[0] not in PROJECTS:
            continue
        if PROJECTS.index(target.split(".")[0]) > PROJECTS.index(name.split(".")[0]):
            bad.append(f"line {line}: {target} is a higher project's")
        if own is None:
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
    for path in (REPO / "tests").rglob("*.py"):
        for target, _, line in imports(f"tests.{path.stem}", path):
            if target.split(".")[0] == "benchmarks":
                bad.append(f"{path.name}:{line}")
    assert not bad, bad


def test_a_rule_violation_is_caught(tmp_path):
    # the checker itself: a datasets module importing the engine must be reported
    fake = tmp_path / "bad.py"
    fake.write_text("def f():\n    from plexus.engine.model import DistributedGCN\n")
    found = imports("plexus_datasets.bad", fake)
    assert ("plexus.engine.model", "DistributedGCN", 2) in found
    assert package_of("plexus.engine.model") not in ALLOWED["plexus_datasets"]


def test_the_table_names_every_package_and_only_packages():
    packages = {package_of(name) for name in ALL} - {None}
    assert set(ALLOWED) == packages, "ARCHITECTURE.md's table and the packages on disk differ"
    for own, may in ALLOWED.items():
        assert may <= packages, f"{own} may import unknown packages {may - packages}"


def diagram_from_architecture_md() -> list[str]:
    """The packages of ARCHITECTURE.md's diagram, top to bottom (its first code block)."""
    text = (REPO / "ARCHITECTURE.md").read_text(encoding="utf-8")
    block = text.split("```", 2)[1]
    return [line.split()[0] for line in block.splitlines() if line.startswith("plexus")]


def test_the_diagram_lists_every_package_above_what_it_may_import():
    order = diagram_from_architecture_md()
    assert sorted(order) == sorted(ALLOWED), "the diagram and the packages on disk differ"
    for i, own in enumerate(order):
        above = set(order[:i])
        assert not ALLOWED[own] & above, f"{own} may import {ALLOWED[own] & above}, drawn above it"


def test_the_public_module_states_the_diagrams_order():
    """``plexus/__init__.py`` names the packages from the bottom up: the diagram's order, read
    upwards (issue 47: it had the runtime above the engine and the API beside plexus-train)."""
    doc = ast.get_docstring(ast.parse((REPO / "plexus" / "__init__.py").read_text()))
    order = doc.split("from the bottom up", 1)[1].split("The old paths", 1)[0]
    stated = re.findall(r"``(plexus[a-z_]*(?:\.[a-z]+)?)``", order)
    assert stated == diagram_from_architecture_md()[::-1]


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as e:
        return e.args[1]
    return None


def test_the_allowed_graph_has_no_cycle():
    assert _cycle(ALLOWED) is None, f"the rule allows a cycle: {_cycle(ALLOWED)}"


def test_no_package_level_import_cycle():
    """The imports actually made (inside functions too) between packages form no cycle."""
    graph: dict[str, set[str]] = {}
    for name, path in ALL.items():
        own = package_of(name)
        if own is None:
            continue
        for target, _, _ in imports(name, path):
            dep = package_of(target) if target.startswith("plexus") else None
            if dep is not None and dep != own:
                graph.setdefault(own, set()).add(dep)
    assert _cycle(graph) is None, f"package import cycle: {_cycle(graph)}"


def test_a_cycle_is_caught():
    assert _cycle({"a": {"b"}, "b": {"a"}}) is not None
    assert _cycle({"a": {"b"}, "b": set()}) is None


def module_graph() -> dict[str, set[str]]:
    """module -> the project modules it imports (inside functions too) from its own package:
    ``from pkg import mod`` counts as an import of ``pkg.mod``."""
    graph: dict[str, set[str]] = {}
    for name, path in ALL.items():
        own = package_of(name)
        for target, what, _ in imports(name, path):
            module = f"{target}.{what}" if f"{target}.{what}" in ALL else target
            if module in ALL and module != name and package_of(module) == own:
                graph.setdefault(name, set()).add(module)
    return graph


def test_no_module_import_cycle_inside_a_package():
    """No circle of imports between the modules of one package, not even one held open by an
    import inside a function: shared pieces live in a lower module (e.g. datasets.errors,
    partitioners.storeformat)."""
    assert _cycle(module_graph()) is None, f"module import cycle: {_cycle(module_graph())}"


def test_a_module_cycle_through_a_function_level_import_is_caught(tmp_path):
    # graph.py imported validate at the top and validate imported graph inside a function
    top, inner = tmp_path / "top.py", tmp_path / "inner.py"
    top.write_text("from .inner import check\n")
    inner.write_text("def check():\n    from .top import x\n")
    graph = {"plexus_datasets.top": {t for t, _, _ in imports("plexus_datasets.top", top)},
             "plexus_datasets.inner": {t for t, _, _ in imports("plexus_datasets.inner", inner)}}
    assert _cycle(graph) is not None
