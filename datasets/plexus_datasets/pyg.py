"""Conversions between a `plexus_datasets.Graph` and PyG's ``Data``: `graph_from_pyg` (behind
`Graph.from_pyg`, duck-typed: PyG itself is not needed) and `graph_to_pyg` (behind
`Graph.to_pyg`, which needs torch and torch_geometric, imported only there: the datasets
project itself has no torch)."""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from plexus_datasets.base.values import one_line

from . import inputs
from .errors import DatasetError
from .validate import check_coo, check_graph_size


def graph_from_pyg(cls: Any, data: Any, *, directed: bool | None = None, name: str = "pyg",
                   multilabel: bool = False, weighted: bool = False) -> Any:
    """`Graph.from_pyg` (see there): a validated ``cls`` from a PyG-style ``data``."""
    if not isinstance(name, str):
        raise DatasetError(f"name must be a string, got {type(name).__name__}")
    for attr in ("edge_index", "x", "y"):
        if getattr(data, attr, None) is None:
            raise DatasetError(f"{name}: the data has no {attr}")
    edge_index = inputs.as_array(data.edge_index, name, "edge_index")
    if edge_index.ndim != 2 or edge_index.shape[0] != 2 or edge_index.dtype.kind not in "iu":
        raise DatasetError(f"{name}: edge_index must be an integer array of shape (2, E), "
                           f"got {edge_index.dtype} {edge_index.shape}")
    x = inputs.as_array(data.x, name, "x")
    declared = getattr(data, "num_nodes", None)
    n = x.shape[0] if x.ndim else -1
    if declared is not None and (isinstance(declared, (bool, np.bool_)) or not isinstance(
            declared, (int, np.integer)) or declared != n):
        raise DatasetError(f"{name}: num_nodes is {one_line(repr(declared))[:40]} but x has "
                           f"{n} rows")
    check_graph_size(name, n, 2 * edge_index.shape[1], x.shape[1] if x.ndim == 2 else 0)
    row, col = check_coo(edge_index[0], edge_index[1], (n, n), name, "edge_index")
    adj = sp.csr_matrix((np.ones(row.size, np.float32), (row, col)), shape=(n, n))
    adj.sum_duplicates()
    adj.data[:] = 1.0  # repeated edges count once, here as in the GCN normalization
    if directed is None:
        nodiag = adj - sp.diags(adj.diagonal())
        directed = bool((nodiag != nodiag.T).nnz)
    if weighted:  # scipy's conversion to CSR sums a repeated edge's weights
        w = inputs.as_array(getattr(data, "edge_weight", None), name, "edge_weight")
        if w.shape != (row.size,) or w.dtype.kind not in "biuf":
            raise DatasetError(f"{name}: weighted=True needs edge_weight, one number per "
                               f"edge ({row.size}), got {w.dtype} {w.shape}")
        adj = sp.coo_matrix((w.astype(np.float64), (row, col)), shape=(n, n))
    masks = {k: getattr(data, f"{k}_mask", None) for k in ("train", "val", "test")}
    return cls.from_scipy(adj, x, data.y, **masks, directed=directed, name=name,
                          multilabel=multilabel, weighted=weighted)


def graph_to_pyg(graph: Any) -> Any:
    """``graph`` as a ``torch_geometric.data.Data``: ``x`` (float32, N×F), ``edge_index``
    (2×E int64, row 0 the sources: ``adj[i, j]`` is the edge i -> j; an undirected graph's
    edges in both directions, as PyG stores them), ``y`` (int64 classes, -1 unlabelled; a
    multi-label graph's N×T matrix as it is), ``train_mask``/``val_mask``/``test_mask`` (bool)
    and, for a weighted graph, ``edge_weight``. `Graph.from_pyg` of it is the same graph."""
    import torch  # noqa: PLC0415 - the datasets project has no torch; this conversion needs it
    from torch_geometric.data import Data  # noqa: PLC0415

    coo = graph.adj.tocoo()
    order = np.lexsort((coo.col, coo.row))  # PyG's sorted edge_index (row, then column)
    edge_index = torch.from_numpy(np.vstack([coo.row[order], coo.col[order]]).astype(np.int64))
    labels = np.asarray(graph.labels)
    fields = dict(x=torch.from_numpy(np.ascontiguousarray(graph.features, dtype=np.float32)),
                  edge_index=edge_index,
                  y=torch.from_numpy(labels if graph.multilabel else labels.astype(np.int64)),
                  num_nodes=graph.num_nodes)
    for split in ("train", "val", "test"):
        fields[f"{split}_mask"] = torch.from_numpy(np.asarray(getattr(graph, f"{split}_mask"),
                                                              dtype=bool))
    if graph.weighted:
        fields["edge_weight"] = torch.from_numpy(coo.data[order].astype(np.float32))
    return Data(**fields)
