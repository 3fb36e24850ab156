"""Small valid inputs of every kind the input fuzz damages: npz, Matrix Market, an edge list,
Planetoid files, an OGB directory (raw CSVs and ogb's caches), a shard store, a weights export
and its deflated size bomb; a pickle whose payload would create a marker file."""

from __future__ import annotations

import gzip
import io
import json
import os
import pickle
import zipfile
from pathlib import Path

import numpy as np
import scipy.sparse as sp

EDGES = [(0, 1), (1, 2), (2, 0), (3, 4), (4, 5), (5, 3), (0, 3), (1, 0), (6, 2), (7, 6)]
N = 8


def gz_csv(path: Path, rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        for row in rows:
            f.write(",".join(str(v) for v in np.atleast_1d(row)) + "\n")


class Payload:
    """Unpickles to a call that creates ``path``: what a crafted cache would do."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


def write_npz(path: Path, **edit) -> None:
    adj = sp.csr_matrix((np.ones(len(EDGES), np.float32), np.array(EDGES).T), shape=(N, N))
    attr = sp.csr_matrix(np.arange(N * 3, dtype=np.float32).reshape(N, 3) % 4)
    parts = dict(adj_data=adj.data, adj_indices=adj.indices, adj_indptr=adj.indptr,
                 adj_shape=np.array(adj.shape), attr_data=attr.data, attr_indices=attr.indices,
                 attr_indptr=attr.indptr, attr_shape=np.array(attr.shape),
                 labels=np.arange(N) % 3, idx_train=np.array([0, 1]), idx_val=np.array([2]),
                 idx_test=np.array([3, 4]))
    for key, value in edit.items():
        if value is None:
            parts.pop(key, None)
        else:
            parts[key] = value
    with open(path, "wb") as f:
        np.savez(f, **parts)


def write_mtx(path: Path) -> None:
    lines = [f"{s + 1} {d + 1} 1.0" for s, d in EDGES]
    path.write_text("%%MatrixMarket matrix coordinate real general\n% fuzz\n"
                    f"{N} {N} {len(lines)}\n" + "\n".join(lines) + "\n")


def write_edgelist(path: Path) -> None:
    path.write_text("# fuzz\n" + "".join(f"{10 * s}\t{10 * d}\n" for s, d in EDGES))


def write_planetoid(d: Path, name: str = "toy", objs: dict | None = None,
                    test_index: str | None = None) -> None:
    """Small ind.<name>.* files: 6 allx rows, test nodes 6 and 7."""
    d.mkdir(parents=True, exist_ok=True)
    feats = sp.csr_matrix(np.eye(N, 4, dtype=np.float32) + 0.5)
    onehot = np.eye(3, dtype=np.int64)[np.arange(N) % 3]
    base = {"x": feats[:2], "y": onehot[:2], "allx": feats[:6], "ally": onehot[:6],
            "tx": feats[6:], "ty": onehot[6:],
            "graph": {v: [u for s, u in EDGES if s == v] for v in range(N)}}
    base.update(objs or {})
    for key, obj in base.items():
        with open(d / f"ind.{name}.{key}", "wb") as f:
            pickle.dump(obj, f, protocol=2)
    (d / f"ind.{name}.test.index").write_text("7\n6\n" if test_index is None else test_index)


def write_ogb(root: Path, processed: bool = True) -> Path:
    """ogbn-arxiv's raw layout for a tiny graph, plus ogb's caches (``processed``)."""
    d = root / "ogbn_arxiv"
    gz_csv(d / "raw/edge.csv.gz", EDGES)
    gz_csv(d / "raw/num-node-list.csv.gz", [N])
    gz_csv(d / "raw/num-edge-list.csv.gz", [len(EDGES)])
    gz_csv(d / "raw/node-feat.csv.gz", np.arange(N * 3).reshape(N, 3) * 0.5)
    gz_csv(d / "raw/node-label.csv.gz", [[i % 3] for i in range(N)])
    gz_csv(d / "raw/node_year.csv.gz", [[2000 + i] for i in range(N)])
    for part, ids in (("train", [0, 1, 2]), ("valid", [3]), ("test", [4, 5])):
        gz_csv(d / f"split/time/{part}.csv.gz", ids)
    (d / "RELEASE_v1.txt").touch()
    if processed:
        import torch

        graph = {"edge_index": np.array(EDGES, dtype=np.int64).T, "edge_feat": None,
                 "node_feat": (np.arange(N * 3).reshape(N, 3) * 0.5).astype(np.float32),
                 "num_nodes": N, "node_year": np.arange(N)[:, None] + 2000}
        (d / "processed").mkdir(exist_ok=True)
        torch.save({"graph": graph, "labels": (np.arange(N) % 3)[:, None]},
                   d / "processed/data_processed", pickle_protocol=4)
        torch.save({"train": np.array([0, 1, 2]), "valid": np.array([3]),
                    "test": np.array([4, 5])}, d / "split/time/split_dict.pt")
    return d


def write_store(out: Path, grid=(2, 1, 1)) -> None:
    from plexus_datasets import load_dataset
    from plexus_partition import write_store as _write

    graph = load_dataset("rmat:scale=6,edge_factor=4,features=4,classes=3,seed=1")
    _write(graph, out, grid, 2, "agg", "double", 0)


def rehash(store: Path) -> None:
    """Make the manifest agree with the files' current sizes and sha256 (a forged store)."""
    from plexus_partition.store import file_sha256

    manifest = json.loads((store / "manifest.json").read_text())
    for entry in manifest["ranks"]:
        f = store / entry["file"]
        if f.is_file():
            entry["size"], entry["sha256"] = f.stat().st_size, file_sha256(f)
    (store / "manifest.json").write_text(json.dumps(manifest))


def write_export(path: Path, kind: str = "gcn", features: int = 6) -> None:
    """A valid weights export (``plexus.load_pyg``'s input) of a small ``kind`` model."""
    import torch  # noqa: PLC0415

    from plexus_partition.model.model import ModelConfig  # noqa: PLC0415
    from plexus.engine.pygmodel import PygModel, pyg_spec  # noqa: PLC0415

    cfg = ModelConfig(kind=kind, num_layers=2, hidden=4,
                      **({"norm": "batch"} if kind == "sage" else {}))
    spec = pyg_spec(cfg, features, 3)
    torch.manual_seed(0)
    torch.save({"format": "plexus-weights/2", "kind": kind,
                "state_dict": PygModel(spec).state_dict(), "config": dataclasses_dict(cfg),
                "pyg": spec}, path)


def dataclasses_dict(obj) -> dict:  # noqa: ANN001
    from dataclasses import asdict as _asdict  # noqa: PLC0415

    return _asdict(obj)


def write_bomb(path: Path, base: Path, nbytes: int = 1 << 30) -> None:
    """``base`` (an export) with a tensor of ``nbytes`` zeros added, its members deflated: a
    ~1 MB file that inflates to ``nbytes``."""
    import torch  # noqa: PLC0415

    payload = torch.load(base, weights_only=True)
    payload["features"] = torch.zeros(nbytes // 4)
    buf = io.BytesIO()
    torch.save(payload, buf)
    del payload
    with zipfile.ZipFile(buf) as zin, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, zin.read(info))
