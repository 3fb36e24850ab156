"""Graphs stored as a Matrix Market ``.mtx`` adjacency (the SuiteSparse Matrix Collection format).

Only the structure is read: every stored nonzero (i, j) is an edge, weights are ignored, and the
graph is symmetrized. Features, labels and the split are seeded stand-ins (see `synthetic`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import scipy.io
import scipy.sparse as sp

from .graph import DatasetError, Graph, edges_to_csr, one_line
from .synthetic import DEFAULT_FEATURES, complete_graph
from .validate import check_alloc, check_coo, check_graph_size


def load_mtx(path: str | Path, seed: int = 0) -> Graph:
    """Load a square Matrix Market matrix (``.mtx``, also ``.mtx.gz``) as an undirected graph."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise DatasetError(f"{path}: file not found")
    try:
        rows, cols, entries, fmt, _field, symmetry = scipy.io.mminfo(str(path))
    except Exception as e:  # scipy raises ValueError/OSError/... for malformed banners
        raise DatasetError(f"{path}: not a valid Matrix Market file ({type(e).__name__}: "
                           f"{one_line(e)[:200]})") from None
    if rows != cols:
        raise DatasetError(f"{path}: matrix is {rows}x{cols}; an adjacency matrix must be square")
    # the header's sizes are what mmread allocates: check them before reading
    if fmt == "array":
        check_alloc(8.0 * rows * cols, str(path), f"a dense {rows}x{cols} matrix")
    else:
        check_alloc(24.0 * entries, str(path), f"{entries} entries")
    check_graph_size(str(path), rows, (2 if symmetry == "general" else 4) * entries,
                     DEFAULT_FEATURES)
    try:
        matrix = scipy.io.mmread(str(path))
    except Exception as e:  # scipy raises ValueError/OSError/... for malformed data
        raise DatasetError(f"{path}: not a valid Matrix Market file ({type(e).__name__}: "
                           f"{one_line(e)[:200]})") from None
    if not sp.issparse(matrix):
        # 'array' (dense) files are legal Matrix Market but not an adjacency we expect.
        matrix = sp.coo_matrix(np.asarray(matrix))
    coo = sp.coo_matrix(matrix)
    if coo.shape != (rows, cols):
        raise DatasetError(f"{path}: matrix read as {coo.shape[0]}x{coo.shape[1]}, header says "
                           f"{rows}x{cols}")
    check_coo(coo.row, coo.col, coo.shape, str(path))
    n = coo.shape[0]
    nonzero = coo.data != 0
    adj = edges_to_csr(coo.row[nonzero], coo.col[nonzero], n, symmetrize=True)
    name = path.name.removesuffix(".gz").removesuffix(".mtx")
    return complete_graph(name, adj, seed=seed, source=str(path),
                          notes=["adjacency from Matrix Market nonzeros, symmetrized, "
                                 "self loops dropped"])
