"""One version for the three projects, named by the changelog, and every compatibility name
dated to the release that removes it (issue 57 item 6)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import plexus

ROOT = Path(__file__).resolve().parents[2]
PROJECTS = ("pyproject.toml", "datasets/pyproject.toml", "partitioners/pyproject.toml")


def test_one_version_for_the_three_projects():
    versions = {}
    for name in PROJECTS:
        project = tomllib.loads((ROOT / name).read_text())["project"]
        versions[project["name"]] = project["version"]
        for dep in project.get("dependencies", []):
            if dep.startswith("plexus-gnn"):  # the other projects pinned to the same release
                assert dep.endswith(f"=={plexus.__version__}"), (name, dep)
    assert set(versions.values()) == {plexus.__version__}, versions


def test_the_changelog_names_the_release():
    first = next(line for line in (ROOT / "CHANGELOG.md").read_text().splitlines()
                 if line.startswith("## "))
    assert first.startswith(f"## {plexus.__version__} ("), first


def test_no_shim_for_an_unnamed_release():
    """A compatibility name says which release removes it, never "one release"."""
    vague = re.compile(r"for one\s+release|the next\s+release|one more\s+release", re.I)
    found = []
    for folder in ("plexus", "partitioners", "datasets", "docs"):
        for path in (ROOT / folder).rglob("*"):
            if path.suffix in (".py", ".md") and ".venv" not in path.parts:
                text = path.read_text(errors="replace")
                found += [f"{path.relative_to(ROOT)}: {m.group(0)!r}"
                          for m in vague.finditer(re.sub(r"\s*\n\s*(#\s*)?", " ", text))]
    for name in ("ARCHITECTURE.md", "README.md"):
        text = (ROOT / name).read_text()
        found += [f"{name}: {m.group(0)!r}" for m in vague.finditer(re.sub(r"\s+", " ", text))]
    assert found == []


def test_every_package_folder_is_in_its_projects_wheel():
    """A package folder the wheel's explicit list leaves out is missing from every install but
    the editable one (plexus.engine.kinds was, until the wheel test ran)."""
    for name in PROJECTS:
        base = (ROOT / name).parent
        config = tomllib.loads((ROOT / name).read_text())
        listed = set(config["tool"]["setuptools"]["packages"])
        top = {p.split(".")[0] for p in listed}
        on_disk = {".".join(init.parent.relative_to(base).parts)
                   for t in top for init in (base / t).rglob("__init__.py")}
        assert on_disk == listed, (name, sorted(on_disk ^ listed))
