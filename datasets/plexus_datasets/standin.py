"""A small stand-in for ogbn-papers100M in its exact raw layout, for tests and dry runs.

`write_papers100m_standin` writes what the real download unpacks to, at a scale of thousands of
nodes instead of 111 million::

    <root>/ogbn_papers100M/RELEASE_v1.txt
    <root>/ogbn_papers100M/raw/data.npz          edge_index int64 (2, E), node_feat float16
                                                 (N, 128), node_year int64 (N, 1),
                                                 num_nodes_list / num_edges_list int64 (1,)
    <root>/ogbn_papers100M/raw/node-label.npz    node_label float32 (N, 1), NaN = unlabelled
    <root>/ogbn_papers100M/split/time/{train,valid,test}.csv.gz

As in the real graph, the edges are directed citations (mostly to older papers, a few repeated,
a few self loops), most nodes are unlabelled, and the split is by year: labelled papers up to
2017 train, 2018 validate, 2019 and later test. Labels are a linear function of the features
plus the mean of the cited papers' features, so a GCN can learn them. ``compressed`` deflates
data.npz (``np.savez_compressed``, as large downloads do) or stores it.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

from plexus_datasets.base import gate

NAME = "ogbn-papers100M"
CLASSES = 172
FEATURES = 128


def write_papers100m_standin(root: str | Path, num_nodes: int = 4000, avg_degree: int = 14,
                             labelled: float = 0.15, seed: int = 0,
                             compressed: bool = True) -> Path:
    """Write the stand-in under ``root``; returns the dataset directory."""
    rng = np.random.default_rng(seed)
    n, e = int(num_nodes), int(num_nodes) * int(avg_degree)
    ds = Path(root) / NAME.replace("-", "_")
    gate.make_folder(ds / "raw")
    gate.make_folder(ds / "split" / "time")
    gate.save_text(ds / "RELEASE_v1.txt", "")
    # node ids grow with the year, as papers do; most papers are recent
    year = np.sort(2020 - (60 * rng.random(n) ** 2).astype(np.int64))
    # a citing paper, and a cited one at most as recent: skewed towards a few highly cited ones
    src = rng.integers(0, n, e)
    dst = (src * rng.random(e) ** 2).astype(np.int64)
    dst[::97] = src[::97]  # a few self loops
    dst[1::89] = dst[::89][:len(dst[1::89])]  # and repeated citations
    src[1::89] = src[::89][:len(src[1::89])]
    edge_index = np.stack([src, dst]).astype(np.int64)
    x = rng.standard_normal((n, FEATURES)).astype(np.float16)
    w = rng.standard_normal((FEATURES, CLASSES)).astype(np.float32)
    x32 = x.astype(np.float32)
    neigh = np.zeros_like(x32)
    np.add.at(neigh, src, x32[dst])
    deg = np.maximum(np.bincount(src, minlength=n), 1).astype(np.float32)
    label = np.argmax((x32 + neigh / deg[:, None]) @ w, axis=1).astype(np.float32)
    has_label = rng.random(n) < labelled
    node_label = np.where(has_label, label, np.nan).astype(np.float32).reshape(-1, 1)
    _save(ds / "raw" / "data.npz", compressed, edge_index=edge_index, node_feat=x,
          node_year=year.reshape(-1, 1).astype(np.int64),
          num_nodes_list=np.array([n], dtype=np.int64), num_edges_list=np.array([e], dtype=np.int64))
    _save(ds / "raw" / "node-label.npz", compressed, node_label=node_label)
    ids = np.flatnonzero(has_label)
    for part, keep in (("train", year[ids] <= 2017), ("valid", year[ids] == 2018),
                       ("test", year[ids] >= 2019)):
        split = ds / "split" / "time" / f"{part}.csv.gz"
        with (gate.open_stream(split, "wb") as raw,
                gzip.GzipFile(filename=str(split), fileobj=raw, mode="wb", mtime=0) as f):
            f.write("".join(f"{i}\n" for i in ids[keep]).encode("ascii"))
    return ds


def _save(path: Path, compressed: bool, **arrays: np.ndarray) -> None:
    """``np.savez`` (``compressed``: ``savez_compressed``) of ``arrays`` into ``path``."""
    with gate.open_stream(path, "wb") as f:
        if compressed:
            np.savez_compressed(f, **arrays)
        else:
            np.savez(f, **arrays)
