"""Checks that run before scipy, numpy or torch touch structures read from a user's file.

scipy's compiled sparse kernels trust their inputs: a decreasing ``indptr`` or an index past the
end is a segfault, not an exception. So every sparse structure read from a file (npz, Matrix
Market, Planetoid pickles, OGB caches, shard-store blocks) is built through `csr_from_parts` or
checked by `check_coo`, the one definition of "valid" here. Sizes a file merely declares (a
shape, a header, a node count) go through `check_alloc` / `check_graph_size` before anything
of that size is allocated, so a lie is a one-line error instead of a MemoryError or the OOM
killer.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import scipy.sparse as sp

from plexus_datasets.base.values import one_line

from .errors import MAX_NODES, DatasetError, ErrorType
from .npyio import read_header


def available_bytes() -> float:
    """The host's available RAM (``MemAvailable``: free plus reclaimable caches)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return float(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return float(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (OSError, ValueError):
        return float("inf")  # unknown: the check cannot judge, the allocation will


def _gib(nbytes: float) -> str:
    return f"{nbytes / 2**30:.1f} GiB" if nbytes >= 2**26 else f"{nbytes / 2**20:.1f} MiB"


def check_alloc(nbytes: float, where: str, what: str, error: ErrorType = DatasetError,
                available: float | None = None) -> None:
    """Raise ``error`` when ``what`` (``nbytes``, as declared by a file) exceeds available RAM."""
    avail = available_bytes() if available is None else available
    if nbytes > avail:
        raise error(f"{where}: {what} would need {_gib(nbytes)} but only {_gib(avail)} of memory "
                    "is available; the input is damaged or the graph too large for this machine")


def graph_bytes(num_nodes: int, nnz: int, num_features: int) -> float:
    """A lower bound on the bytes of a loaded `Graph`: float32 features, CSR adjacency
    (int32 indices and float32 values), int64 labels and three masks."""
    n = float(num_nodes)
    return n * (4.0 * num_features + 8 + 8 + 3) + 8.0 * float(nnz)


def check_graph_size(where: str, num_nodes: Any, nnz: Any, num_features: Any,
                     error: ErrorType = DatasetError) -> int:
    """Refuse a declared graph size before it is allocated; returns ``num_nodes`` as an int.

    Node count, edge count and width must be non-negative integers, the node count at most
    `MAX_NODES`, and the graph must fit in the available memory (`graph_bytes`).
    """
    values = []
    for label, v in (("node count", num_nodes), ("edge count", nnz),
                     ("feature width", num_features)):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or v < 0:
            raise error(f"{where}: {label} must be a non-negative integer, got "
                        f"{one_line(repr(v))[:100]}")
        values.append(int(v))
    n, m, f = values
    if n > MAX_NODES:
        raise error(f"{where}: declares {n} nodes; at most {MAX_NODES} are supported")
    check_alloc(graph_bytes(n, m, f), where, f"a graph of {n} nodes, {m} edges and {f} "
                "features", error)
    return n


def _shape2(shape: Any, where: str, what: str, error: ErrorType) -> tuple[int, int]:
    try:
        arr = np.asarray(shape)
    except Exception:  # noqa: BLE001 - anything odd in a file is just a bad shape
        arr = None
    if arr is None or arr.shape != (2,) or arr.dtype.kind not in "iu":
        raise error(f"{where}: {what} shape must be two integers, got "
                    f"{one_line(repr(shape))[:100]}")
    rows, cols = (int(v) for v in arr)
    if rows < 0 or cols < 0 or rows > 2**62 or cols > 2**62:
        raise error(f"{where}: {what} shape {rows}x{cols} is out of range")
    return rows, cols


def _index_array(arr: Any, where: str, what: str, error: ErrorType) -> np.ndarray:
    if not isinstance(arr, np.ndarray) or arr.ndim != 1 or arr.dtype.kind not in "iu":
        kind = f"{arr.dtype}{arr.shape}" if isinstance(arr, np.ndarray) else type(arr).__name__
        raise error(f"{where}: {what} must be a 1-D integer array, got {kind}")
    return arr


def _index_dtype(*limits: int) -> np.dtype:
    return np.dtype(np.int32) if max(limits) < np.iinfo(np.int32).max else np.dtype(np.int64)


def csr_from_parts(data: Any, indices: Any, indptr: Any, shape: Any, where: str,
                   what: str = "matrix", error: ErrorType = DatasetError) -> sp.csr_matrix:
    """A CSR matrix from its three arrays and shape, after checking that they form one.

    ``indptr`` must have rows + 1 entries, start at 0, never decrease and end at the number of
    ``indices`` (= values); every index must lie in [0, cols); values must be numeric. Raises
    ``error`` (one line naming ``where`` and ``what``) otherwise. Index arrays come back signed,
    as scipy wants them; nothing else is copied.
    """
    rows, cols = _shape2(shape, where, what, error)
    indptr = _index_array(indptr, where, f"{what} indptr", error)
    indices = _index_array(indices, where, f"{what} indices", error)
    if not isinstance(data, np.ndarray) or data.ndim != 1 or data.dtype.kind not in "biuf":
        kind = (f"{data.dtype}{data.shape}" if isinstance(data, np.ndarray) else
            type(data).__name__)
        raise error(f"{where}: {what} values must be a 1-D numeric array, got {kind}")
    if indptr.size != rows + 1:
        raise error(f"{where}: {what} indptr has {indptr.size} entries, expected rows + 1 = "
                    f"{rows + 1}")
    if indices.size != data.size:
        raise error(f"{where}: {what} has {indices.size} indices but {data.size} values")
    if indptr[0] != 0 or int(indptr[-1]) != indices.size:
        raise error(f"{where}: {what} indptr runs from {int(indptr[0])} to {int(indptr[-1])}, "
                    f"expected 0 to {indices.size}")
    if rows and not (indptr[1:] >= indptr[:-1]).all():
        raise error(f"{where}: {what} indptr decreases (row {int(np.argmin(np.diff(indptr)))})")
    if indices.size and (int(indices.min()) < 0 or int(indices.max()) >= cols):
        raise error(f"{where}: {what} column indices range over [{int(indices.min())}, "
                    f"{int(indices.max())}], outside [0, {cols - 1}]")
    idx_t = _index_dtype(rows, cols, indices.size)
    return sp.csr_matrix((data, indices.astype(idx_t, copy=False),
                          indptr.astype(idx_t, copy=False)), shape=(rows, cols), copy=False)


def check_coo(row: Any, col: Any, shape: Any, where: str, what: str = "matrix",
              error: ErrorType = DatasetError) -> tuple[np.ndarray, np.ndarray]:
    """(row, col) of a coordinate-format matrix after checking lengths and ranges."""
    rows, cols = _shape2(shape, where, what, error)
    row = _index_array(row, where, f"{what} row indices", error)
    col = _index_array(col, where, f"{what} column indices", error)
    if row.size != col.size:
        raise error(f"{where}: {what} has {row.size} row but {col.size} column indices")
    for arr, limit, axis in ((row, rows, "row"), (col, cols, "column")):
        if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= limit):
            raise error(f"{where}: {what} {axis} indices range over [{int(arr.min())}, "
                        f"{int(arr.max())}], outside [0, {limit - 1}]")
    return row, col


def sparse_from_pickle(obj: Any, where: str, error: ErrorType = DatasetError) -> sp.csr_matrix:
    """A fresh, checked CSR copy of a scipy sparse matrix that came out of a pickle.

    An unpickled matrix is only its ``__dict__`` as the file wrote it (no constructor ran), so
    its arrays are rebuilt through `csr_from_parts` / `check_coo` rather than trusted.
    """
    state = vars(obj)
    shape = state.get("_shape", state.get("shape"))
    if isinstance(obj, (sp.csr_matrix, sp.csc_matrix)):
        compressed = csr_from_parts(state.get("data"), state.get("indices"),
                                    state.get("indptr"),
                                    shape if isinstance(obj, sp.csr_matrix) else
                                    tuple(reversed(_shape2(shape, where, "matrix", error))),
                                    where, "matrix", error)
        return compressed if isinstance(obj, sp.csr_matrix) else compressed.T.tocsr()
    if isinstance(obj, sp.coo_matrix):
        coords = state.get("coords")
        row, col = (coords if isinstance(coords, tuple) and len(coords) == 2 else
            (state.get("row"), state.get("col")))
        row, col = check_coo(row, col, shape, where, "matrix", error)
        data = state.get("data")
        if (not isinstance(data, np.ndarray) or data.shape != row.shape or
                data.dtype.kind not in "biuf"):
            raise error(f"{where}: matrix values do not match its {row.size} coordinates")
        return sp.csr_matrix((data, (row, col)), shape=_shape2(shape, where, "matrix", error))
    raise error(f"{where}: a {type(obj).__name__} is not a supported sparse matrix type "
                "(expected csr_matrix, csc_matrix or coo_matrix)")


def read_npz_member(archive: np.lib.npyio.NpzFile, key: str, where: str,
                    error: ErrorType = DatasetError) -> np.ndarray:
    """``archive[key]``, once its header's declared size is known to be backed by the file.

    np.load allocates the whole declared array before reading a member, so a header that lies
    about its shape would otherwise be a MemoryError (or a swap storm) rather than an error;
    an uncompressed size beyond the available memory (a zip bomb) is refused too.
    """
    try:
        names = archive.zip.namelist()
        info = archive.zip.getinfo(key + ".npy" if key + ".npy" in names else key)
        check_alloc(float(info.file_size), where, f"key {key!r}", error)

        with archive.zip.open(info) as f:
            layout = read_header(f, where, ValueError)
            shape, dtype = layout.shape, layout.dtype
            declared = layout.nbytes
            if declared > info.file_size:
                raise ValueError(f"declares shape {shape} of {dtype} ({declared} bytes) but "
                                 f"holds {info.file_size} bytes")
        return archive[key]
    except error:
        raise
    except Exception as e:  # noqa: BLE001 - truncated member, object array (no pickles), lie
        raise error(f"{where}: cannot read key {key!r} ({type(e).__name__}: "
                    f"{one_line(e)[:200]})") from None


def _dia_to_csr(matrix: Any, shape: tuple[int, int], where: str, what: str,
                error: ErrorType) -> sp.csr_matrix:
    """A DIA matrix (``A[j - offsets[i], j] = data[i, j]``) as CSR, built with numpy from its
    checked arrays."""
    data, offsets = matrix.data, matrix.offsets
    if not (isinstance(data, np.ndarray) and isinstance(offsets, np.ndarray) and data.ndim == 2
            and offsets.ndim == 1 and offsets.dtype.kind in "iu"
            and data.dtype.kind in "biuf" and len(offsets) == data.shape[0]):
        raise error(f"{where}: {what} diagonals do not match their offsets")
    rows_n, cols_n = shape
    cols = np.arange(min(data.shape[1], cols_n))
    rows_all, cols_all, values = [], [], []
    for i, k in enumerate(offsets.astype(np.int64)):
        rows = cols - k
        keep = (rows >= 0) & (rows < rows_n) & (data[i, :cols.size] != 0)
        rows_all.append(rows[keep])
        cols_all.append(cols[keep])
        values.append(data[i, :cols.size][keep])
    row, col = (np.concatenate([np.zeros(0, np.int64), *rows_all]),
        np.concatenate([np.zeros(0, np.int64), *cols_all]))
    vals = np.concatenate([np.zeros(0, data.dtype), *values])
    return sp.csr_matrix((vals, (row, col)), shape=shape)


def check_sparse(matrix: Any, where: str, what: str = "matrix",
                 error: ErrorType = DatasetError) -> sp.csr_matrix:
    """A CSR matrix from a scipy sparse matrix (or array) a caller handed over, checked like one
    read from a file before any compiled scipy kernel touches it.

    A scipy matrix is only its arrays: nothing stops a caller from setting ``indptr`` or
    ``indices`` to anything, and scipy's kernels then read and write out of bounds (a segfault
    or a corrupted heap, not an exception). CSR, CSC and BSR structures go through
    `csr_from_parts`, COO through `check_coo`; LIL, DOK and DIA matrices are converted in Python
    first (their row lists must match their shape) and the result checked. A valid CSR input
    comes back sharing its arrays.
    """
    if not sp.issparse(matrix):
        raise error(f"{where}: {what} must be a scipy sparse matrix, got "
                    f"{type(matrix).__name__}")
    fmt = getattr(matrix, "format", None)
    shape = _shape2(getattr(matrix, "shape", None), where, what, error)
    if fmt != "csr":  # a conversion allocates index pointers over the rows or the columns
        check_alloc(8.0 * (shape[0] + shape[1] + 2), where, f"a {shape[0]}x{shape[1]} {what}",
                    error)
    try:
        if fmt == "csr":
            return csr_from_parts(matrix.data, matrix.indices, matrix.indptr, shape, where, what,
                                  error)
        if fmt == "csc":  # the same arrays describe the transpose in CSR
            return csr_from_parts(matrix.data, matrix.indices, matrix.indptr, shape[::-1], where,
                                  what, error).T.tocsr()
        if fmt == "coo":
            row, col = check_coo(getattr(matrix, "row", None), getattr(matrix, "col", None),
                                 shape, where, what, error)
            data = matrix.data
            if (not isinstance(data, np.ndarray) or data.shape != row.shape or
                    data.dtype.kind not in "biuf"):
                raise error(f"{where}: {what} values do not match its {row.size} coordinates")
            return sp.csr_matrix((data, (row, col)), shape=shape)
        if fmt == "bsr":
            r, c = matrix.blocksize
            data = matrix.data
            if not (isinstance(data, np.ndarray) and data.ndim == 3 and data.shape[1:] == (r, c)
                    and r > 0 and c > 0 and shape[0] % r == 0 and shape[1] % c == 0):
                raise error(f"{where}: {what} blocks do not match its block size and shape")
            csr_from_parts(np.zeros(len(data), np.float32), matrix.indices, matrix.indptr,
                           (shape[0] // r, shape[1] // c), where, f"{what} block", error)
            return check_sparse(matrix.tocsr(), where, what, error)
        if fmt == "lil":
            rows, values = matrix.rows, matrix.data
            if len(rows) != shape[0] or len(values) != shape[0] or any(
                    not isinstance(a, list) or not isinstance(b, list) or len(a) != len(b)
                    for a, b in zip(rows, values)):
                raise error(f"{where}: {what} row lists do not match its shape {shape}")
            rows_ok = [np.asarray(a) for a in rows if a]
            if rows_ok and (any(a.dtype.kind not in "iu" for a in rows_ok) or
                            min(int(a.min()) for a in rows_ok) < 0 or
                            max(int(a.max()) for a in rows_ok) >= shape[1]):
                raise error(f"{where}: {what} column indices outside [0, {shape[1] - 1}]")
            return check_sparse(matrix.tocsr(), where, what, error)
        if fmt == "dia":  # scipy's compiled conversion trusts offsets and data: do it here
            return _dia_to_csr(matrix, shape, where, what, error)
        if fmt == "dok":  # a dict of entries, converted in Python
            return check_sparse(matrix.tocoo(), where, what, error)
    except error:
        raise
    except (ValueError, TypeError, IndexError, OverflowError, AttributeError) as e:
        raise error(f"{where}: {what} is not a valid {fmt} matrix ({type(e).__name__}: "
                    f"{one_line(e)[:200]})") from None
    raise error(f"{where}: {what} has sparse format {fmt!r}; give a CSR, CSC or COO matrix")
