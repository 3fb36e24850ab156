"""The CI check of issue 47: the partitioner project (``partitioners/``) installed with the
datasets project alone into a fresh environment without torch (a plain ``pip install``, not
editable, from copies of the two folders) partitions Cora, and ``plexus-train --shards`` trains
the store with the losses of the ``--dataset cora`` run on the same grid."""

from __future__ import annotations

import shutil
import subprocess
import venv

import numpy as np
import pytest

from cli_helpers import cli_env, losses, read_log, train
from helpers import REPO

pytestmark = pytest.mark.slow


def _run(*cmd: str, cwd, timeout: float = 600) -> subprocess.CompletedProcess:
    """A command of the fresh environment, away from the checkout (``python -c`` puts its
    folder first on the path)."""
    env = cli_env()
    env.pop("PYTHONPATH", None)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)


def test_the_partitioner_project_alone_partitions_what_plexus_train_trains(tmp_path):
    sources = tmp_path / "src"
    for folder in ("datasets", "partitioners"):
        shutil.copytree(REPO / folder, sources / folder,
                        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build"))
    env_dir = tmp_path / "env"
    venv.EnvBuilder(with_pip=True, system_site_packages=False).create(env_dir)
    python = str(env_dir / "bin" / "python")
    done = _run(python, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                str(sources / "datasets"), str(sources / "partitioners"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]

    # the environment has no torch and no engine: the projects alone
    done = _run(python, "-c", "import importlib.util as u; "
                "print(u.find_spec('torch'), u.find_spec('plexus'))", cwd=tmp_path)
    assert done.stdout.split() == ["None", "None"], done.stdout + done.stderr[-1000:]

    store = tmp_path / "S"
    done = _run(str(env_dir / "bin" / "plexus-partition"), "--dataset", "cora", "--grid",
                "2x1x2", "--out", str(store), "--threads", "1", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "4 shards of cora" in done.stdout and "2 gcn layers" in done.stdout, done.stdout

    logs = {}
    for name, source in {"store": ("--shards", str(store)),
                         "dataset": ("--dataset", "cora", "--grid", "2x1x2", "--no-cache")
                         }.items():
        logs[name] = tmp_path / f"{name}.json"
        proc = train(*source, "--epochs", "3", "--quiet", "--threads", "1", "--log-json",
                     str(logs[name]))
        assert proc.returncode == 0, proc.stderr[-2000:]
    (store_records, summary), (data_records, _) = read_log(logs["store"]), read_log(logs["dataset"])
    assert (summary["model"]["kind"], summary["model"]["layers"]) == ("gcn", 2)
    np.testing.assert_allclose(losses(store_records), losses(data_records), rtol=0, atol=1e-5)
