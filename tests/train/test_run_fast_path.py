"""``./run`` on a set-up checkout starts the command without a Python process of its own (its
check of the install is a stamp file, not ``import torch``): a stub interpreter that logs every
call proves that nothing ran it."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

from helpers import REPO

# the engine's, the datasets project's, the partitioner project's: what ./run installs
PYPROJECTS = ("pyproject.toml", "datasets/pyproject.toml", "partitioners/pyproject.toml")


def _stub(path: Path, body: str) -> None:
    path.write_text("#!/usr/bin/env bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def _checkout(tmp_path: Path) -> tuple[Path, Path]:
    """A copy of ./run and pyproject.toml with a stub .venv: its python logs its arguments (and
    prints a torch path when asked for one), its plexus-train echoes its own."""
    root = tmp_path / "checkout"
    (root / ".venv" / "bin").mkdir(parents=True)
    shutil.copy(REPO / "run", root / "run")
    for project in PYPROJECTS:
        (root / project).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / project, root / project)
    log = tmp_path / "python-calls.log"
    torch_init = tmp_path / "site" / "torch" / "__init__.py"
    torch_init.parent.mkdir(parents=True)
    torch_init.write_text("")
    _stub(root / ".venv" / "bin" / "python",
          f'echo "$*" >> {log}\n'
          f'case "$*" in *torch.__file__*) echo {torch_init} ;; esac\n')
    _stub(root / ".venv" / "bin" / "plexus-train", 'echo "TRAIN $*"\n')
    return root, log


def _want(root: Path, wheels: str = "") -> str:
    """The stamp's first line: the checksum of the three projects' pyproject.toml files, one
    after the other, and of the list of torch-sparse ``wheels`` (a line each), by the system's
    cksum."""
    data = b"".join((root / project).read_bytes() for project in PYPROJECTS) + wheels.encode()
    return subprocess.run(["cksum"], input=data, capture_output=True, check=True
                          ).stdout.decode().strip()


def _run(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    return subprocess.run([str(root / "run"), *args], capture_output=True, text=True, env=env,
                          cwd=root, timeout=60)


def test_a_set_up_checkout_runs_the_command_without_starting_python(tmp_path):
    root, log = _checkout(tmp_path)
    torch_init = tmp_path / "site" / "torch" / "__init__.py"
    (root / ".venv" / ".plexus-installed").write_text(f"{_want(root)}\n{torch_init}\n")
    proc = _run(root, "train", "--grid", "1x1x1")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "TRAIN --grid 1x1x1"
    assert not log.exists(), f"./run started python: {log.read_text()}"


def test_an_old_stamp_is_completed_once_without_reinstalling(tmp_path):
    # a checkout set up before the stamp named torch: one python call finds torch, no pip
    root, log = _checkout(tmp_path)
    stamp = root / ".venv" / ".plexus-installed"
    stamp.write_text(_want(root) + "\n")
    assert _run(root, "train").returncode == 0
    calls = log.read_text().splitlines()
    assert calls and not any("pip" in c for c in calls), calls
    log.unlink()
    assert _run(root, "train").stdout.strip() == "TRAIN"
    assert not log.exists(), f"the second start ran python: {log.read_text()}"


def test_a_missing_torch_or_changed_pyproject_leaves_the_fast_path(tmp_path):
    root, log = _checkout(tmp_path)
    stamp = root / ".venv" / ".plexus-installed"
    stamp.write_text(f"{_want(root)}\n{tmp_path / 'gone' / '__init__.py'}\n")
    _run(root, "train")
    assert any("import torch" in c for c in log.read_text().splitlines())
    log.unlink()
    stamp.write_text(f"0 0\n{tmp_path / 'site' / 'torch' / '__init__.py'}\n")  # pyproject moved
    _run(root, "train")
    installs = [c for c in log.read_text().splitlines() if "pip install" in c]
    # the three projects, editable, in one pip command
    assert any("-e ./datasets -e ./partitioners -e .[test,plot]" in c for c in installs), installs


def test_a_folder_of_links_to_the_checkout_finds_its_wheels_and_its_stamp(tmp_path):
    # the README test's stand-in root links every entry: its ./run must find the torch-sparse
    # wheels beside the real checkout (../shared/wheels), so the same stamp, and install nothing
    root, log = _checkout(tmp_path / "home")
    wheel = tmp_path / "home" / "shared" / "wheels" / "torch_sparse-0.6.18-cp311-cp311-linux.whl"
    wheel.parent.mkdir(parents=True)
    wheel.write_bytes(b"")
    torch_init = tmp_path / "home" / "site" / "torch" / "__init__.py"
    want = _want(root, f"{root}/../shared/wheels/{wheel.name}\n")
    (root / ".venv" / ".plexus-installed").write_text(f"{want}\n{torch_init}\n")
    links = tmp_path / "links"
    links.mkdir()
    for entry in root.iterdir():
        (links / entry.name).symlink_to(entry)
    for where in (root, links):
        proc = _run(where, "train")
        assert proc.returncode == 0 and proc.stdout.strip() == "TRAIN", proc.stderr
        assert not log.exists(), f"./run from {where.name} started python: {log.read_text()}"
