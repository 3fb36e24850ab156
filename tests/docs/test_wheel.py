"""The wheels: the three projects' (the engine, datasets/, partitioners/), built from the sources
and installed into a fresh virtual environment, train from a directory outside the checkout.
This is docs/install.md's route (into your own environment): the wheels must carry every package
(plexus_datasets and plexus_partition from their own projects), the package data (the embedded
Cora) and the console scripts, and the engine's wheel no fuzz harness and no moved package.

Nothing is downloaded: the wheel is installed without its dependencies, and the fresh
environment sees this environment's packages (torch, numpy, ...) through a ``.pth`` file,
after its own site-packages, so its ``plexus`` is the installed one, not the checkout's.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from helpers import REPO

pytestmark = pytest.mark.slow  # worlds or end-to-end runs: left out of the fast subset
# what the build reads (setuptools writes build/ and *.egg-info next to it: a copy keeps the
# checkout clean)
SOURCES = ("pyproject.toml", "README.md", "plexus", "datasets", "partitioners")
SCRIPTS = ("plexus-train", "plexus-partition", "plexus-model", "plexus-bench", "plexus-sweep",
           "plexus-report")


def _run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None,
         timeout: float = 300) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(cmd)}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def test_wheel_installs_into_a_fresh_venv_and_trains(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for name in SOURCES:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build"))
        else:
            shutil.copy2(path, src / name)
    wheels = tmp_path / "wheels"
    # the build backend of this environment (as docs/install.md's command); where it has none (venvs of
    # Python >= 3.12 come without setuptools) pip fetches it, as `pip install .` does
    isolation = [] if importlib.util.find_spec("setuptools") is None else ["--no-build-isolation"]
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", *isolation,
          "--disable-pip-version-check", "-q", str(src / "datasets"), str(src / "partitioners"),
          str(src), "-w", str(wheels)], cwd=tmp_path)
    built = sorted(wheels.glob("*.whl"))
    assert [w.name.split("-")[0] for w in built] == ["plexus_gnn", "plexus_gnn_datasets",
                                                       "plexus_gnn_partition"], built
    engine = zipfile.ZipFile(built[0]).namelist()
    assert not [n for n in engine if "fuzz" in n or n.startswith(("plexus/datasets/",
                                                                 "plexus/partitioners/"))]
    assert "plexus_datasets/data/planetoid/ind.cora.x" in zipfile.ZipFile(built[1]).namelist()

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp_path)
    python = venv / "bin" / "python"
    purelib = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                   cwd=tmp_path).stdout.strip()
    # this environment's dependencies, seen after the fresh one's own packages
    ours = [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
    (Path(purelib) / "zz_test_dependencies.pth").write_text("\n".join(ours) + "\n")
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
          "--no-index", "--disable-pip-version-check", "-q", *map(str, built)], cwd=tmp_path)

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RANK", "WORLD_SIZE",
                                                             "LOCAL_RANK", "SLURM_PROCID")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    where = _run([str(python), "-c", "import plexus, plexus_datasets, plexus_partition; "
                  "print(plexus.__file__); print(plexus_datasets.__file__); "
                  "print(plexus_partition.__file__)"], cwd=outside, env=env).stdout.split()
    assert len(where) == 3 and all(Path(p).is_relative_to(Path(purelib)) for p in where), where
    for script in SCRIPTS:
        assert (venv / "bin" / script).is_file(), script

    proc = _run([str(venv / "bin" / "plexus-train"), "--grid", "1x1x1", "--epochs", "2"],
                cwd=outside, env=env)
    assert "summary: gcn 2x16 on cora, grid 1x1x1" in proc.stdout, proc.stdout
