"""plexus-sweep typed in the parent of a clone named ``plexus`` (issue 59): the folder there must
not shadow the installed package in the runs the sweep starts, neither plexus-train started
alone (it starts its own workers) nor torchrun's workers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from plexus.studies.launchers import (SlurmOptions, interpreter, local_command,
                                      torchrun_command)

SPEC = "rmat:scale=7,edge_factor=4,features=8,classes=4"
DECOY = "raise ImportError('the decoy plexus/ of the folder the sweep was typed in')\n"


def test_every_child_python_starts_without_its_folder_on_the_path():
    python = interpreter(sys.executable)
    assert python == (sys.executable, "-P")  # this project's Python is 3.11+
    assert local_command(python, ["--grid", "1x1x1"]) == [
        sys.executable, "-P", "-m", "plexus.train", "--grid", "1x1x1"]
    # torchrun starts its workers as `sys.executable -u -m ...` without -P: it is told the
    # worker's own command line instead
    assert torchrun_command(python, 2, ["--grid", "1x2x1"]) == [
        sys.executable, "-P", "-m", "torch.distributed.run", "--standalone",
        "--nproc-per-node", "2", "--no-python", sys.executable, "-P", "-u", "-m",
        "plexus.train", "--grid", "1x2x1"]
    srun = SlurmOptions(python=sys.executable, python_flags=python[1:], workdir="/w").srun(
        2, "--grid 1x2x1")
    assert srun == f"srun --kill-on-bad-exit=1 --ntasks=2 {sys.executable} -P -m plexus.train " \
                   "--grid 1x2x1"


def test_another_interpreter_is_asked_whether_it_has_minus_p(tmp_path):
    old = tmp_path / "python3.10"  # a stand-in that refuses -P as Python 3.10 does
    old.write_text('#!/bin/bash\n[ "$1" = -P ] && { echo "Unknown option: -P" >&2; exit 2; }\n')
    old.chmod(0o755)
    assert interpreter(str(old)) == (str(old),)
    new = tmp_path / "python3.12"
    new.write_text(f'#!/bin/bash\nexec {sys.executable} "$@"\n')
    new.chmod(0o755)
    assert interpreter(str(new)) == (str(new), "-P")
    # a batch script's interpreter that is not on this machine: taken to be as new as this one
    assert interpreter(str(tmp_path / "cluster" / "python3")) == (
        str(tmp_path / "cluster" / "python3"), "-P")


@pytest.mark.slow
@pytest.mark.parametrize("decoy", ["empty", "package"])
def test_sweep_from_the_parent_of_a_folder_named_plexus(tmp_path, decoy):
    """The sweep's console script, typed where ``plexus/`` is an empty folder (a clone's, seen
    from its parent: a namespace package that hides an editable install) or a package that fails
    to import: a local run of two ranks and a torchrun run of two ranks both complete."""
    (tmp_path / "plexus").mkdir()
    if decoy == "package":
        (tmp_path / "plexus" / "__init__.py").write_text(DECOY)
    sweep = Path(sys.executable).parent / "plexus-sweep"
    common = ["--dataset", SPEC, "--epochs", "2", "--hidden", "8", "--no-calibrate",
              "--out", "study"]
    for launcher, grid in (("local", "1x2x1"), ("torchrun", "2x1x1")):
        res = subprocess.run([str(sweep), *common, "--grids", grid, "--launcher", launcher],
                             cwd=tmp_path, capture_output=True, text=True, timeout=600)
        outputs = "".join(p.read_text() for p in (tmp_path / "study").rglob("*.out"))
        assert res.returncode == 0, res.stdout + res.stderr + outputs
    runs = json.loads((tmp_path / "study" / "manifest.json").read_text())["runs"]
    assert sorted(r["grid"] for r in runs.values()) == ["1x2x1", "2x1x1"]
    assert {r["state"] for r in runs.values()} == {"complete"}
    assert all(r["command"][1] == "-P" for r in runs.values())
