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
from .synthetic import complete_graph


def load_mtx(path: str | Path, seed: int = 0) -> Graph:
    """Load a square Matrix Market matrix (``.mtx``, also ``.mtx.gz``) as an undirected graph."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise DatasetError(f"{path}: file not found")
    try:
        matrix = scipy.io.mmread(str(path))
    except Exception as e:  # scipy raises ValueError/OSError/... for malformed banners or data
        raise DatasetError(f"{path}: not a valid Matrix Market file ({type(e).__name__}: "
                           f"{one_line(e)[:200]})") from None
    if not sp.issparse(matrix):
        # 'array' (dense) files are legal Matrix Market but not an adjacency we expect.
        matrix = sp.coo_matrix(np.asarray(matrix))
    coo = sp.coo_matrix(matrix)
    if coo.shape[0] != coo.shape[1]:
        raise DatasetError(f"{path}: matrix is {coo.shape[0]}x{coo.shape[1]}; an adjacency "
                           "matrix must be square")
    n = coo.shape[0]
    nonzero = coo.data != 0
    adj = edges_to_csr(coo.row[nonzero], coo.col[nonzero], n, symmetrize=True)
    name = path.name.removesuffix(".gz").removesuffix(".mtx")
    return complete_graph(name, adj, seed=seed, source=str(path),
                          notes=["adjacency from Matrix Market nonzeros, symmetrized, "
                                 "self loops dropped"])
