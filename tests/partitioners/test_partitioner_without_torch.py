"""What ARCHITECTURE.md says of the partitioner without the engine: importing the datasets and the
partitioner, and ``plexus-partition --help``, never import torch (checked in a fresh interpreter
where importing torch fails)."""

from __future__ import annotations

import subprocess
import sys

import pytest

BLOCK = "import sys; sys.modules['torch'] = None\n"


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCK + code], capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("module", ["plexus_datasets", "plexus_partition",
                                    "plexus_partition.cli", "plexus_datasets.diskgraph",
                                    "plexus_partition.store", "plexus_partition.launch.env"])
def test_import_does_not_need_torch(module):
    done = _run(f"import {module}\nprint('ok')")
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-500:]


def test_plexus_partition_help_does_not_need_torch():
    done = _run("from plexus_partition.console import plexus_partition\n"
                "sys.argv = ['plexus-partition', '--help']\nsys.exit(plexus_partition())")
    assert done.returncode == 0 and "--grid" in done.stdout, done.stderr[-500:]


@pytest.mark.slow  # a tool's process or a world's ranks (issue 58: the slow rule at run time)
def test_the_check_can_fail():
    # the block itself works: a module that needs torch fails under it
    assert _run("import plexus.engine.model").returncode != 0


def test_a_rank_of_an_srun_job_without_torch_says_so_in_one_line(tmp_path):
    """Joining a torchrun/srun job's group is the one place the partitioner needs torch: where
    the environment lacks it, a rank says so in one line (exit 2) and writes nothing."""
    import os

    env = dict(os.environ, SLURM_NTASKS="2", SLURM_PROCID="1", SLURM_LOCALID="1",
               SLURM_STEP_ID="0", MASTER_ADDR="127.0.0.1", MASTER_PORT="29555")
    env.pop("RANK", None)
    store = tmp_path / "S"
    done = subprocess.run(
        [sys.executable, "-c", BLOCK + "from plexus_partition.console import plexus_partition\n"
         f"sys.argv = ['plexus-partition', '--dataset', 'rmat:scale=6', '--grid', '2x1x1', "
         f"'--out', {str(store)!r}, '--threads', '1']\nsys.exit(plexus_partition())"],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "rank 1 of 2" in lines[0] and "needs torch" in lines[0], lines
    assert not store.exists()
