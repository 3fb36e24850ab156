"""The API reference: docs/python-api.md's command (docs/api.py, pdoc), run as written but into a temporary
folder, builds a page for every public module with the public names on it, and none for the test
helpers or the study tools."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys

import pytest

from cli_helpers import cli_env
from helpers import REPO

pytestmark = pytest.mark.slow  # worlds or end-to-end runs: left out of the fast subset

OUT = "api-docs/"


def readme_command() -> list[str]:
    lines = [line for line in (REPO / "docs" / "python-api.md").read_text(encoding="utf-8").splitlines()
             if line.startswith("./run python docs/api.py ")]
    assert len(lines) == 1, lines
    argv = shlex.split(lines[0])
    assert argv[-1] == OUT, argv
    return argv[2:-1]  # without ./run python (this environment's) and the folder


def test_the_readme_command_builds_the_api_reference(tmp_path):
    argv = readme_command()
    proc = subprocess.run([sys.executable, *argv, str(tmp_path)], env=cli_env(), cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]

    def page(module: str) -> str:
        path = tmp_path / (module.replace(".", "/") + ".html")
        assert path.is_file(), f"no page for {module}"
        return path.read_text(encoding="utf-8")

    def documents(html: str, name: str) -> bool:  # pdoc gives each member an anchor of its name
        return re.search(rf'id="{re.escape(name)}"', html) is not None

    top = page("plexus")
    for name in ("distributed_model", "Graph", "load_dataset", "launch", "GridShape",
                 "gather_predictions", "ModelConfig"):
        assert documents(top, name), name
    assert "the public API" in top.lower() or "public api" in top.lower()
    assert documents(page("plexus_datasets.graph"), "Graph.from_scipy")
    assert documents(page("plexus.api.model"), "distributed_model")
    assert documents(page("plexus.nn"), "Layer")
    assert documents(page("plexus.engine.model"), "DistributedModel")
    assert documents(page("plexus.perfmodel.model"), "rank_configs")
    for module in ("plexus.api", "plexus_partition", "plexus_partition.launch.env", "plexus_partition.model.grid",
                   "plexus.train.cli"):
        page(module)
    # the test helpers and the study tools are left out
    assert not (tmp_path / "plexus" / "testing").exists()
    assert not (tmp_path / "plexus" / "studies").exists()
