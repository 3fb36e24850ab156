"""Graphs in the gnn-benchmark ``.npz`` format (Shchur et al.: Amazon, Coauthor, cora_ml, ...).

Keys: ``adj_data, adj_indices, adj_indptr, adj_shape`` (CSR adjacency, required); features as
``attr_data, attr_indices, attr_indptr, attr_shape`` (CSR) or ``attr_matrix`` (dense); ``labels``
(dense ints, or one-hot CSR as ``labels_data/_indices/_indptr/_shape``); optional ``class_names``.
Optional split: ``train_mask/val_mask/test_mask`` or ``idx_train/idx_val/idx_test``. Anything
missing is filled by `plexus_datasets.synthetic`. The adjacency is symmetrized (GCN training).
The graph is named by its file (``cora.npz``), never by a stem a built-in dataset may share.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import scipy.sparse as sp

from plexus_datasets.base.values import one_line

from .errors import DatasetError
from .graph import Graph, edges_to_csr
from .synthetic import complete_graph, split_note
from .validate import check_alloc, check_graph_size, csr_from_parts, read_npz_member

_CSR_PARTS = ("data", "indices", "indptr", "shape")


def _member(archive, key: str, path: Path) -> np.ndarray:
    return read_npz_member(archive, key, str(path))


def _csr(archive, prefix: str, path: Path) -> sp.csr_matrix | None:
    """The CSR matrix stored as ``<prefix>_{data,indices,indptr,shape}``, or None if absent."""
    keys = [f"{prefix}_{p}" for p in _CSR_PARTS]
    present = [k for k in keys if k in archive]
    if not present:
        return None
    if len(present) != len(keys):
        missing = sorted(set(keys) - set(present))
        raise DatasetError(f"{path}: has {', '.join(present)} but lacks {', '.join(missing)}")
    data, indices, indptr, shape = (_member(archive, k, path) for k in keys)
    return csr_from_parts(data, indices, indptr, shape, str(path), f"{prefix}_*")


def _get(archive, key: str, path: Path, numeric: bool = True) -> np.ndarray | None:
    if key not in archive:
        return None
    arr = _member(archive, key, path)
    if numeric and arr.dtype.kind not in "biuf":
        raise DatasetError(f"{path}: key {key!r} has dtype {arr.dtype}, expected numbers")
    return arr


def load_npz(path: str | Path, seed: int = 0) -> Graph:
    """Load a gnn-benchmark ``.npz`` graph; ``seed`` drives stand-ins for missing parts."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise DatasetError(f"{path}: file not found")
    # We open the file ourselves: np.load leaks its own handle when the zip is unreadable.
    with open(path, "rb") as fh:
        if fh.read(2) != b"PK":  # otherwise np.load falls back to pickle and complains about that
            raise DatasetError(f"{path}: not a .npz (zip) archive")
        fh.seek(0)
        try:
            archive = np.load(fh, allow_pickle=False)
        except Exception as e:  # noqa: BLE001 - BadZipFile, OSError, NotImplementedError (zip
            # versions or compressions zipfile lacks), RuntimeError (encrypted), zlib.error, ...
            raise DatasetError(f"{path}: not a readable .npz archive ({type(e).__name__}: "
                               f"{one_line(e)[:200]})") from None
        if not isinstance(archive, np.lib.npyio.NpzFile):
            raise DatasetError(f"{path}: holds a single array, not a gnn-benchmark .npz archive")
        with archive:
            return _from_archive(archive, path, seed)


def _from_archive(archive, path: Path, seed: int) -> Graph:
    adj = _csr(archive, "adj", path)
    if adj is None:
        raise DatasetError(f"{path}: no adjacency; gnn-benchmark .npz needs adj_data, "
                           "adj_indices, adj_indptr, adj_shape")
    n = adj.shape[0]
    if adj.shape != (n, n):
        raise DatasetError(f"{path}: adj_shape is {adj.shape}, must be square")
    check_graph_size(str(path), n, 2 * adj.nnz, 0)
    coo = adj.tocoo()
    nonzero = coo.data != 0
    adj = edges_to_csr(coo.row[nonzero], coo.col[nonzero], n, symmetrize=True)
    notes = ["adjacency symmetrized, self loops dropped"]

    features = _csr(archive, "attr", path)
    if features is not None:
        check_alloc(4.0 * features.shape[0] * features.shape[1], str(path),
                    f"dense features of shape {features.shape}")
        features = features.toarray()
    else:
        features = _get(archive, "attr_matrix", path)
    if features is not None:
        features = np.asarray(features, dtype=np.float32)
        if features.ndim != 2 or features.shape[0] != n:
            raise DatasetError(f"{path}: features have shape {features.shape}, expected ({n}, F)")

    labels, num_classes = _labels(archive, path, n)
    masks, keys = _split(archive, path, n)
    if masks is not None:  # a stand-in split says so itself (`complete_graph`)
        notes.append(split_note(f"from the file's {'/'.join(keys)}"))
    return complete_graph(path.name, adj, features=features, labels=labels,
                          num_classes=num_classes, masks=masks, seed=seed, notes=notes,
                          source=str(path))


def _labels(archive, path: Path, n: int) -> tuple[np.ndarray | None, int | None]:
    onehot = _csr(archive, "labels", path)
    if onehot is not None:
        if onehot.shape[0] != n:
            raise DatasetError(f"{path}: labels_shape is {onehot.shape}, expected {n} rows")
        # One-hot (or multi-hot: the first class wins) rows; empty rows are unlabelled.
        has = np.diff(onehot.indptr) > 0
        first = np.asarray(onehot.argmax(axis=1)).ravel()
        return np.where(has, first, -1).astype(np.int64), onehot.shape[1]
    raw = _get(archive, "labels", path)
    if raw is None:
        return None, None
    raw = np.asarray(raw)
    if raw.shape != (n,):
        raise DatasetError(f"{path}: labels have shape {raw.shape}, expected ({n},)")
    if raw.dtype.kind == "f":
        if not np.isfinite(raw).all() or (raw != np.round(raw)).any():
            raise DatasetError(f"{path}: labels must be integers (-1 for unlabelled)")
    elif raw.dtype.kind not in "iub":
        raise DatasetError(f"{path}: labels have dtype {raw.dtype}, expected integers")
    labels = raw.astype(np.int64)
    names = _get(archive, "class_names", path, numeric=False)
    num_classes = len(names) if names is not None and np.ndim(names) == 1 else None
    return labels, num_classes


def _split(archive, path: Path, n: int
           ) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray] | None, tuple[str, ...]]:
    """The file's train/val/test masks and the keys they came from; (None, ()) without them."""
    for keys in (("train_mask", "val_mask", "test_mask"), ("idx_train", "idx_val", "idx_test")):
        if not any(k in archive for k in keys):
            continue
        masks = []
        for k in keys:
            arr = _get(archive, k, path)
            if arr is None:
                raise DatasetError(f"{path}: has {keys[0][:5]}* split keys but lacks {k}")
            arr = np.asarray(arr).ravel()
            if k.endswith("_mask"):
                if arr.shape != (n,):
                    raise DatasetError(f"{path}: {k} has {arr.size} entries, expected {n}")
                masks.append(arr.astype(bool))
            else:
                if arr.dtype.kind not in "iu":
                    raise DatasetError(f"{path}: {k} has dtype {arr.dtype}, expected node ids")
                if arr.size and (arr.min() < 0 or arr.max() >= n):
                    raise DatasetError(f"{path}: {k} has node ids outside [0, {n - 1}]")
                mask = np.zeros(n, dtype=bool)
                mask[arr.astype(np.int64)] = True
                masks.append(mask)
        return (masks[0], masks[1], masks[2]), keys
    return None, ()
