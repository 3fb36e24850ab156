"""Synthetic R-MAT graphs (Chakrabarti et al. 2004; the Graph500 generator), vectorized in numpy.

Each of ``edge_factor * 2**scale`` edges picks one quadrant of the adjacency matrix per bit of the
node id, with probabilities a, b, c, d (default 0.57, 0.19, 0.19, 0.05 as in Graph500). Edges are
drawn one bit level at a time, for the whole list or for any aligned range of it (the generator
jumps ahead), so a graph too big for memory is generated in pieces with exactly the same edges
(`plexus_datasets.rmat_stream`). As in Graph500 the node ids are then randomly permuted,
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

from .errors import DatasetError
from .graph import Graph, edges_to_csr
from .synthetic import random_features, random_split, rng_for, split_note
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
               c: float = 0.19, lo: int = 0, hi: int | None = None,
               perm: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Raw R-MAT edge endpoints (int32, with duplicates and self loops) of edges ``[lo, hi)`` of
    the ``edge_factor * 2**scale``, node ids randomly permuted; deterministic in ``seed``.

    Any range gives the same edges as the whole list cut at that range (`rmat_chunks` says which
    ranges can be drawn on their own), so a graph of any scale can be generated in pieces.
    ``perm`` is `rmat_node_permutation` (computed when not given).
    """
    n = 1 << scale
    m = edge_factor * n
    hi = m if hi is None else hi
    # 16-bit uniform draws against integer thresholds: a quarter of the memory traffic of float64
    # draws, and 1/65536 resolution is far finer than any meaningful change to a..d.
    thresholds = [np.uint16(min(round(p * 65536), 65535)) for p in (a, a + b, a + b + c)]
    src = np.zeros(hi - lo, dtype=np.int32)
    dst = np.zeros(hi - lo, dtype=np.int32)
    for r in _level_draws(scale, m, seed, lo, hi):
        # q = thresholds passed = quadrant 0..3 (a, b, c, d) = (src bit, dst bit) in binary.
        q = (r >= thresholds[0]).view(np.uint8)
        q += (r >= thresholds[1]).view(np.uint8)
        q += (r >= thresholds[2]).view(np.uint8)
        np.left_shift(src, 1, out=src)
        np.bitwise_or(src, q >> 1, out=src)
        np.left_shift(dst, 1, out=dst)
        np.bitwise_or(dst, q & 1, out=dst)
    perm = rmat_node_permutation(scale, seed) if perm is None else perm
    return perm[src], perm[dst]


def _level_draws(scale: int, m: int, seed: int, lo: int, hi: int):
    """The 16-bit draws of edges [lo, hi) for each bit level: the whole list draws ``m`` values
    per level from one generator; a range jumps there (PCG64 advances in steps of one 64-bit
    output = four 16-bit draws, hence the alignment `rmat_chunks` keeps)."""
    if lo == 0 and hi == m:
        rng = rng_for(seed, _EDGES)
        for _ in range(scale):
            yield rng.integers(0, 65536, m, dtype=np.uint16)
        return
    if m % 4 or lo % 4:
        raise ValueError(f"edges {lo}..{hi} of {m} cannot be drawn on their own")
    for level in range(scale):
        rng = rng_for(seed, _EDGES)
        rng.bit_generator.advance((level * m + lo) // 4)
        yield rng.integers(0, 65536, hi - lo, dtype=np.uint16)


def rmat_chunks(scale: int, edge_factor: int, chunk: int) -> list[tuple[int, int]]:
    """Edge ranges of about ``chunk`` edges that `rmat_edges` can draw on their own."""
    m = edge_factor << scale
    if m % 4:
        return [(0, m)]
    step = max(4, chunk - chunk % 4)
    return [(lo, min(lo + step, m)) for lo in range(0, m, step)]


def rmat_node_permutation(scale: int, seed: int) -> np.ndarray:
    """The random relabelling of R-MAT's node ids (int32, node-sized)."""
    return rng_for(seed, _PERMUTE).permutation(1 << scale).astype(np.int32)


#: rows of X projected at once for the labels (the projection is defined chunk by chunk, so a
#: generator holding one chunk computes exactly the same labels)
PROJECTION_ROWS = 1 << 16


def rmat_projection(features: np.ndarray, num_classes: int, seed: int = 0) -> np.ndarray:
    """``X @ W`` for rows of X (at most `PROJECTION_ROWS` at once) with the seeded Gaussian W."""
    w = rng_for(seed, _PROJECTION).standard_normal((features.shape[1], num_classes),
                                                   dtype=np.float32)
    return np.concatenate([features[lo:lo + PROJECTION_ROWS] @ w
                           for lo in range(0, max(len(features), 1), PROJECTION_ROWS)])


def rmat_labels(adj: sp.csr_matrix, features: np.ndarray, num_classes: int,
                seed: int = 0) -> np.ndarray:
    """``argmax((X + D^-1 A X) @ W)`` with a seeded Gaussian W: labels a one-layer GCN can fit."""
    h = rmat_projection(features, num_classes, seed)
    deg = np.diff(adj.indptr).astype(np.float32)
    neigh = (adj @ h) / np.maximum(deg, 1.0)[:, None]
    return np.argmax(h + neigh, axis=1).astype(np.int64)


def rmat_notes(p: dict, isolated: int) -> list[str]:
    """What a generated R-MAT graph says about itself (``p``: `parse_rmat_params`' keys)."""
    d = 1.0 - p["a"] - p["b"] - p["c"]
    return [f"synthetic R-MAT scale={p['scale']} edge_factor={p['edge_factor']} "
            f"a={p['a']:g} b={p['b']:g} c={p['c']:g} d={d:g} seed={p['seed']}; symmetrized, "
            f"duplicates and self loops removed; {isolated} isolated nodes",
            f"features are seeded random N(0,1), {p['features']} dims",
            f"labels: argmax of a random projection of features + neighbour mean, "
            f"{p['classes']} classes",
            split_note(f"is seeded random 60%/20%/20% (seed {p['seed']})")]


def rmat_name(p: dict) -> str:
    return f"rmat-s{p['scale']}-e{p['edge_factor']}"


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
    params = dict(scale=scale, edge_factor=edge_factor, features=features, classes=classes,
                  seed=seed, a=a, b=b, c=c)
    graph = Graph(name=rmat_name(params), adj=adj, features=x, labels=labels,
                  train_mask=masks[0], val_mask=masks[1], test_mask=masks[2],
                  num_classes=classes, directed=False, notes=rmat_notes(params, isolated))
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
            raise DatasetError(
                f"rmat:{text}: {key} must be {kind}, got {value.strip()!r}") from None
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
