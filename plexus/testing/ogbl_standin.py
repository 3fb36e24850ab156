"""A small stand-in for ogbl-collab in OGB's raw layout, for tests and dry runs (no download).

`write_ogbl_standin` writes what OGB's download unpacks to, at hundreds of nodes::

    <root>/ogbl_collab/RELEASE_v1.txt
    <root>/ogbl_collab/raw/{num-node-list,num-edge-list,edge,node-feat}.csv.gz
    <root>/ogbl_collab/split/time/{train,valid,test}.pt   dicts of int64 tensors: "edge"
                                                          (E × 2), valid/test also "edge_neg"

The graph has communities: a node's features are its community's centre plus noise, and most
edges join nodes of one community, so an encoder can learn which pairs are edges. Each
undirected pair is listed once (OGB adds the inverse edges), 80/10/10 at random into train,
valid and test; valid and test get as many negative pairs, none of them an edge. The
``numpy`` variant stores numpy arrays instead of tensors in the split files (as some of OGB's
releases do). Every file is written through the write gate (`plexus_datasets.base.atomic`).
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import torch

from plexus_datasets.base.atomic import atomic_file

NAME = "ogbl-collab"


def _csv_gz(path: Path, rows: np.ndarray, fmt: str) -> None:
    text = "".join(",".join(fmt % v for v in row) + "\n" for row in np.atleast_2d(rows))
    with atomic_file(path) as f:
        f.write(gzip.compress(text.encode()))


def standin_pairs(num_nodes: int, communities: int, degree: float, seed: int) -> np.ndarray:
    """The stand-in's undirected pairs (2 × E, smaller id first, distinct): nine in ten inside
    a community (node i's is i mod ``communities``)."""
    rng = np.random.default_rng(seed)
    n = int(num_nodes)
    e = int(n * degree / 2)
    u = rng.integers(0, n, 3 * e)
    inside = rng.random(3 * e) < 0.9
    hop = rng.integers(1, max(n // communities, 2), 3 * e) * communities
    v = np.where(inside, (u + hop) % n, rng.integers(0, n, 3 * e))
    lo, hi = np.minimum(u, v), np.maximum(u, v)
    keys = lo * n + hi
    keys = keys[lo != hi]
    _, first = np.unique(keys, return_index=True)
    keys = keys[np.sort(first)][:e]
    return np.vstack([keys // n, keys % n])


def write_ogbl_standin(root: str | Path, num_nodes: int = 400, communities: int = 8,
                       degree: float = 8.0, features: int = 16, seed: int = 0,
                       numpy: bool = False) -> dict[str, np.ndarray]:
    """Write the stand-in under ``root``; returns what the split files hold, as numpy arrays:
    {"train", "valid", "test", "valid_neg", "test_neg"} (each E × 2)."""
    rng = np.random.default_rng(seed + 1)
    n = int(num_nodes)
    pairs = standin_pairs(n, communities, degree, seed)
    centres = rng.standard_normal((communities, features))
    x = centres[np.arange(n) % communities] + 0.5 * rng.standard_normal((n, features))
    ds = Path(root) / NAME.replace("-", "_")
    with atomic_file(ds / "RELEASE_v1.txt", "w") as f:
        f.write("a stand-in for ogbl-collab written by plexus.testing.ogbl_standin\n")
    raw = ds / "raw"
    _csv_gz(raw / "num-node-list.csv.gz", np.array([[n]]), "%d")
    _csv_gz(raw / "num-edge-list.csv.gz", np.array([[pairs.shape[1]]]), "%d")
    order = rng.permutation(pairs.shape[1])
    e = pairs.shape[1]
    cut = {"train": order[: int(0.8 * e)], "valid": order[int(0.8 * e): int(0.9 * e)],
           "test": order[int(0.9 * e):]}
    _csv_gz(raw / "edge.csv.gz", pairs[:, cut["train"]].T, "%d")  # OGB's graph: training edges
    _csv_gz(raw / "node-feat.csv.gz", x.astype(np.float32), "%.6f")
    taken = set((pairs[0] * n + pairs[1]).tolist())
    out: dict[str, np.ndarray] = {}
    for part, idx in cut.items():
        out[part] = np.ascontiguousarray(pairs[:, idx].T)
        if part != "train":
            neg: list[int] = []
            while len(neg) < len(idx):
                a, b = sorted(int(v) for v in rng.integers(0, n, 2))
                if a != b and a * n + b not in taken and a * n + b not in neg:
                    neg.append(a * n + b)
            k = np.array(neg, dtype=np.int64)
            out[f"{part}_neg"] = np.stack([k // n, k % n], axis=1)
    wrap = (lambda a: a) if numpy else torch.from_numpy
    for part in cut:
        obj = {"edge": wrap(out[part])}
        if part != "train":
            obj["edge_neg"] = wrap(out[f"{part}_neg"])
        with atomic_file(ds / "split" / "time" / f"{part}.pt") as f:
            torch.save(obj, f)
    return out
