"""A shard store says which train/val/test split it carries (issue 59: a store made from an npz
did not): its manifest records the nodes per part and where the split came from, plexus-partition
prints it, and so does the first line of plexus-train --shards; a store written before the field
existed still loads, and says it records no split. The counts' oracle is the masks written into
the npz by hand, 60/20/20 of 60 labelled nodes worked out by hand, and Planetoid's public split
of Cora (140/500/1000, Yang et al.)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from cli_helpers import train
from plexus_datasets import load_dataset
from plexus_partition import ShardStoreError, read_manifest, read_shard, store_split, write_store
from plexus_partition.cli import run as partition
from plexus_partition.model.grid import GridShape

N = 60


def _npz(path: Path, split: bool) -> Path:
    """A 60-node npz, with masks of 20/10/30 nodes when ``split``, else none."""
    adj = sp.random(N, N, density=0.08, random_state=0, format="csr")
    rng = np.random.default_rng(0)
    arrays = dict(adj_data=adj.data, adj_indices=adj.indices, adj_indptr=adj.indptr,
                  adj_shape=adj.shape, attr_matrix=rng.standard_normal((N, 5)),
                  labels=rng.integers(0, 3, N))
    if split:
        nodes = np.arange(N)
        arrays.update(train_mask=nodes < 20, val_mask=(nodes >= 20) & (nodes < 30),
                      test_mask=nodes >= 30)
    np.savez(path, **arrays)
    return path


def _store(tmp_path: Path, spec: str, name: str) -> Path:
    out = tmp_path / name
    write_store(load_dataset(spec), out, GridShape.parse("1x1x2"), 2, model="gcn")
    return out


def test_the_manifest_records_the_split_and_where_it_came_from(tmp_path):
    own = _store(tmp_path, f"npz:{_npz(tmp_path / 'own.npz', True)}", "own")
    drawn = _store(tmp_path, f"npz:{_npz(tmp_path / 'drawn.npz', False)}", "drawn")
    cora = _store(tmp_path, "cora", "cora")
    assert read_manifest(own)["split"] == {
        "train": 20, "val": 10, "test": 30,
        "origin": "split from the file's train_mask/val_mask/test_mask"}
    assert read_manifest(drawn)["split"] == {
        "train": 36, "val": 12, "test": 12,
        "origin": "split is seeded random 60%/20%/20% of labelled nodes (seed 0)"}
    assert store_split(read_manifest(cora)) == \
        "train/val/test 140/500/1000 nodes, the dataset's own split"


def test_a_store_without_the_field_still_loads_and_says_so(tmp_path):
    store = _store(tmp_path, f"npz:{_npz(tmp_path / 'g.npz', True)}", "s")
    path = store / "manifest.json"
    manifest = json.loads(path.read_text())
    del manifest["split"]  # as every store written before the field existed
    path.write_text(json.dumps(manifest))
    assert store_split(read_manifest(store)).startswith("split not recorded (a store written "
                                                        "before stores recorded theirs")
    assert read_shard(store, 0).num_nodes == N
    path.write_text(json.dumps({**manifest, "split": {"train": 20, "val": -1, "test": 3,
                                                      "origin": "x"}}))
    with pytest.raises(ShardStoreError, match="split must hold train, val and test counts"):
        read_manifest(store)


def test_plexus_partition_prints_the_split_it_wrote(tmp_path, capsys):
    npz = _npz(tmp_path / "g.npz", False)
    assert partition(["--dataset", f"npz:{npz}", "--grid", "1x1x2", "--out",
                      str(tmp_path / "s")]) == 0
    assert capsys.readouterr().out.rstrip().endswith(
        "; train/val/test 36/12/12 nodes, split is seeded random 60%/20%/20% of labelled "
        "nodes (seed 0)")


@pytest.mark.slow  # plexus-train's process
def test_plexus_train_shards_names_the_split_in_its_first_line(tmp_path):
    store = _store(tmp_path, f"npz:{_npz(tmp_path / 'g.npz', True)}", "s")
    old = shutil.copytree(store, tmp_path / "old")
    manifest = json.loads((old / "manifest.json").read_text())
    del manifest["split"]
    (old / "manifest.json").write_text(json.dumps(manifest))
    for where, said in ((store, ", train/val/test 20/10/30 nodes, split from the file's "
                                "train_mask/val_mask/test_mask, precision fp32"),
                        (old, ", split not recorded (a store written before stores recorded "
                              "theirs; plexus-partition again records it), precision fp32")):
        proc = train("--shards", str(where), "--epochs", "1", timeout=300)
        assert proc.returncode == 0, proc.stderr
        first = proc.stdout.splitlines()[0]
        assert first.startswith("plexus-train: g.npz (N=60") and first.endswith(said), first
