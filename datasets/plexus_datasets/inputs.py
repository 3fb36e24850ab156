"""What a caller of the Python API hands over, checked like a file's content (`validate`).

`Graph.from_scipy` and `Graph.from_pyg` take arrays from numpy, torch, scipy or plain sequences.
Each is converted here and refused with a one-line `DatasetError` when it is not what it claims
to be: a sparse adjacency whose arrays do not form one (scipy would segfault on it), labels that
are not whole numbers (0.7 and 1.9 are not classes 0 and 1), features that are not numbers,
masks that are neither bool masks nor node indices, a class count that is not a count.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from plexus_datasets.base.values import one_line

from .errors import DatasetError
from .validate import check_alloc, check_coo, check_sparse, csr_from_parts

#: Largest label value accepted (int64 arithmetic on labels, with room to spare).
MAX_LABEL = 2**62


def as_array(value: Any, where: str, what: str) -> np.ndarray:
    """A numpy array from numpy, a torch tensor (any device), or a sequence."""
    if value is None:
        raise DatasetError(f"{where}: {what} is missing")
    try:
        if hasattr(value, "detach"):  # a torch tensor, without importing torch here
            if "sparse" in str(getattr(value, "layout", "")):
                raise DatasetError(f"{where}: {what} is a sparse torch tensor; give a dense one "
                                   "(or a scipy sparse matrix for the adjacency)")
            value = value.detach().cpu()
            if str(value.dtype) == "torch.bfloat16":  # numpy has no bfloat16
                value = value.float()
            value = value.numpy()
        arr = np.asarray(value)
    except DatasetError:
        raise
    except Exception as e:  # noqa: BLE001 - ragged lists, odd objects: all one kind of mistake
        raise DatasetError(f"{where}: {what} is not an array ({type(e).__name__}: "
                           f"{one_line(e)[:120]})") from None
    if arr.dtype.kind not in "biuf":
        raise DatasetError(f"{where}: {what} must hold numbers, got dtype {arr.dtype}")
    return arr


def adjacency(value: Any, where: str) -> sp.csr_matrix:
    """The checked N×N adjacency in CSR from a scipy sparse matrix, a sparse torch tensor or a
    dense 2-D array (``value[i, j] != 0``: an edge i -> j)."""
    layout = str(getattr(value, "layout", ""))
    if hasattr(value, "detach") and "sparse_coo" in layout:  # torch COO: check before coalescing
        idx = value._indices().detach().cpu().numpy()  # noqa: SLF001 - torch's uncoalesced view
        if idx.ndim != 2 or idx.shape[0] != 2:
            raise DatasetError(f"{where}: adjacency must be a 2-D sparse tensor")
        row, col = check_coo(idx[0], idx[1], tuple(value.shape), where, "adjacency")
        adj = sp.csr_matrix((np.ones(row.size, np.float32), (row, col)), shape=tuple(value.shape))
    elif hasattr(value, "detach") and "sparse_csr" in layout:
        t = value.detach().cpu()
        cols, ptr = t.col_indices().numpy(), t.crow_indices().numpy()
        adj = csr_from_parts(np.ones(cols.size, np.float32), cols, ptr, tuple(t.shape), where,
                             "adjacency")
    elif sp.issparse(value):
        adj = check_sparse(value, where, "adjacency")
    else:
        dense = as_array(value, where, "adjacency")
        if dense.ndim != 2:
            raise DatasetError(f"{where}: adjacency must be 2-D, got shape {dense.shape}")
        adj = sp.csr_matrix(dense)
    if adj.shape[0] != adj.shape[1]:
        raise DatasetError(f"{where}: adjacency must be square, got shape {adj.shape}")
    return adj


def features(value: Any, n: int, where: str) -> np.ndarray:
    """N×F float32 features (a scipy sparse matrix is densified once its size is known to fit)."""
    if sp.issparse(value):
        m = check_sparse(value, where, "features")
        check_alloc(4.0 * m.shape[0] * m.shape[1], where, "dense features")
        arr = m.toarray()
    else:
        arr = as_array(value, where, "features")
    if arr.ndim != 2 or arr.shape[0] != n:
        raise DatasetError(f"{where}: features have shape {arr.shape}, expected ({n}, F) "
                           "(one row per node)")
    with np.errstate(over="ignore", invalid="ignore"):  # too large for float32: Inf, refused
        return np.ascontiguousarray(arr, dtype=np.float32)  # by `Graph.validate`


def labels(value: Any, n: int, where: str) -> np.ndarray:
    """Int64 labels of the N nodes (-1: unlabelled) from integers or whole-number floats, of
    shape (N,) or (N, 1) as OGB stores them."""
    arr = as_array(value, where, "labels")
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr[:, 0]
    if arr.shape != (n,):
        raise DatasetError(f"{where}: labels have shape {arr.shape}, expected ({n},) or ({n}, 1)")
    if arr.dtype.kind == "f":
        if not np.isfinite(arr).all():
            raise DatasetError(f"{where}: labels hold NaN or Inf; mark an unlabelled node with -1")
        frac = arr != np.round(arr)
        if frac.any():
            i = int(np.argmax(frac))
            raise DatasetError(f"{where}: labels must be whole numbers (class ids), got "
                               f"{float(arr[i]):g} at node {i}; round or map them to classes first")
    if arr.size and (float(arr.min()) < -1 or float(arr.max()) > MAX_LABEL):
        raise DatasetError(f"{where}: labels range over [{arr.min()}, {arr.max()}]; classes are "
                           "0, 1, ... and -1 marks an unlabelled node")
    return arr.astype(np.int64)


def task_labels(value: Any, n: int, where: str) -> np.ndarray:
    """The int8 node×task matrix of a multi-label task (0, 1; -1 where a node has no label for
    a task) from numbers of shape (N, T): 0/1 with -1 or NaN (OGB's float labels) missing."""
    arr = as_array(value, where, "labels")
    if arr.ndim != 2 or arr.shape[0] != n or arr.shape[1] < 1 or arr.dtype.kind not in "biuf":
        raise DatasetError(f"{where}: multi-label labels must be a numeric ({n}, tasks) "
                           f"matrix, got {arr.dtype} {arr.shape}")
    missing = np.isnan(arr) if arr.dtype.kind == "f" else arr == -1
    if arr.dtype.kind == "f":
        missing |= arr == -1
    bad = ~(missing | (arr == 0) | (arr == 1))
    if bad.any():
        i, t = (int(v) for v in np.argwhere(bad)[0])
        raise DatasetError(f"{where}: multi-label labels must be 0, 1 or missing (-1 or NaN), "
                           f"got {arr[i, t]!r} at node {i}, task {t}")
    return np.where(missing, -1, arr).astype(np.int8)


def mask(value: Any, n: int, what: str, where: str) -> np.ndarray:
    """A bool mask of length ``n`` from a bool mask, an array of node indices or None (empty)."""
    if value is None:
        return np.zeros(n, dtype=bool)
    arr = as_array(value, where, f"{what} mask").reshape(-1)
    if arr.dtype == np.bool_:
        if arr.shape != (n,):
            raise DatasetError(f"{where}: {what} mask has {arr.size} entries, expected {n}")
        return arr.copy()
    if arr.size and arr.dtype.kind not in "iu":
        raise DatasetError(f"{where}: {what} must be a bool mask or an array of node indices, "
                           f"got dtype {arr.dtype}")
    if arr.size == n > 2 and np.isin(arr, (0, 1)).all():  # a 0/1 mask read as indices {0, 1}
        raise DatasetError(f"{where}: {what} holds only 0 and 1 in {n} entries: a 0/1 mask? "
                           "give it as bool (mask.astype(bool)) or as node indices")
    if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= n):
        raise DatasetError(f"{where}: {what} indices must lie in [0, {n - 1}], got "
                           f"[{int(arr.min())}, {int(arr.max())}]")
    out = np.zeros(n, dtype=bool)
    out[arr.astype(np.int64)] = True
    return out


def class_count(value: Any, labels_: np.ndarray, n: int, where: str) -> int:
    """The number of classes: ``value``, or one more than the largest label (multi-label: the
    task count, which ``value`` must equal). The logits (N×C float32) must fit in memory."""
    if labels_.ndim == 2:
        if value is not None and value != labels_.shape[1]:
            raise DatasetError(f"{where}: num_classes is {one_line(repr(value))[:40]} but the "
                               f"multi-label labels have {labels_.shape[1]} tasks")
        value = labels_.shape[1]
    if value is None:
        value = int(labels_.max()) + 1 if labels_.size and labels_.max() >= 0 else 1
    if (isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer))
            or value < 1):
        raise DatasetError(f"{where}: num_classes must be a positive integer, got "
                           f"{one_line(repr(value))[:60]}")
    check_alloc(4.0 * max(n, 1) * int(value), where, f"logits for {int(value)} classes")
    return int(value)


def flag(value: Any, where: str, what: str) -> bool:
    """A true bool option (``directed``): 0, "no" or None are not quietly one."""
    if not isinstance(value, (bool, np.bool_)):
        raise DatasetError(f"{where}: {what} must be True or False, got "
                           f"{one_line(repr(value))[:60]}")
    return bool(value)
