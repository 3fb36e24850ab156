"""What ARCHITECTURE.md says of the partitioner without the engine: importing the datasets and the
partitioner, and ``plexus-partition --help``, never import torch (checked in a fresh interpreter
where importing torch fails)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

BLOCK = "import sys; sys.modules['torch'] = None\n"


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCK + code], capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("module", ["plexus.datasets", "plexus.partitioners",
                                    "plexus.partitioners.cli", "plexus.datasets.diskgraph",
                                    "plexus.partitioners.store", "plexus.runtime.env"])
def test_import_does_not_need_torch(module):
    done = _run(f"import {module}\nprint('ok')")
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-500:]


def test_plexus_partition_help_does_not_need_torch():
    done = _run("from plexus.console import plexus_partition\n"
                "sys.argv = ['plexus-partition', '--help']\nsys.exit(plexus_partition())")
    assert done.returncode == 0 and "--grid" in done.stdout, done.stderr[-500:]


def test_the_check_can_fail():
    # the block itself works: a module that needs torch fails under it
    assert _run("import plexus.engine.model").returncode != 0


@pytest.mark.slow
def test_a_plain_partition_needs_no_torch_and_plexus_train_trains_from_it(tmp_path):
    """The CI check of issue 47: `plexus-partition --dataset cora --grid 2x1x2 --out S` in an
    interpreter where importing torch fails (launcher detection, threads, the cut and the store
    need none), then `plexus-train --shards S` trains the store's 2 GCN layers with the losses
    of the `--dataset cora` run on the same grid."""
    from cli_helpers import losses, read_log, train

    store = tmp_path / "S"
    done = _run("from plexus.console import plexus_partition\n"
                f"sys.argv = ['plexus-partition', '--dataset', 'cora', '--grid', '2x1x2', "
                f"'--out', {str(store)!r}, '--threads', '1']\n"
                "code = plexus_partition()\n"
                "assert sys.modules['torch'] is None, 'torch was imported'\n"
                "sys.exit(code)")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "4 shards of cora" in done.stdout and "2 gcn layers" in done.stdout
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
