"""A graph on disk, read in pieces: a directory of .npy arrays and a small JSON header.

Layout of a graph directory (format ``plexus-graph``, version 1)::

    graph.json      name, num_nodes, num_features, num_classes, directed, the edge form, the
                    feature dtype, every array's dtype, shape and sha256, notes, and
                    content_sha256 (over all of that: a cache key for the graph)
    src.npy dst.npy     edges="coo": edge k goes src[k] -> dst[k] (int32/int64, E each), in any
                        order; repeats count once; an undirected graph may list either direction
                        or both; self loops are dropped (self_loops="drop", every file loader's
                        rule) or kept (self_loops="keep", a graph written from memory as it was)
    indptr.npy indices.npy  edges="csr": the incoming adjacency M, rows = destinations: row i
                        lists the in-neighbours j of i (edge j -> i), sorted, each once; symmetric
                        for an undirected graph; self loops are edges like any other
    features.npy    (N, F) float32, float16, or bfloat16 (stored as its uint16 bits: numpy has
                    no bfloat16; the header names the dtype)
    labels.npy      (N,) integers, -1 = unlabelled
    train.npy valid.npy test.npy    node indices of the split (int32/int64)

Every array is read through memory maps of a window of rows (`plexus_datasets.npyio`), so
readers hold one chunk, never a whole edge list. `DiskGraph.open` checks the header and that
every file is exactly what the header declares (dtype, shape, size: a truncated file or a header
that lies is a one-line `DiskGraphError`); values are checked as they are read (indices in range,
finite features, labels and splits valid). `DiskGraph.verify` re-hashes every array.

Writing one: `plexus_datasets.diskwrite`.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from plexus_datasets.base.values import is_count, one_line

from .files import open_regular
from .errors import MAX_NODES, DatasetError
from .graph import Graph, edges_to_csr
from .npyio import NpyLayout, npy_layout, read_rows
from .validate import check_graph_size, csr_from_parts

FORMAT = "plexus-graph"
VERSION = 1
HEADER = "graph.json"
EDGE_FORMS = ("coo", "csr")
SELF_LOOPS = ("drop", "keep")
#: feature dtype named in the header -> the dtype of features.npy
FEATURE_DTYPES = {"float32": np.dtype("<f4"), "float16": np.dtype("<f2"),
                  "bfloat16": np.dtype("<u2")}
SPLITS = ("train", "valid", "test")
_INDEX_DTYPES = ("int32", "int64")
_LABEL_DTYPES = ("int8", "int16", "int32", "int64")
MAX_HEADER_BYTES = 1 << 20
_HASH_ROWS_BYTES = 1 << 24


class DiskGraphError(DatasetError):
    """A graph directory is missing, damaged, or not what its header says (one line)."""


# --------------------------------------------------------------------------- features


def encode_features(x: np.ndarray, dtype: str) -> np.ndarray:
    """float32 features in the stored form of ``dtype`` (bfloat16: round to nearest even)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    if dtype == "bfloat16":
        bits = x.view(np.uint32)
        rounded = bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
        return (rounded >> np.uint32(16)).astype(np.uint16)
    return x.astype(FEATURE_DTYPES[dtype])


def decode_features(stored: np.ndarray, dtype: str) -> np.ndarray:
    """float32 features from their stored form (exact for every stored dtype)."""
    if dtype == "bfloat16":
        return (stored.astype(np.uint32) << np.uint32(16)).view(np.float32)
    return stored.astype(np.float32)


# --------------------------------------------------------------------------- reading


def _expected_arrays(h: dict) -> dict[str, tuple[tuple[str, ...], tuple[int | None, ...]]]:
    """Array name -> (allowed dtypes, shape with None for a free length) a header requires."""
    n, e, f = h["num_nodes"], h["num_edges"], h["num_features"]
    out: dict[str, tuple[tuple[str, ...], tuple[int | None, ...]]] = {}
    if h["edges"] == "coo":
        out["src"] = out["dst"] = (_INDEX_DTYPES, (e,))
    else:
        out["indptr"] = (_INDEX_DTYPES, (n + 1,))
        out["indices"] = (_INDEX_DTYPES, (e,))
    out["features"] = ((h["feature_dtype"],), (n, f))
    out["labels"] = (_LABEL_DTYPES, (n,))
    for name in SPLITS:
        out[name] = (_INDEX_DTYPES, (None,))
    return out


def header_sha256(header: dict) -> str:
    body = {k: v for k, v in header.items() if k != "content_sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def check_header(h: Any, where: str) -> dict:
    """``h`` once it is a complete, consistent header of this format; `DiskGraphError` (one
    line naming ``where``) otherwise."""
    def bad(what: str) -> DiskGraphError:
        return DiskGraphError(f"{where}: {what}; the graph directory is damaged or not one")

    if not isinstance(h, dict) or h.get("format") != FORMAT:
        raise bad(f"not a {FORMAT} header")
    if h.get("version") != VERSION:
        raise DiskGraphError(f"{where}: format version {h.get('version')!r:.20}, this reader "
                             f"supports {VERSION}; convert the dataset again")
    for key in ("num_nodes", "num_edges", "num_features", "num_classes"):
        if not is_count(h.get(key)):
            raise bad(f"field {key!r} missing or not a non-negative integer")
    if h["num_nodes"] > MAX_NODES:
        raise bad(f"{h['num_nodes']} nodes; at most {MAX_NODES} are supported")
    if h["num_classes"] < 1 or h["num_features"] < 1:
        raise bad("num_classes and num_features must be >= 1")
    if not isinstance(h.get("name"), str) or not isinstance(h.get("directed"), bool):
        raise bad("field 'name' or 'directed' missing or mistyped")
    if h.get("edges") not in EDGE_FORMS or h.get("self_loops") not in SELF_LOOPS:
        raise bad(f"'edges' must be one of {EDGE_FORMS} and 'self_loops' one of {SELF_LOOPS}")
    if not isinstance(h.get("feature_dtype"), str) or h["feature_dtype"] not in FEATURE_DTYPES:
        raise bad(f"feature_dtype must be one of {', '.join(FEATURE_DTYPES)}")
    if (not isinstance(h.get("notes", []), list) or
            not all(isinstance(s, str) for s in h.get("notes", []))):
        raise bad("'notes' must be a list of strings")
    arrays = h.get("arrays")
    if not isinstance(arrays, dict) or set(arrays) != set(_expected_arrays(h)):
        raise bad(f"'arrays' must describe exactly {', '.join(sorted(_expected_arrays(h)))}")
    for name, (dtypes, shape) in _expected_arrays(h).items():
        entry = arrays[name]
        if not (isinstance(entry, dict) and entry.get("dtype") in dtypes
                and isinstance(entry.get("shape"), list) and len(entry["shape"]) == len(shape)
                and all(is_count(s) and (w is None or s == w)
                        for s, w in zip(entry["shape"], shape))
                and isinstance(entry.get("sha256"), str)):
            want = tuple("*" if w is None else w for w in shape)
            raise bad(f"array {name!r} must be {' or '.join(dtypes)} of shape {want}")
    if h.get("content_sha256") != header_sha256(h):
        raise bad("content_sha256 does not match the header (edited by hand?)")
    return h


def _stored_dtype(name: str) -> np.dtype:
    return FEATURE_DTYPES[name] if name in FEATURE_DTYPES else np.dtype(name)


@dataclass
class DiskGraph:
    """An opened, checked graph directory (see the module docstring). Reads go to the files."""

    path: Path
    header: dict
    layouts: dict[str, NpyLayout] = field(repr=False)

    @classmethod
    def open(cls, path: str | os.PathLike) -> "DiskGraph":
        """Open ``path``; `DiskGraphError` unless its header and files agree."""
        path = Path(path).expanduser()
        hfile = path / HEADER
        try:
            with open_regular(hfile, DiskGraphError, "r") as f:  # not a FIFO: no hang
                size = os.fstat(f.fileno()).st_size
                if size > MAX_HEADER_BYTES:
                    raise DiskGraphError(f"{hfile}: {size} bytes, far more than a graph header")
                header = json.loads(f.read())
        except FileNotFoundError:
            raise DiskGraphError(f"{hfile}: missing; {path} is not a {FORMAT} directory "
                                 "(convert a dataset with plexus_datasets.convert)") from None
        except DiskGraphError:
            raise
        except (OSError, ValueError, RecursionError) as e:
            raise DiskGraphError(f"{hfile}: unreadable header ({type(e).__name__}: "
                                 f"{one_line(e)[:200]})") from None
        header = check_header(header, str(hfile))
        layouts = {}
        for name, entry in header["arrays"].items():
            layout = npy_layout(path / f"{name}.npy", DiskGraphError)
            want = _stored_dtype(entry["dtype"])
            if layout.dtype != want or list(layout.shape) != entry["shape"]:
                raise DiskGraphError(f"{path / f'{name}.npy'}: holds {layout.dtype}"
                                     f"{list(layout.shape)}, the header says {entry['dtype']}"
                                     f"{entry['shape']}")
            layouts[name] = layout
        return cls(path, header, layouts)

    # sizes and facts
    name = property(lambda self: self.header["name"])
    num_nodes = property(lambda self: self.header["num_nodes"])
    num_edges = property(lambda self: self.header["num_edges"])
    num_features = property(lambda self: self.header["num_features"])
    num_classes = property(lambda self: self.header["num_classes"])
    directed = property(lambda self: self.header["directed"])
    edges = property(lambda self: self.header["edges"])
    self_loops = property(lambda self: self.header["self_loops"])
    feature_dtype = property(lambda self: self.header["feature_dtype"])
    content_sha256 = property(lambda self: self.header["content_sha256"])

    @property
    def notes(self) -> list[str]:
        return list(self.header.get("notes", []))

    def file(self, name: str) -> Path:
        return self.path / f"{name}.npy"

    def array(self, name: str) -> np.ndarray:
        """A read-only memory map of a whole array (random access; values unchecked)."""
        return np.load(self.file(name), mmap_mode="r", allow_pickle=False)

    def _rows(self, name: str, lo: int, hi: int) -> np.ndarray:
        return read_rows(self.file(name), self.layouts[name], lo, hi)

    def _ids(self, name: str, lo: int, hi: int, limit: int, what: str) -> np.ndarray:
        ids = self._rows(name, lo, hi).astype(np.int64, copy=False)
        if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= limit):
            bad = int(np.flatnonzero((ids < 0) | (ids >= limit))[0]) + lo
            raise DiskGraphError(f"{self.file(name)}: {what} {int(ids[bad - lo])} at position "
                                 f"{bad} is outside [0, {limit - 1}]")
        return ids

    def edge_rows(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        """(src, dst) of edges ``[lo, hi)`` as int64, checked to be node ids (coo only)."""
        n = self.num_nodes
        return (self._ids("src", lo, hi, n, "node id"), self._ids("dst", lo, hi, n, "node id"))

    def indptr(self) -> np.ndarray:
        """The CSR row pointer (csr only; node-sized), checked."""
        ptr = self._rows("indptr", 0, self.num_nodes + 1).astype(np.int64, copy=False)
        if ptr[0] != 0 or ptr[-1] != self.num_edges or (np.diff(ptr) < 0).any():
            raise DiskGraphError(f"{self.file('indptr')}: must run from 0 to {self.num_edges} "
                                 "without decreasing")
        return ptr

    def indices(self, lo: int, hi: int) -> np.ndarray:
        """CSR column indices ``[lo, hi)`` as int64, checked to be node ids (csr only)."""
        return self._ids("indices", lo, hi, self.num_nodes, "node id")

    def feature_rows(self, lo: int, hi: int) -> np.ndarray:
        """float32 features of nodes ``[lo, hi)``, checked finite."""
        x = decode_features(self._rows("features", lo, hi), self.feature_dtype)
        if not np.isfinite(x).all():
            row = int(np.flatnonzero(~np.isfinite(x).all(axis=1))[0]) + lo
            raise DiskGraphError(f"{self.file('features')}: NaN/Inf in the features of node "
                                 f"{row}; clean or impute them before partitioning")
        return x

    def labels(self) -> np.ndarray:
        """int64 labels (node-sized), checked to lie in [-1, num_classes)."""
        y = self._rows("labels", 0, self.num_nodes).astype(np.int64)
        if y.size and (int(y.min()) < -1 or int(y.max()) >= self.num_classes):
            raise DiskGraphError(f"{self.file('labels')}: labels range over [{int(y.min())}, "
                                 f"{int(y.max())}], outside [-1, {self.num_classes - 1}]")
        return y

    def split(self, name: str) -> np.ndarray:
        """The node indices of split ``name`` ("train", "valid", "test"), checked."""
        return self._ids(name, 0, self.layouts[name].rows, self.num_nodes, "node id")

    def masks(self, labels: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(train, val, test) bool masks; every selected node must have a label."""
        labels = self.labels() if labels is None else labels
        out = []
        for name in SPLITS:
            mask = np.zeros(self.num_nodes, dtype=bool)
            mask[self.split(name)] = True
            if (mask & (labels < 0)).any():
                raise DiskGraphError(f"{self.file(name)}: selects nodes that have no label")
            out.append(mask)
        return out[0], out[1], out[2]

    def verify(self) -> None:
        """Re-hash every array (a full read) against the header; `DiskGraphError` on a mismatch."""
        for name, entry in self.header["arrays"].items():
            if file_data_sha256(self.file(name), self.layouts[name]) != entry["sha256"]:
                raise DiskGraphError(f"{self.file(name)}: sha256 differs from the header; the "
                                     "file is corrupt")

    def to_graph(self) -> Graph:
        """The whole graph in memory, as the in-memory loaders build it."""
        n = self.num_nodes
        check_graph_size(str(self.path), n, self.num_edges * (1 if self.directed else 2),
                         self.num_features, DiskGraphError)
        if self.edges == "coo":
            src, dst = self.edge_rows(0, self.num_edges)
            adj = edges_to_csr(src, dst, n, symmetrize=not self.directed,
                               drop_self_loops=self.self_loops == "drop")
            del src, dst
        else:
            m = csr_from_parts(np.ones(self.num_edges, np.float32),
                               self.indices(0, self.num_edges), self.indptr(), (n, n),
                               str(self.path), "incoming adjacency", DiskGraphError)
            coo = m.tocoo()
            # M's rows are destinations: edge col -> row
            adj = edges_to_csr(coo.col, coo.row, n, drop_self_loops=False)
        labels = self.labels()
        masks = self.masks(labels)
        graph = Graph(self.name, adj, self.feature_rows(0, n), labels, masks[0], masks[1],
                      masks[2], self.num_classes, self.directed, self.notes)
        return graph.validate(str(self.path))


def file_data_sha256(path: Path, layout: NpyLayout) -> str:
    """sha256 of an .npy file's data bytes (after its header), read in pieces."""
    h = hashlib.sha256()
    with open_regular(path) as f:
        f.seek(layout.offset)
        while chunk := f.read(_HASH_ROWS_BYTES):
            h.update(chunk)
    return h.hexdigest()


def is_disk_graph(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a directory with a graph header (not checked further)."""
    try:
        hfile = Path(path) / HEADER
        return (hfile.is_file() and hfile.stat().st_size <= MAX_HEADER_BYTES and
            json.loads(hfile.read_text(encoding="utf-8")).get("format") == FORMAT)
    except (OSError, ValueError, AttributeError, RecursionError):
        return False


def load_disk_graph(path: str | os.PathLike) -> Graph:
    """The `Graph` of a graph directory (the ``graph:PATH`` dataset spec)."""
    return DiskGraph.open(path).to_graph()


# --------------------------------------------------------------------------- an in-memory source


class MemoryGraph:
    """A `Graph` seen through `DiskGraph`'s reading methods (edges in coo form with self loops
    kept, as the graph holds them), so that the partitioner reads both alike."""

    edges = "coo"
    self_loops = "keep"
    content_sha256 = None

    def __init__(self, graph: Graph) -> None:
        if graph.weighted:  # the streaming partitioner builds Â from the edges alone
            raise DiskGraphError(f"{graph.name}: the out-of-core partitioner (shard stores) does "
                                 "not carry edge weights yet; train a weighted graph through the "
                                 "Python API (plexus.api), which cuts shards in memory")
        self.graph = graph
        self.name, self.num_nodes = graph.name, graph.num_nodes
        self.num_features, self.num_classes = graph.num_features, graph.num_classes
        self.directed, self.notes = graph.directed, list(graph.notes)
        self._coo = sp.coo_matrix(graph.adj)
        self.num_edges = int(self._coo.nnz)

    def edge_rows(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        return (self._coo.row[lo:hi].astype(np.int64), self._coo.col[lo:hi].astype(np.int64))

    def feature_rows(self, lo: int, hi: int) -> np.ndarray:
        return np.ascontiguousarray(self.graph.features[lo:hi], dtype=np.float32)

    def labels(self) -> np.ndarray:  # multi-label: the int8 node×task matrix as it is
        labels = self.graph.labels
        return labels if labels.ndim == 2 else labels.astype(np.int64, copy=False)

    def masks(self, labels: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        g = self.graph
        return g.train_mask, g.val_mask, g.test_mask
