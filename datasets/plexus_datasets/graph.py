"""The `Graph` every loader returns, its validation, and GCN normalization."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from . import inputs
from .errors import MAX_NODES, DatasetError, RootMissing  # noqa: F401 (their home before errors)
from .validate import check_graph_size, check_sparse, csr_from_parts


@dataclass
class Graph:
    """A node-classification graph: single-label (one class per node) or multi-label (binary
    tasks, as ogbn-proteins).

    ``adj`` is the raw N×N adjacency in CSR with ``adj[i, j] != 0`` for an edge i -> j. Undirected
    graphs store both directions. Single-label ``labels`` are int64 (N,) with -1 for unlabelled
    nodes and ``num_classes`` classes; multi-label ``labels`` are int8 (N, T) with 0/1 per task
    and -1 where a node has no label for a task, and ``num_classes`` is T. ``weighted``: ``adj``'s
    values are positive edge weights, which GCN's normalization uses (as PyG's GCNConv with
    ``edge_weight``); otherwise they are 1.
    """

    name: str
    adj: sp.csr_matrix
    features: np.ndarray  # float32 (N, F)
    labels: np.ndarray  # int64 (N,), -1 = no label; or int8 (N, T) multi-label, -1 = missing
    train_mask: np.ndarray  # bool (N,)
    val_mask: np.ndarray
    test_mask: np.ndarray
    num_classes: int
    directed: bool = False
    notes: list[str] = field(default_factory=list)  # e.g. "features are seeded random"
    weighted: bool = False

    @property
    def multilabel(self) -> bool:
        """Whether the labels are a node×task matrix of binary tasks."""
        return self.labels.ndim == 2

    def __repr__(self) -> str:
        """One line of sizes (the arrays themselves can be gigabytes), e.g. ``Graph('cora':
        2,708 nodes, 10,556 edges (undirected), 1,433 features, 7 classes, train/val/test
        140/500/1,000)``."""
        def count(mask: Any) -> str:
            a = np.asarray(mask)
            return f"{int(np.count_nonzero(a)) if a.dtype == bool else a.size:,}"

        try:
            return (f"Graph({self.name!r}: {self.num_nodes:,} nodes, {self.num_edges:,} edges "
                    f"({'directed' if self.directed else 'undirected'}), "
                    f"{self.num_features:,} features, {self.num_classes} "
                    f"{'binary tasks' if self.multilabel else 'classes'}, "
                    f"train/val/test {count(self.train_mask)}/{count(self.val_mask)}/"
                    f"{count(self.test_mask)})")
        except Exception:  # noqa: BLE001 — a Graph built field by field with wrong types
            return f"Graph({self.name!r}: not a valid graph; Graph.validate() says why)"

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
    def from_scipy(cls, adj: Any, features: Any, labels: Any, *, train: Any = None,
                   val: Any = None, test: Any = None, num_classes: int | None = None,
                   directed: bool = False, name: str = "graph",
                   multilabel: bool = False, weighted: bool = False) -> "Graph":
        """A validated `Graph` from a sparse adjacency (``adj[i, j] != 0``: edge i -> j; any
        scipy sparse format, a sparse torch tensor or a dense array), features (N×F, numpy or
        torch) and labels (N or N×1 whole numbers, -1 = unlabelled). With ``multilabel`` the
        labels are an N×T matrix of binary tasks instead (0, 1, and -1 or NaN where a node has
        no label for a task; ``num_classes`` defaults to T).

        ``train``/``val``/``test`` are bool masks of length N or arrays of node indices (None:
        empty). An undirected graph (``directed=False``) may store one or both directions of
        each edge: both are stored. Edge weights collapse to 1 unless ``weighted`` (then
        ``adj``'s values are the weights, positive; an undirected graph's edge stored in both
        directions gets the mean of its two values). Self loops are dropped (the GCN
        normalization adds one per node, of weight 1). Every input is checked as the file loaders
        check theirs (`plexus_datasets.inputs`): a bad one raises `DatasetError` (one line).
        """
        if not isinstance(name, str):
            raise DatasetError(f"name must be a string, got {type(name).__name__}")
        directed = inputs.flag(directed, name, "directed")
        csr = inputs.adjacency(adj, name)
        n = csr.shape[0]
        x = inputs.features(features, n, name)
        check_graph_size(name, n, 2 * csr.nnz, x.shape[1])  # both directions: 2·nnz keys
        coo = csr.tocoo()
        weighted = inputs.flag(weighted, name, "weighted")
        csr = edges_to_csr(coo.row, coo.col, n, symmetrize=not directed,
                           weights=coo.data if weighted else None)
        multilabel = inputs.flag(multilabel, name, "multilabel")
        y = inputs.task_labels(labels, n, name) if multilabel else inputs.labels(labels, n, name)
        masks = tuple(inputs.mask(m, n, what, name) for m, what in
                      ((train, "train"), (val, "val"), (test, "test")))
        classes = inputs.class_count(num_classes, y, n, name)
        return cls(name=name, adj=csr, features=x, labels=y, train_mask=masks[0],
                   val_mask=masks[1], test_mask=masks[2], num_classes=classes,
                   directed=directed, weighted=weighted).validate()

    @classmethod
    def from_pyg(cls, data: Any, *, directed: bool | None = None, name: str = "pyg",
                 multilabel: bool = False, weighted: bool = False) -> "Graph":
        """A validated `Graph` from a PyG-style ``Data`` (duck-typed, PyG itself is not needed):
        ``edge_index`` (2×E integer node ids, row 0 the sources, as PyG), ``x``, ``y`` and
        ``train_mask``/``val_mask``/``test_mask`` (masks or index arrays; a missing one is
        empty). ``directed`` defaults to whether some edge lacks its reverse. ``y`` of shape
        (N, 1), as OGB stores it, is flattened; with ``multilabel`` ``y`` is an N×T matrix of
        binary tasks (see `from_scipy`); with ``weighted``, ``data.edge_weight`` (E positive
        values, GCNConv's ``edge_weight``) are the edge weights: a repeated edge's are summed (as
        GCNConv sums its messages), and an undirected graph's two directions get the mean of
        theirs. A bad field raises `DatasetError` (one line)."""
        from .pyg import graph_from_pyg  # noqa: PLC0415

        return graph_from_pyg(cls, data, directed=directed, name=name, multilabel=multilabel,
                              weighted=weighted)

    def to_pyg(self) -> Any:
        """This graph as a ``torch_geometric.data.Data`` (`plexus_datasets.pyg.graph_to_pyg`;
        needs torch and torch_geometric): the inverse of `from_pyg`."""
        from .pyg import graph_to_pyg  # noqa: PLC0415

        return graph_to_pyg(self)

    def normalized(self, aggregation: str = "gcn") -> sp.csr_matrix:
        """The sparse operator a model with ``aggregation`` multiplies by (`normalize`, with
        this graph's edge weights when it has them)."""
        return normalize(self.adj, self.directed, aggregation, self.weighted)

    def to_undirected(self) -> "Graph":
        """The same graph with every edge in both directions (OGB's examples make directed
        citation graphs undirected this way); an undirected graph is returned as it is."""
        if not self.directed:
            return self
        coo = self.adj.tocoo()
        adj = edges_to_csr(coo.row, coo.col, self.num_nodes, symmetrize=True,
                           weights=coo.data if self.weighted else None)
        return Graph(self.name, adj, self.features, self.labels, self.train_mask, self.val_mask,
                     self.test_mask, self.num_classes, False,
                     [*self.notes, "made undirected (every edge in both directions"
                      f"{'; the two weights of an edge averaged' if self.weighted else ''})"],
                     self.weighted)

    def validate(self, source: str | None = None) -> "Graph":
        """Check shapes, dtypes and values; raise `DatasetError` naming ``source`` on a problem."""
        where = self.check_structure(source)
        if not np.isfinite(self.features).all():
            bad = int((~np.isfinite(self.features)).any(axis=1).sum())
            raise DatasetError(f"{where}: features contain NaN/Inf in {bad} rows; "
                               "clean or impute them before training")
        if self.weighted and self.adj.nnz and not (
                np.isfinite(self.adj.data).all() and (self.adj.data > 0).all()):
            data = self.adj.data
            bad = int(np.flatnonzero(~(np.isfinite(data) & (data > 0)))[0])
            src = int(self.adj.indices[bad])
            dst = int(np.searchsorted(self.adj.indptr, bad, side="right") - 1)
            raise DatasetError(f"{where}: edge weights must be positive and finite; the edge "
                               f"between nodes {dst} and {src} weighs {float(data[bad])}")
        if self.multilabel:  # a node may miss some tasks' labels: they stay out of the loss
            if self.labels.size and (self.labels.min() < -1 or self.labels.max() > 1):
                raise DatasetError(f"{where}: multi-label labels range over "
                                   f"[{int(self.labels.min())}, {int(self.labels.max())}] but "
                                   "must be 0, 1 or -1 (missing)")
            if not (self.labels[self.train_mask] >= 0).any():  # the loss would be 0 throughout
                raise DatasetError(f"{where}: no training node has a label for any task (all "
                                   "-1, missing); nothing to train on")
            return self
        labelled = self.labels[self.labels >= 0]
        if (self.labels < -1).any() or (labelled >= self.num_classes).any():
            lo, hi = int(self.labels.min()), int(self.labels.max())
            raise DatasetError(f"{where}: labels range over [{lo}, {hi}] but must lie in "
                               f"[0, {self.num_classes - 1}] (or -1 for unlabelled)")
        for name in ("train_mask", "val_mask", "test_mask"):
            if (getattr(self, name) & (self.labels < 0)).any():
                raise DatasetError(f"{where}: {name} selects nodes that have no label")
        return self

    def check_structure(self, source: str | None = None) -> str:
        """The checks of `validate` that read no values but the adjacency's indices (cheap
        next to cutting a shard): the adjacency's CSR arrays form an N×N matrix (scipy would
        segfault on them otherwise), and features, labels and masks have the types and shapes
        the engine takes. Raises `DatasetError`; returns the name to use in messages."""
        where = source if source is not None else str(self.name)
        adj = self.adj
        if not sp.issparse(adj) or getattr(adj, "format", None) != "csr":
            raise DatasetError(f"{where}: adjacency must be a scipy CSR matrix, got "
                               f"{type(adj).__name__} (Graph.from_scipy converts any format)")
        csr_from_parts(adj.data, adj.indices, adj.indptr, adj.shape, where, "adjacency")
        n = adj.shape[0]
        if adj.shape != (n, n):
            raise DatasetError(f"{where}: adjacency must be square, got shape {adj.shape}")
        if isinstance(self.num_classes, (bool, np.bool_)) or not isinstance(
                self.num_classes, (int, np.integer)) or self.num_classes < 1:
            raise DatasetError(f"{where}: class count must be a positive integer, got "
                               f"{self.num_classes!r}")
        # labels: int64 class ids (N,), or a multi-label int8 node×task matrix (N, T)
        multi = isinstance(self.labels, np.ndarray) and self.labels.ndim == 2
        label_type = (np.int8, (n, int(self.num_classes))) if multi else (np.int64, (n,))
        for attr, dtype, shape in (("features", np.float32, None), ("labels", *label_type),
                                   ("train_mask", np.bool_, (n,)), ("val_mask", np.bool_, (n,)),
                                   ("test_mask", np.bool_, (n,))):
            arr = getattr(self, attr)
            ok = isinstance(arr, np.ndarray) and arr.dtype == dtype and (
                arr.shape == shape if shape else arr.ndim == 2 and arr.shape[0] == n)
            if not ok:
                got = (f"{arr.dtype} {arr.shape}" if isinstance(arr, np.ndarray)
                       else type(arr).__name__)
                want = str(shape).replace(" ", "") if shape else f"({n}, F)"
                if attr == "labels":
                    want += (f" (or int8 ({n}, {self.num_classes}) for a multi-label task)"
                        if not multi else "")
                raise DatasetError(f"{where}: {attr} must be a {np.dtype(dtype)} array of shape "
                                   f"{want}, got {got} (Graph.from_scipy converts them)")
        return where


def row_normalize(features: np.ndarray) -> np.ndarray:
    """Scale each row to unit L1 norm: sum 1 for non-negative features such as Planetoid's bag
    of words (signed features are divided by their absolute sum, never by a sum near zero);
    rows of zeros are left as they are."""
    sums = np.abs(features).sum(axis=1, keepdims=True)
    sums[sums == 0] = 1.0
    return (features / sums).astype(np.float32)


AGGREGATIONS = ("gcn", "mean", "sum")


def incoming(adj: sp.spmatrix, directed: bool = False, weighted: bool = False) -> sp.csr_matrix:
    """M with M[i, j] = 1 for every edge j -> i (rows are destinations), in float32 CSR.

    Undirected graphs are symmetrized; edge weights and duplicates collapse to 1. Self loops stay
    (an edge i -> i is a message like any other, as in PyG's message passing). ``weighted``
    keeps ``adj``'s values as the weights instead: M = Aᵀ (a weighted undirected `Graph` stores
    both directions with one weight, so Aᵀ = A there).
    """
    a = check_sparse(adj, "adjacency", "matrix").astype(np.float32)  # before scipy's kernels
    if weighted:
        m = a.T.tocsr()
        m.sum_duplicates()
        return m
    m = a.T.tocsr() if directed else (a + a.T).tocsr()
    m.sum_duplicates()
    m.data[:] = 1.0
    return m


def row_scale(aggregation: str, degrees: np.ndarray) -> np.ndarray:
    """The factor every value of a row of M (edges j -> i, rows = destinations) is scaled by, as
    float32, from the row's degree (self loop included for "gcn"): "gcn" D^-1/2 (Â[i, j] =
    d[i]·M[i, j]·d[j]), "mean" D^-1 (a row without in-neighbours: 1), "sum" 1. The one rule of
    `normalize` and of the out-of-core partitioner, which scales streamed rows by it; the
    arithmetic is in ``degrees``' own precision, then rounded to float32."""
    if aggregation == "gcn":
        scale = 1.0 / np.sqrt(degrees)
    elif aggregation == "mean":
        scale = 1.0 / np.maximum(degrees, 1)
    elif aggregation == "sum":
        scale = np.ones(len(degrees))
    else:
        raise ValueError(f"unknown aggregation {aggregation!r}; use one of {AGGREGATIONS}")
    return scale.astype(np.float32)


def normalized_symmetric(directed: bool, aggregation: str) -> bool:
    """Whether the normalized Â is symmetric: an undirected graph's M is, and so are D^-1/2·M·
    D^-1/2 ("gcn") and M ("sum"); D^-1·M ("mean") is not. (The engine then reuses one block's
    transpose as another.)"""
    return not directed and aggregation != "mean"


def gcn_normalize(adj: sp.spmatrix, directed: bool = False,
                  weighted: bool = False) -> sp.csr_matrix:
    """Â = D^-1/2 (M + I) D^-1/2 in float32 CSR, with M = `incoming` (edge j -> i).

    Rows are destinations, so ``Â @ H`` aggregates each node's in-neighbours (what a directed graph
    such as papers100M needs); D is the row sum of M + I (in-degree + 1). Existing self loops are
    replaced by the one of I, as PyG's GCNConv does. With ``weighted``, M holds the edge weights
    and D is the weighted in-degree + 1: PyG's ``gcn_norm`` with ``edge_weight`` (a node's self
    loop keeps its weight; one of weight 1 is added where there is none).
    """
    m = incoming(adj, directed, weighted)
    loops = m.diagonal() if weighted else None
    m.setdiag(0)
    m.eliminate_zeros()
    eye = (sp.identity(adj.shape[0], dtype=np.float32, format="csr") if loops is None else
        sp.diags(np.where(loops != 0, loops, 1).astype(np.float32), format="csr"))
    m = m + eye
    deg = np.asarray(m.sum(axis=1)).ravel()
    d = sp.diags(row_scale("gcn", deg))
    out = (d @ m @ d).tocsr().astype(np.float32)
    out.sort_indices()
    return out


def normalize(adj: sp.spmatrix, directed: bool = False, aggregation: str = "gcn",
              weighted: bool = False) -> sp.csr_matrix:
    """The sparse operator a model aggregates with, rows = destinations:

    - "gcn": `gcn_normalize` (GCNConv; with the edge weights when ``weighted``);
    - "mean": D⁻¹·M, the mean over in-neighbours (SAGEConv; a node without one gets 0);
    - "sum": M, the sum over in-neighbours (GINConv).

    SAGEConv and GINConv take no edge weights: "mean" and "sum" ignore them.
    """
    if aggregation == "gcn":
        return gcn_normalize(adj, directed, weighted)
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"unknown aggregation {aggregation!r}; use one of {AGGREGATIONS}")
    m = incoming(adj, directed)
    if aggregation == "mean":
        deg = np.asarray(m.sum(axis=1)).ravel()
        m = (sp.diags(row_scale("mean", deg)) @ m).tocsr()
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
                 drop_self_loops: bool = True, weights: np.ndarray | None = None
                 ) -> sp.csr_matrix:
    """Binary float32 CSR adjacency with an entry (src[k], dst[k]) per edge, duplicates collapsed.

    ``symmetrize`` adds every reverse edge (undirected graphs store both directions). Self loops
    are dropped by default: `gcn_normalize` adds exactly one per node anyway, and dropping them
    keeps edge counts comparable with PyG/DGL. Indices are int32 when they fit. With
    ``weights`` (one per edge) the values are the weights instead of 1: the repeats of an edge
    (the reverse copies ``symmetrize`` adds included) collapse to their mean, so an undirected
    graph's two directions carry one weight.
    """
    n = int(num_nodes)
    if not 0 <= n <= MAX_NODES:
        raise DatasetError(f"{n} nodes: a graph has between 0 and {MAX_NODES} nodes")
    src = np.asarray(src).ravel().astype(np.int64, copy=False)
    dst = np.asarray(dst).ravel().astype(np.int64, copy=False)
    if weights is not None:
        weights = np.asarray(weights, dtype=np.float64).ravel()
        if weights.shape != src.shape:
            raise DatasetError(f"{weights.size} edge weights for {src.size} edges")
    if drop_self_loops:
        keep = src != dst
        src, dst = src[keep], dst[keep]
        weights = None if weights is None else weights[keep]
    if weights is not None:
        return _weighted_csr(src, dst, weights, n, symmetrize)
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


def _weighted_csr(src: np.ndarray, dst: np.ndarray, weights: np.ndarray, n: int,
                  symmetrize: bool) -> sp.csr_matrix:
    """`edges_to_csr` with weights: entries sorted by (row, column), repeats averaged."""
    keys = src * n + dst
    if symmetrize:
        keys = np.concatenate([keys, dst * n + src])
        weights = np.concatenate([weights, weights])
    order = np.argsort(keys, kind="stable")
    keys, weights = keys[order], weights[order]
    del order
    starts = (np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]]) if keys.size else
        np.zeros(0, dtype=np.int64))
    counts = np.diff(np.r_[starts, keys.size])
    values = np.add.reduceat(weights, starts) / counts if keys.size else weights
    keys = keys[starts]
    rows = keys // n if n else keys
    idx_dtype = np.int32 if max(n, keys.size) < 2**31 else np.int64
    indptr = np.zeros(n + 1, dtype=idx_dtype)
    np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
    adj = sp.csr_matrix((values.astype(np.float32), (keys - rows * n).astype(idx_dtype), indptr),
                        shape=(n, n))
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

