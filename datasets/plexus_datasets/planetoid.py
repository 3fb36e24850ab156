"""Planetoid citation graphs (Cora, CiteSeer, PubMed) in the raw ``ind.<name>.*`` format.

The files are Python 2 pickles from Yang et al. (2016). The public split and the node order follow
Kipf & Welling's reference code (and PyG's ``Planetoid``): nodes are the ``allx`` rows followed by
the test nodes at the ids listed in ``test.index``; train = the first ``len(y)`` nodes, val = the
next 500, test = the ``test.index`` nodes.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from plexus_datasets.base.values import one_line

from .errors import DatasetError, RootMissing
from .graph import Graph, edges_to_csr, row_normalize
from .safepickle import load_restricted
from .validate import check_alloc, check_graph_size, sparse_from_pickle

PLANETOID_NAMES = ("cora", "citeseer", "pubmed")
EMBEDDED_DIR = Path(__file__).resolve().parent / "data" / "planetoid"
_PYG_DIRS = {"cora": "Cora", "citeseer": "CiteSeer", "pubmed": "PubMed"}
_PICKLED = ("x", "y", "tx", "ty", "allx", "ally", "graph")
_SUFFIXES = _PICKLED + ("test.index",)
NUM_VAL = 500
_ID = re.compile(r"[+-]?[0-9]{1,18}")  # ASCII, and within int64


# Pickles can run arbitrary code: besides numpy data and plain containers (`safepickle`), the
# Planetoid files need scipy's sparse classes (under the module names old scipy wrote; mapping
# them to today's classes also avoids the deprecated ``scipy.sparse.csr`` modules).
_SPARSE = {"csr_matrix": sp.csr_matrix, "csc_matrix": sp.csc_matrix, "coo_matrix": sp.coo_matrix}
_SPARSE_MODULES = ("scipy.sparse", "scipy.sparse.csr", "scipy.sparse.csc", "scipy.sparse.coo",
                   "scipy.sparse._csr", "scipy.sparse._csc", "scipy.sparse._coo")
_PLANETOID_GLOBALS = {(m, n): cls for m in _SPARSE_MODULES for n, cls in _SPARSE.items()}


def _read_pickle(path: Path):
    if not path.is_file():
        raise DatasetError(f"{path}: file not found")
    try:
        with open(path, "rb") as f:
            return load_restricted(f, _PLANETOID_GLOBALS, encoding="latin1")
    except Exception as e:  # truncated, not a pickle, unexpected type, ...
        raise DatasetError(f"{path}: not a readable Planetoid pickle "
                           f"({type(e).__name__}: {one_line(e)})") from None


def _read_index(path: Path) -> np.ndarray:
    if not path.is_file():
        raise DatasetError(f"{path}: file not found")
    ids = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            text = line.strip()
            if not text:
                continue
            if not _ID.fullmatch(text):  # int() would also take "1_0" and non-ASCII digits
                raise DatasetError(f"{path}: line {lineno}: expected one integer node id, "
                                   f"got {text[:40]!r}")
            ids.append(int(text))
    if not ids:
        raise DatasetError(f"{path}: no test node ids")
    return np.asarray(ids, dtype=np.int64)


def _dense(m, path: Path) -> np.ndarray:
    """Rows of a pickled sparse or dense matrix as a 2-D float32 array."""
    if sp.issparse(m):
        m = sparse_from_pickle(m, str(path))  # checked before scipy's kernels see it
        check_alloc(4.0 * m.shape[0] * m.shape[1], str(path),
                    f"a dense {m.shape[0]}x{m.shape[1]} float32 matrix")
    try:
        out = m.toarray() if sp.issparse(m) else np.asarray(m)
        if out.dtype.kind not in "biuf":
            raise TypeError(f"values of dtype {out.dtype}")
        out = out.astype(np.float32, copy=False)
    except (TypeError, ValueError, OverflowError) as e:
        raise DatasetError(f"{path}: expected a numeric matrix ({one_line(e)[:200]})") from None
    if out.ndim != 2:
        raise DatasetError(f"{path}: expected a 2-D matrix, got shape {out.shape}")
    return out


def find_planetoid_dir(name: str, root: str | Path | None) -> Path:
    """Directory holding ``ind.<name>.*``: searched under ``root`` (also PyG's ``<Name>/raw``
    layout), falling back to the copy of Cora embedded in the package."""
    if root is not None:
        root = Path(root).expanduser()
        candidates = [root, root / name, root / name / "raw",
                      root / _PYG_DIRS.get(name, name) / "raw"]
        for d in candidates:
            if (d / f"ind.{name}.x").is_file():
                return d
    if name == "cora":
        return EMBEDDED_DIR
    files = ",".join(_SUFFIXES)
    if root is None:
        raise RootMissing(name, f"the Planetoid files ind.{name}.{{{files}}}")
    raise DatasetError(f"{root}: no ind.{name}.x found there (nor in {name}/, {name}/raw/ "
                       f"or {_PYG_DIRS.get(name, name)}/raw/); expected ind.{name}.{{{files}}}")


def load_planetoid(name_or_path: str, root: str | Path | None = None,
                   row_normalized: bool = True) -> Graph:
    """Load a Planetoid graph by name (``cora``, ``citeseer``, ``pubmed``) or from a path.

    A name is looked up under ``root``; Cora needs no root (a copy ships with the package). A path
    is either a directory holding exactly one ``ind.<name>.*`` set or the prefix ``DIR/ind.<name>``.
    ``row_normalized``: features scaled to sum 1 per node (Kipf & Welling's preprocessing), else
    the files' 0/1 bag of words.
    """
    key = name_or_path.lower()
    if key in PLANETOID_NAMES:
        return read_planetoid(find_planetoid_dir(key, root), key, row_normalized)
    path = Path(name_or_path).expanduser()
    if path.name.startswith("ind.") and path.parent.is_dir():
        return read_planetoid(path.parent, path.name[len("ind."):], row_normalized)
    if not path.is_dir():
        raise DatasetError(f"{path}: not a directory and not one of {', '.join(PLANETOID_NAMES)}")
    names = sorted(p.name[len("ind."):-len(".x")] for p in path.glob("ind.*.x"))
    if len(names) != 1:
        found = (f"several sets ({', '.join(names)}); pass DIR/ind.<name>" if names else
            "no ind.<name>.x file")
        raise DatasetError(f"{path}: {found}")
    return read_planetoid(path, names[0], row_normalized)


def read_planetoid(directory: str | Path, name: str, row_normalized: bool = True) -> Graph:
    """Read ``directory/ind.<name>.*`` into a `Graph` with the public Planetoid split.

    Test ids missing from ``test.index`` but inside its range (CiteSeer's isolated nodes) become
    nodes with zero features and label -1, as in the reference code (which pads them with zeros).
    Nodes whose one-hot label row is all zero also get -1; no mask contains an unlabelled node.
    """
    directory = Path(directory)
    files = {s: directory / f"ind.{name}.{s}" for s in _SUFFIXES}
    data = {s: _read_pickle(files[s]) for s in _PICKLED}
    test_idx = _read_index(files["test.index"])
    m = {s: _dense(data[s], files[s]) for s in ("x", "y", "tx", "ty", "allx", "ally")}
    _check_parts(m, test_idx, files)
    x, y, n_all = m["x"], m["y"], m["allx"].shape[0]
    n = _node_count(test_idx, n_all, x.shape[1] + y.shape[1], files["test.index"])

    # Row k of tx/ty belongs to node test_idx[k]; ids in the range that are not listed (gaps)
    # keep zero features and an all-zero label row.
    features = np.zeros((n, x.shape[1]), dtype=np.float32)
    features[:n_all] = m["allx"]
    features[test_idx] = m["tx"]
    onehot = np.zeros((n, y.shape[1]), dtype=np.float32)
    onehot[:n_all] = m["ally"]
    onehot[test_idx] = m["ty"]
    labels = np.where(onehot.any(axis=1), onehot.argmax(axis=1), -1).astype(np.int64)
    adj = _adjacency(data["graph"], files["graph"], n)

    labelled = labels >= 0
    train = np.zeros(n, dtype=bool)
    train[:y.shape[0]] = True
    val = np.zeros(n, dtype=bool)
    val[y.shape[0]:min(y.shape[0] + NUM_VAL, n_all)] = True
    test = np.zeros(n, dtype=bool)
    test[test_idx] = True

    notes = _notes(n - n_all - test_idx.size, labelled, (train, val, test),
                   directory.resolve() == EMBEDDED_DIR)
    # Kipf & Welling's preprocessing: bag-of-words rows scaled to sum 1 (worth ~2 points on Cora)
    if row_normalized:
        features = row_normalize(features)
        notes.append("features row-normalized (sum 1 per node), as Kipf & Welling")

    graph = Graph(name=name, adj=adj, features=features, labels=labels,
                  train_mask=train & labelled, val_mask=val & labelled,
                  test_mask=test & labelled, num_classes=y.shape[1], directed=False, notes=notes)
    return graph.validate(str(directory / f"ind.{name}"))


def _check_parts(m: dict[str, np.ndarray], test_idx: np.ndarray, files: dict[str, Path]) -> None:
    """The pickled parts agree: rows of features and labels pair up, tx has a row per listed
    test node, every part has x's feature and y's label columns."""
    for a, b in (("x", "y"), ("tx", "ty"), ("allx", "ally")):
        if m[a].shape[0] != m[b].shape[0]:
            raise DatasetError(f"{files[a]}: {m[a].shape[0]} rows but {files[b].name} has "
                               f"{m[b].shape[0]}")
    if m["tx"].shape[0] != test_idx.size:
        raise DatasetError(f"{files['test.index']}: lists {test_idx.size} nodes but "
                           f"{files['tx'].name} has {m['tx'].shape[0]} rows")
    for s in ("tx", "allx"):
        if m[s].shape[1] != m["x"].shape[1]:
            raise DatasetError(f"{files[s]}: {m[s].shape[1]} feature columns, x has "
                               f"{m['x'].shape[1]}")
    for s in ("ty", "ally"):
        if m[s].shape[1] != m["y"].shape[1]:
            raise DatasetError(f"{files[s]}: {m[s].shape[1]} label columns, y has "
                               f"{m['y'].shape[1]}")


def _node_count(test_idx: np.ndarray, n_all: int, width: int, index_file: Path) -> int:
    """The node count the largest test id fixes, checked (test ids after allx's rows, none
    repeated) and to fit in memory before any (N, F) array is allocated."""
    if test_idx.min() < n_all:
        raise DatasetError(f"{index_file}: test node {int(test_idx.min())} collides "
                           f"with the {n_all} allx rows (test ids must be >= {n_all})")
    if np.unique(test_idx).size != test_idx.size:
        raise DatasetError(f"{index_file}: repeated node ids")
    n = int(test_idx.max()) + 1
    check_graph_size(str(index_file), n, 0, width)
    return n


def _adjacency(adjlist: Any, path: Path, n: int) -> sp.csr_matrix:
    """The symmetric adjacency of the pickled adjacency lists, its node ids checked."""
    src, dst = _graph_edges(adjlist, path)
    if src.size and max(int(src.max()), int(dst.max())) >= n:
        raise DatasetError(f"{path}: refers to node {max(int(src.max()), int(dst.max()))}"
                           f" but the feature files cover only {n} nodes")
    if src.size and min(int(src.min()), int(dst.min())) < 0:
        raise DatasetError(f"{path}: negative node id")
    return edges_to_csr(src, dst, n, symmetrize=True)


def _notes(gaps: int, labelled: np.ndarray, masks: tuple[np.ndarray, ...],
           embedded: bool) -> list[str]:
    """What reading changed: isolated test ids filled in, unlabelled nodes, masks trimmed."""
    notes = []
    if gaps:
        notes.append(f"{gaps} node ids missing from test.index (isolated nodes) get zero "
                     "features and label -1")
    unlabelled = int((~labelled).sum()) - gaps
    if unlabelled:
        notes.append(f"{unlabelled} nodes with an all-zero one-hot label get label -1")
    dropped = [int((m & ~labelled).sum()) for m in masks]
    if any(dropped):
        notes.append("unlabelled nodes removed from train/val/test: "
                     f"{dropped[0]}/{dropped[1]}/{dropped[2]}")
    if embedded:
        notes.append("Planetoid files from the copy embedded in plexus_datasets")
    return notes


def _graph_edges(adjlist, path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(src, dst) arrays from the pickled ``{node: [neighbours]}`` dict."""
    if not isinstance(adjlist, dict):
        raise DatasetError(f"{path}: expected a dict of adjacency lists, got "
                           f"{type(adjlist).__name__}")
    try:
        keys = np.fromiter(adjlist.keys(), dtype=np.int64, count=len(adjlist))
        counts = np.fromiter((len(v) for v in adjlist.values()), dtype=np.int64,
                             count=len(adjlist))
        dst = np.fromiter((int(u) for v in adjlist.values() for u in v), dtype=np.int64,
                          count=int(counts.sum()))
    except (TypeError, ValueError, OverflowError) as e:
        raise DatasetError(f"{path}: adjacency lists must hold integer node ids "
                           f"({one_line(e)})") from None
    return np.repeat(keys, counts), dst
