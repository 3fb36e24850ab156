"""The `Graph` every loader returns, its validation, and GCN normalization."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp


class DatasetError(ValueError):
    """Bad or missing dataset input. The message is one line naming the file and the problem."""


#: Most nodes a graph may have: `edges_to_csr` keys an edge as ``src * N + dst`` in an int64.
MAX_NODES = 3_000_000_000


@dataclass
class Graph:
    """A node-classification graph.

    ``adj`` is the raw N×N adjacency in CSR with ``adj[i, j] != 0`` for an edge i -> j. Undirected
    graphs store both directions. ``labels`` are int64 with -1 for unlabelled nodes.
    """

    name: str
    adj: sp.csr_matrix
    features: np.ndarray  # float32 (N, F)
    labels: np.ndarray  # int64 (N,), -1 = no label
    train_mask: np.ndarray  # bool (N,)
    val_mask: np.ndarray
    test_mask: np.ndarray
    num_classes: int
    directed: bool = False
    notes: list[str] = field(default_factory=list)  # e.g. "features are seeded random"

    @property
    def num_nodes(self) -> int:
        return self.adj.shape[0]

    @property
    def num_features(self) -> int:
        return self.features.shape[1]

    @property
    def num_edges(self) -> int:
        return int(self.adj.nnz)

    @classmethod
    def from_scipy(cls, adj: sp.spmatrix, features: Any, labels: Any, *, train: Any = None,
                   val: Any = None, test: Any = None, num_classes: int | None = None,
                   directed: bool = False, name: str = "graph") -> "Graph":
        """A validated `Graph` from a scipy sparse adjacency (``adj[i, j] != 0``: edge i -> j),
        features (N×F, numpy or torch) and labels (N, -1 = unlabelled).

        ``train``/``val``/``test`` are bool masks of length N or arrays of node indices (None:
        empty). An undirected graph (``directed=False``) may store one or both directions of
        each edge: both are stored. Edge weights collapse to 1 and self loops are dropped (the
        GCN normalization adds one per node).
        """
        n = adj.shape[0] if adj.ndim == 2 else -1
        if adj.ndim != 2 or adj.shape[0] != adj.shape[1]:
            raise DatasetError(f"{name}: adjacency must be square, got shape {adj.shape}")
        coo = sp.coo_matrix(adj)
        csr = edges_to_csr(coo.row, coo.col, n, symmetrize=not directed)
        labels = _numpy(labels).astype(np.int64).reshape(-1)
        masks = tuple(_mask(m, n, what, name) for m, what in
                      ((train, "train"), (val, "val"), (test, "test")))
        if num_classes is None:
            num_classes = int(labels.max()) + 1 if labels.size and labels.max() >= 0 else 1
        return cls(name=name, adj=csr, features=_numpy(features).astype(np.float32),
                   labels=labels, train_mask=masks[0], val_mask=masks[1], test_mask=masks[2],
                   num_classes=int(num_classes), directed=directed).validate()

    @classmethod
    def from_pyg(cls, data: Any, *, directed: bool | None = None, name: str = "pyg") -> "Graph":
        """A validated `Graph` from a PyG-style ``Data`` (duck-typed, PyG itself is not needed):
        ``edge_index`` (2×E, row 0 the sources, as PyG), ``x``, ``y`` and ``train_mask``/
        ``val_mask``/``test_mask`` (masks or index arrays; a missing one is empty). ``directed``
        defaults to whether some edge lacks its reverse. ``y`` of shape (N, 1), as OGB stores it,
        is flattened."""
        edge_index = _numpy(data.edge_index).astype(np.int64)
        x = _numpy(data.x)
        if edge_index.ndim != 2 or edge_index.shape[0] != 2:
            raise DatasetError(f"{name}: edge_index must have shape (2, E), got "
                               f"{edge_index.shape}")
        n = int(getattr(data, "num_nodes", None) or x.shape[0])
        adj = sp.csr_matrix((np.ones(edge_index.shape[1], np.float32),
                             (edge_index[0], edge_index[1])), shape=(n, n))
        adj.sum_duplicates()
        adj.data[:] = 1.0  # repeated edges count once, here as in the GCN normalization
        if directed is None:
            nodiag = adj - sp.diags(adj.diagonal())
            directed = bool((nodiag != nodiag.T).nnz)
        masks = {k: getattr(data, f"{k}_mask", None) for k in ("train", "val", "test")}
        return cls.from_scipy(adj, x, data.y, **masks, directed=directed, name=name)

    def to_undirected(self) -> "Graph":
        """The same graph with every edge in both directions (OGB's examples make directed
        citation graphs undirected this way); an undirected graph is returned as it is."""
        if not self.directed:
            return self
        coo = self.adj.tocoo()
        adj = edges_to_csr(coo.row, coo.col, self.num_nodes, symmetrize=True)
        return Graph(self.name, adj, self.features, self.labels, self.train_mask, self.val_mask,
                     self.test_mask, self.num_classes, False,
                     [*self.notes, "made undirected (every edge in both directions)"])

    def validate(self, source: str | None = None) -> "Graph":
        """Check shapes, dtypes and values; raise `DatasetError` naming ``source`` on a problem."""
        where = source or self.name
        n = self.adj.shape[0]
        if self.adj.shape != (n, n):
            raise DatasetError(f"{where}: adjacency must be square, got shape {self.adj.shape}")
        if self.features.ndim != 2 or self.features.shape[0] != n:
            raise DatasetError(
                f"{where}: features have shape {self.features.shape}, expected ({n}, F)")
        if not np.isfinite(self.features).all():
            bad = int((~np.isfinite(self.features)).any(axis=1).sum())
            raise DatasetError(f"{where}: features contain NaN/Inf in {bad} rows; "
                               "clean or impute them before training")
        if self.labels.shape != (n,):
            raise DatasetError(f"{where}: labels have shape {self.labels.shape}, expected ({n},)")
        if self.num_classes < 1:
            raise DatasetError(f"{where}: class count must be >= 1, got {self.num_classes}")
        labelled = self.labels[self.labels >= 0]
        if (self.labels < -1).any() or (labelled >= self.num_classes).any():
            lo, hi = int(self.labels.min()), int(self.labels.max())
            raise DatasetError(f"{where}: labels range over [{lo}, {hi}] but must lie in "
                               f"[0, {self.num_classes - 1}] (or -1 for unlabelled)")
        for name in ("train_mask", "val_mask", "test_mask"):
            mask = getattr(self, name)
            if mask.shape != (n,) or mask.dtype != np.bool_:
                raise DatasetError(f"{where}: {name} must be a bool array of shape ({n},)")
            if (mask & (self.labels < 0)).any():
                raise DatasetError(f"{where}: {name} selects nodes that have no label")
        return self


def row_normalize(features: np.ndarray) -> np.ndarray:
    """Scale each row to sum 1 (rows summing to 0 are left as they are)."""
    sums = features.sum(axis=1, keepdims=True)
    sums[sums == 0] = 1.0
    return (features / sums).astype(np.float32)


AGGREGATIONS = ("gcn", "mean", "sum")


def incoming(adj: sp.spmatrix, directed: bool = False) -> sp.csr_matrix:
    """M with M[i, j] = 1 for every edge j -> i (rows are destinations), in float32 CSR.

    Undirected graphs are symmetrized; edge weights and duplicates collapse to 1. Self loops stay
    (an edge i -> i is a message like any other, as in PyG's message passing).
    """
    a = sp.csr_matrix(adj, dtype=np.float32)
    m = a.T.tocsr() if directed else (a + a.T).tocsr()
    m.sum_duplicates()
    m.data[:] = 1.0
    return m


def gcn_normalize(adj: sp.spmatrix, directed: bool = False) -> sp.csr_matrix:
    """Â = D^-1/2 (M + I) D^-1/2 in float32 CSR, with M = `incoming` (edge j -> i).

    Rows are destinations, so ``Â @ H`` aggregates each node's in-neighbours (what a directed graph
    such as papers100M needs); D is the row sum of M + I (in-degree + 1). Existing self loops are
    replaced by the one of I, as PyG's GCNConv does.
    """
    m = incoming(adj, directed)
    m.setdiag(0)
    m.eliminate_zeros()
    m = m + sp.identity(adj.shape[0], dtype=np.float32, format="csr")
    deg = np.asarray(m.sum(axis=1)).ravel()
    d = sp.diags((1.0 / np.sqrt(deg)).astype(np.float32))
    out = (d @ m @ d).tocsr().astype(np.float32)
    out.sort_indices()
    return out


def normalize(adj: sp.spmatrix, directed: bool = False, aggregation: str = "gcn") -> sp.csr_matrix:
    """The sparse operator a model aggregates with, rows = destinations:

    - "gcn": `gcn_normalize` (GCNConv);
    - "mean": D⁻¹·M, the mean over in-neighbours (SAGEConv; a node without one gets 0);
    - "sum": M, the sum over in-neighbours (GINConv).
    """
    if aggregation == "gcn":
        return gcn_normalize(adj, directed)
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"unknown aggregation {aggregation!r}; use one of {AGGREGATIONS}")
    m = incoming(adj, directed)
    if aggregation == "mean":
        deg = np.asarray(m.sum(axis=1)).ravel()
        m = (sp.diags((1.0 / np.maximum(deg, 1)).astype(np.float32)) @ m).tocsr()
    out = m.astype(np.float32)
    out.sort_indices()
    return out


def gcn_nnz(graph: Graph, exact: bool = False) -> int:
    """Non-zeros of the GCN-normalized Â (`gcn_normalize`, one self loop per node).

    By default counted without building Â: the stored edges minus the self loops plus one per
    node, exact for directed graphs and for undirected ones that store both directions (as every
    loader here does). ``exact`` builds Â and counts it (for a graph of unknown storage).
    """
    if exact:
        return int(gcn_normalize(graph.adj, graph.directed).nnz)
    self_loops = int((graph.adj.diagonal() != 0).sum())
    return int(graph.adj.nnz) - self_loops + graph.num_nodes


def edges_to_csr(src: np.ndarray, dst: np.ndarray, num_nodes: int, symmetrize: bool = False,
                 drop_self_loops: bool = True) -> sp.csr_matrix:
    """Binary float32 CSR adjacency with an entry (src[k], dst[k]) per edge, duplicates collapsed.

    ``symmetrize`` adds every reverse edge (undirected graphs store both directions). Self loops
    are dropped by default: `gcn_normalize` adds exactly one per node anyway, and dropping them
    keeps edge counts comparable with PyG/DGL. Indices are int32 when they fit.
    """
    n = int(num_nodes)
    if not 0 <= n <= MAX_NODES:
        raise DatasetError(f"{n} nodes: a graph has between 0 and {MAX_NODES} nodes")
    src = np.asarray(src).ravel().astype(np.int64, copy=False)
    dst = np.asarray(dst).ravel().astype(np.int64, copy=False)
    if drop_self_loops:
        keep = src != dst
        src, dst = src[keep], dst[keep]
    # One int64 key per entry, row-major: sorting the keys orders the entries as CSR wants and
    # puts duplicates side by side. (A plain sort: np.unique and scipy's COO->CSR duplicate
    # summing are several times slower on tens of millions of edges.)
    keys = src * n + dst
    if symmetrize:
        keys = np.concatenate([keys, dst * n + src])
    keys = sorted_unique(keys)
    rows = keys // n if n else keys
    idx_dtype = np.int32 if max(n, keys.size) < 2**31 else np.int64
    indices = (keys - rows * n).astype(idx_dtype)
    indptr = np.zeros(n + 1, dtype=idx_dtype)
    np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
    data = np.ones(keys.size, dtype=np.float32)
    adj = sp.csr_matrix((data, indices, indptr), shape=(n, n))
    adj.has_sorted_indices = True
    return adj


def sorted_unique(keys: np.ndarray) -> np.ndarray:
    """``keys`` sorted (in place) without repeats: what ``np.unique`` gives, several times faster
    on tens of millions of integers."""
    keys.sort()
    if keys.size:
        first = np.empty(keys.size, dtype=bool)
        first[0] = True
        np.not_equal(keys[1:], keys[:-1], out=first[1:])
        keys = keys[first]
    return keys


def one_line(text: object) -> str:
    """Collapse a (possibly multi-line) exception text into one line for `DatasetError` messages."""
    return " ".join(str(text).split())


def _numpy(value: Any) -> np.ndarray:
    """A numpy array from numpy, a torch tensor (any device) or a sequence."""
    if hasattr(value, "detach"):  # a torch tensor, without importing torch here
        value = value.detach().cpu().numpy()
    return np.asarray(value)


def _mask(value: Any, n: int, what: str, name: str) -> np.ndarray:
    """A bool mask of length ``n`` from a mask, an index array or None (empty)."""
    if value is None:
        return np.zeros(n, dtype=bool)
    arr = _numpy(value).reshape(-1)
    if arr.dtype == np.bool_:
        if arr.shape != (n,):
            raise DatasetError(f"{name}: {what} mask has {arr.size} entries, expected {n}")
        return arr.copy()
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise DatasetError(f"{name}: {what} must be a bool mask or an array of node indices, "
                           f"got dtype {arr.dtype}")
    idx = arr.astype(np.int64)
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise DatasetError(f"{name}: {what} indices must lie in [0, {n - 1}]")
    mask = np.zeros(n, dtype=bool)
    mask[idx] = True
    return mask
