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


def test_the_check_can_fail():
    # the block itself works: a module that needs torch fails under it
    assert _run("import plexus.engine.model").returncode != 0
