"""Synthetic R-MAT graphs (Chakrabarti et al. 2004; the Graph500 generator), vectorized in numpy.

Each of ``edge_factor * 2**scale`` edges picks one quadrant of the adjacency matrix per bit of the
node id, with probabilities a, b, c, d (default 0.57, 0.19, 0.19, 0.05 as in Graph500). All edges
are drawn at once, one bit level at a time. As in Graph500 the node ids are then randomly permuted,
so high-degree nodes are not bunched at low ids (which would flatter or hurt a partitioner
arbitrarily). The graph is symmetrized; duplicates and self loops are removed, so the edge count
is below ``2 * edge_factor * 2**scale``. Unlike Graph500 there is no per-level noise on a..d.

Labels are made learnable by a GCN: ``argmax((X + mean of neighbours' X) @ W)`` for the random
features X and a random projection W, i.e. a linear function of exactly what one GCN layer sees.
"""

from __future__ import annotations

import re

import numpy as np
import scipy.sparse as sp

from .graph import DatasetError, Graph, edges_to_csr
from .synthetic import random_features, random_split, rng_for
from .validate import check_graph_size

RMAT_DEFAULTS: dict[str, float | int] = {
    "scale": 16, "edge_factor": 16, "features": 128, "classes": 8,
    "a": 0.57, "b": 0.19, "c": 0.19,
}
_INT_KEYS = ("scale", "edge_factor", "features", "classes", "seed")
_FLOAT_KEYS = ("a", "b", "c")
_INT = re.compile(r"[+-]?[0-9]{1,19}")
_FLOAT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]{1,3})?")
MAX_SCALE = 30  # node ids stay in int32; 2**30 nodes is far beyond a single machine's memory anyway

_EDGES, _PERMUTE, _PROJECTION = 11, 12, 13  # random streams (see synthetic.rng_for)


def rmat_edges(scale: int, edge_factor: int, seed: int = 0, a: float = 0.57, b: float = 0.19,
               c: float = 0.19) -> tuple[np.ndarray, np.ndarray]:
    """Raw R-MAT edge endpoints (int32 arrays of length ``edge_factor * 2**scale``, with duplicates
    and self loops), node ids randomly permuted; deterministic in ``seed``."""
    n = 1 << scale
    m = edge_factor * n
    rng = rng_for(seed, _EDGES)
    # 16-bit uniform draws against integer thresholds: a quarter of the memory traffic of float64
    # draws, and 1/65536 resolution is far finer than any meaningful change to a..d.
    thresholds = [np.uint16(min(round(p * 65536), 65535)) for p in (a, a + b, a + b + c)]
    src = np.zeros(m, dtype=np.int32)
    dst = np.zeros(m, dtype=np.int32)
    for _ in range(scale):
        r = rng.integers(0, 65536, m, dtype=np.uint16)
        # q = thresholds passed = quadrant 0..3 (a, b, c, d) = (src bit, dst bit) in binary.
        q = (r >= thresholds[0]).view(np.uint8)
        q += (r >= thresholds[1]).view(np.uint8)
        q += (r >= thresholds[2]).view(np.uint8)
        np.left_shift(src, 1, out=src)
        np.bitwise_or(src, q >> 1, out=src)
        np.left_shift(dst, 1, out=dst)
        np.bitwise_or(dst, q & 1, out=dst)
    perm = rng_for(seed, _PERMUTE).permutation(n).astype(np.int32)
    return perm[src], perm[dst]


def rmat_labels(adj: sp.csr_matrix, features: np.ndarray, num_classes: int,
                seed: int = 0) -> np.ndarray:
    """``argmax((X + D^-1 A X) @ W)`` with a seeded Gaussian W: labels a one-layer GCN can fit."""
    w = rng_for(seed, _PROJECTION).standard_normal((features.shape[1], num_classes),
                                                   dtype=np.float32)
    h = features @ w
    deg = np.diff(adj.indptr).astype(np.float32)
    neigh = (adj @ h) / np.maximum(deg, 1.0)[:, None]
    return np.argmax(h + neigh, axis=1).astype(np.int64)


def rmat_graph(scale: int = 16, edge_factor: int = 16, features: int = 128, classes: int = 8,
               seed: int = 0, a: float = 0.57, b: float = 0.19, c: float = 0.19) -> Graph:
    """An undirected R-MAT `Graph` with random features, projection labels and a 60/20/20 split."""
    _check_params(dict(scale=scale, edge_factor=edge_factor, features=features, classes=classes,
                       seed=seed, a=a, b=b, c=c))
    n = 1 << scale
    # edges are drawn as int64 pairs (16 bytes each, both directions) before the CSR is built
    check_graph_size(f"rmat scale={scale}", n, 2 * edge_factor * n, features)
    src, dst = rmat_edges(scale, edge_factor, seed, a, b, c)
    adj = edges_to_csr(src, dst, n, symmetrize=True)
    del src, dst
    x = random_features(n, features, seed)
    labels = rmat_labels(adj, x, classes, seed)
    masks = random_split(labels, seed)
    isolated = int((np.diff(adj.indptr) == 0).sum())
    d = 1.0 - a - b - c
    notes = [f"synthetic R-MAT scale={scale} edge_factor={edge_factor} "
             f"a={a:g} b={b:g} c={c:g} d={d:g} seed={seed}; symmetrized, duplicates and self "
             f"loops removed; {isolated} isolated nodes",
             f"features are seeded random N(0,1), {features} dims",
             f"labels: argmax of a random projection of features + neighbour mean, {classes} "
             "classes",
             "split is seeded random 60%/20%/20%"]
    graph = Graph(name=f"rmat-s{scale}-e{edge_factor}", adj=adj, features=x, labels=labels,
                  train_mask=masks[0], val_mask=masks[1], test_mask=masks[2],
                  num_classes=classes, directed=False, notes=notes)
    return graph.validate()


def parse_rmat_params(text: str, seed: int = 0) -> dict[str, float | int]:
    """Parse ``scale=S,edge_factor=E,features=F,classes=C,seed=K[,a=..,b=..,c=..]`` (all optional;
    ``seed`` defaults to the ``seed`` argument) into `rmat_graph` keyword arguments."""
    params: dict[str, float | int] = dict(RMAT_DEFAULTS, seed=seed)
    for item in filter(None, (s.strip() for s in text.split(","))):
        key, eq, value = item.partition("=")
        key = key.strip().lower().replace("-", "_")
        if not eq:
            raise DatasetError(f"rmat:{text}: {item!r} is not key=value "
                               f"(keys: {', '.join(_INT_KEYS + _FLOAT_KEYS)})")
        if key not in _INT_KEYS + _FLOAT_KEYS:
            raise DatasetError(f"rmat:{text}: unknown parameter {key!r} "
                               f"(keys: {', '.join(_INT_KEYS + _FLOAT_KEYS)})")
        try:
            # ASCII only: int() and float() also take "1_0", "２０", "nan" and "inf"
            if not (_INT if key in _INT_KEYS else _FLOAT).fullmatch(value.strip()):
                raise ValueError(value)
            params[key] = int(value) if key in _INT_KEYS else float(value)
        except ValueError:
            kind = "an integer" if key in _INT_KEYS else "a number"
            raise DatasetError(f"rmat:{text}: {key} must be {kind}, got {value.strip()!r}") \
                from None
    _check_params(params, f"rmat:{text}")
    return params


def _check_params(p: dict, where: str = "rmat") -> None:
    limits = {"scale": (1, MAX_SCALE), "edge_factor": (1, 1 << 12), "features": (1, 1 << 16),
              "classes": (2, 1 << 16), "seed": (0, 2**63 - 1)}
    for key, (lo, hi) in limits.items():
        if not lo <= p[key] <= hi:
            raise DatasetError(f"{where}: {key}={p[key]} out of range [{lo}, {hi}]")
    a, b, c = p["a"], p["b"], p["c"]
    if min(a, b, c) < 0 or a + b + c > 1:
        raise DatasetError(f"{where}: quadrant probabilities a={a} b={b} c={c} must be >= 0 with "
                           "a+b+c <= 1 (d = 1-a-b-c)")
