"""Seeded stand-ins for what a graph file lacks: features, labels and a train/val/test split.

Structure-only formats (npz without attributes, Matrix Market, SNAP edge lists) share these so
that every loader returns a trainable `Graph`. Each stand-in is recorded in ``graph.notes`` so a
reported accuracy is never mistaken for one on real labels.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import scipy.sparse as sp

from .graph import Graph
from .validate import check_graph_size

DEFAULT_FEATURES = 128
DEFAULT_CLASSES = 4
DEFAULT_FRACTIONS = (0.6, 0.2)  # train, val; the rest is test

#: How a loader's note on its graph's train/val/test split starts (`split_note`, `split_origin`)
SPLIT_NOTE = "split "
#: What `split_origin` says of a graph whose loader wrote no such note: the split its files define
#: (Planetoid's public split, OGB's official one)
OWN_SPLIT = "the dataset's own split"

# Separate random streams per purpose, so that e.g. changing the feature width does not change
# the labels or the split drawn with the same seed.
_FEATURES, _LABELS, _SPLIT = 1, 2, 3


def rng_for(seed: int, purpose: int) -> np.random.Generator:
    """A generator for one purpose (features, labels, split, ...) derived from the user seed."""
    return np.random.default_rng([int(seed), int(purpose)])


def split_note(how: str) -> str:
    """The note a loader records of where its split came from (``how``: "is seeded random ...",
    "from the file's train_mask/val_mask/test_mask"); `split_origin` reads it back."""
    return f"{SPLIT_NOTE}{how}"


def split_origin(notes: Sequence[str]) -> str:
    """Where a graph's train/val/test split came from, as its notes say (`split_note`), else
    `OWN_SPLIT`; what a shard store records of the split it carries."""
    return next((n for n in notes if n.startswith(SPLIT_NOTE)), OWN_SPLIT)


def random_features(num_nodes: int, dim: int = DEFAULT_FEATURES, seed: int = 0) -> np.ndarray:
    """Standard-normal float32 features of shape (num_nodes, dim), deterministic in ``seed``."""
    return rng_for(seed, _FEATURES).standard_normal((num_nodes, dim), dtype=np.float32)


def node_degrees(adj: sp.spmatrix) -> np.ndarray:
    """In-degree plus out-degree of every node (for symmetric graphs: twice the degree)."""
    a = sp.csr_matrix(adj)
    out_deg = np.diff(a.indptr)
    in_deg = np.bincount(a.indices, minlength=a.shape[0])
    return (out_deg + in_deg).astype(np.int64)


def degree_bucket_labels(adj: sp.spmatrix, num_classes: int = DEFAULT_CLASSES,
                         seed: int = 0) -> np.ndarray:
    """Labels 0..num_classes-1 from degree quantiles: class k is the k-th slice of nodes by degree.

    Nodes are ranked by degree with seeded random tie-breaking, then cut into equal-size slices.
    Ranking (rather than fixed degree thresholds) keeps the classes balanced even when most nodes
    share a degree, as in power-law graphs where plain quantile edges coincide.
    """
    deg = node_degrees(adj)
    n = deg.shape[0]
    tiebreak = rng_for(seed, _LABELS).random(n)
    order = np.lexsort((tiebreak, deg))  # last key is primary: by degree, then random
    labels = np.empty(n, dtype=np.int64)
    labels[order] = (np.arange(n, dtype=np.int64) * num_classes) // max(n, 1)
    return labels


def random_split(labels: np.ndarray, seed: int = 0,
                 fractions: tuple[float, float] = DEFAULT_FRACTIONS
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Seeded random train/val/test boolean masks over the labelled nodes (labels >= 0)."""
    n = labels.shape[0]
    labelled = np.flatnonzero(labels >= 0)
    perm = rng_for(seed, _SPLIT).permutation(labelled)
    n_train = int(round(fractions[0] * perm.size))
    n_val = int(round(fractions[1] * perm.size))
    masks = []
    for part in (perm[:n_train], perm[n_train:n_train + n_val], perm[n_train + n_val:]):
        mask = np.zeros(n, dtype=bool)
        mask[part] = True
        masks.append(mask)
    return masks[0], masks[1], masks[2]


def complete_graph(name: str, adj: sp.csr_matrix, *, features: np.ndarray | None = None,
                   labels: np.ndarray | None = None, num_classes: int | None = None,
                   masks: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
                   seed: int = 0, directed: bool = False, notes: list[str] | None = None,
                   source: str | None = None) -> Graph:
    """Build and validate a `Graph`; missing features, labels or split get seeded stand-ins.

    ``num_classes`` defaults to ``labels.max() + 1``. Every stand-in adds a line to ``notes``.
    ``source`` (the file) is what validation errors name.
    """
    notes = list(notes or [])
    n = adj.shape[0]
    # the stand-ins are N x DEFAULT_FEATURES floats: refuse a graph that cannot hold them
    check_graph_size(source or name, n, adj.nnz,
                     DEFAULT_FEATURES if features is None else
                     (np.shape(features)[1] if np.ndim(features) == 2 else 0))
    if features is None:
        features = random_features(n, DEFAULT_FEATURES, seed)
        notes.append(f"features are seeded random N(0,1), {DEFAULT_FEATURES} dims (seed {seed})")
    if labels is None:
        num_classes = DEFAULT_CLASSES
        labels = degree_bucket_labels(adj, num_classes, seed)
        notes.append(f"labels are {num_classes} degree-quantile buckets (synthetic, seed {seed})")
    labels = np.asarray(labels, dtype=np.int64)
    if num_classes is None:
        num_classes = int(labels.max()) + 1 if labels.size and labels.max() >= 0 else 1
    if masks is None:
        masks = random_split(labels, seed)
        tr, va = DEFAULT_FRACTIONS
        notes.append(split_note(f"is seeded random {tr:.0%}/{va:.0%}/{1 - tr - va:.0%} "
                                f"of labelled nodes (seed {seed})"))
    graph = Graph(name=name, adj=adj, features=np.asarray(features, dtype=np.float32),
                  labels=labels, train_mask=masks[0], val_mask=masks[1], test_mask=masks[2],
                  num_classes=int(num_classes), directed=directed, notes=notes)
    return graph.validate(source)
