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

Every array is read through memory maps of a window of rows (`plexus.datasets.npyio`), so
readers hold one chunk, never a whole edge list. `DiskGraph.open` checks the header and that
every file is exactly what the header declares (dtype, shape, size: a truncated file or a header
that lies is a one-line `DiskGraphError`); values are checked as they are read (indices in range,
finite features, labels and splits valid). `DiskGraph.verify` re-hashes every array.

`DiskGraphWriter` writes a directory beside its target and renames it into place when complete,
so an interrupted write never leaves a directory that looks like a graph.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import scipy.sparse as sp

from plexus.core.atomic import replace_directory
from plexus.core.values import is_count, one_line

from .files import open_regular
from .errors import MAX_NODES, DatasetError
from .graph import Graph, edges_to_csr
from .npyio import NpyLayout, NpyWriter, npy_layout, read_rows, save_npy
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


def _check_header(h: Any, where: str) -> dict:
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
    if not isinstance(h.get("notes", []), list) or \
            not all(isinstance(s, str) for s in h.get("notes", [])):
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
                                 "(convert a dataset with plexus.datasets.convert)") from None
        except DiskGraphError:
            raise
        except (OSError, ValueError, RecursionError) as e:
            raise DiskGraphError(f"{hfile}: unreadable header ({type(e).__name__}: "
                                 f"{one_line(e)[:200]})") from None
        header = _check_header(header, str(hfile))
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
        return hfile.is_file() and hfile.stat().st_size <= MAX_HEADER_BYTES and \
            json.loads(hfile.read_text(encoding="utf-8")).get("format") == FORMAT
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


# --------------------------------------------------------------------------- writing


def check_target(out: Path) -> Path:
    """Refuse a target that exists and is neither a graph directory nor an empty directory."""
    if out.exists() or out.is_symlink():
        if not out.is_dir() or out.is_symlink():
            raise DiskGraphError(f"{out}: exists and is not a directory; refusing to replace it")
        if not is_disk_graph(out) and any(out.iterdir()):
            raise DiskGraphError(f"{out}: exists and is not a {FORMAT} directory; refusing to "
                                 "overwrite it")
    return out


class DiskGraphWriter:
    """Writes a graph directory: arrays go into ``staging`` (a hidden directory beside ``out``
    unless given; a given one is kept between attempts so that a rerun can resume), and
    `finish` hashes them, writes the header and renames the directory to ``out``."""

    def __init__(self, out: str | os.PathLike, *, name: str, num_nodes: int, num_features: int,
                 num_classes: int, directed: bool, edges: str = "coo", self_loops: str = "drop",
                 feature_dtype: str = "float32", notes: Sequence[str] = (),
                 staging: str | os.PathLike | None = None) -> None:
        self.out = check_target(Path(out).expanduser())
        if edges not in EDGE_FORMS or self_loops not in SELF_LOOPS:
            raise ValueError(f"edges must be one of {EDGE_FORMS}, self_loops one of {SELF_LOOPS}")
        if feature_dtype not in FEATURE_DTYPES:
            raise DiskGraphError(f"feature dtype {feature_dtype!r}: use one of "
                                 f"{', '.join(FEATURE_DTYPES)}")
        if not 0 <= num_nodes <= MAX_NODES:
            raise DiskGraphError(f"{num_nodes} nodes: a graph has between 0 and {MAX_NODES}")
        self.meta = {"name": name, "num_nodes": int(num_nodes),
                     "num_features": int(num_features), "num_classes": int(num_classes),
                     "directed": bool(directed), "edges": edges, "self_loops": self_loops,
                     "feature_dtype": feature_dtype, "notes": list(notes)}
        self.out.parent.mkdir(parents=True, exist_ok=True)
        if staging is None:
            self.staging = Path(tempfile.mkdtemp(prefix=f".{self.out.name}.partial-",
                                                 dir=self.out.parent))
        else:
            self.staging = Path(staging)
            self.staging.mkdir(parents=True, exist_ok=True)
        self.staging.chmod(0o755)

    def file(self, name: str) -> Path:
        return self.staging / f"{name}.npy"

    def writer(self, name: str, dtype: np.dtype | str, tail: tuple[int, ...] = (),
               rows: int | None = None) -> NpyWriter:
        """A streaming writer of array ``name`` (see `NpyWriter`)."""
        return NpyWriter(self.file(name), dtype, tail, rows)

    def put(self, name: str, arr: np.ndarray) -> None:
        """Write a whole (node-sized) array."""
        save_npy(self.file(name), arr)

    def array_names(self) -> list[str]:
        """The arrays the header lists (written before `finish`)."""
        edges = ["src", "dst"] if self.meta["edges"] == "coo" else ["indptr", "indices"]
        return edges + ["features", "labels", *SPLITS]

    def array_sha256(self, name: str) -> str:
        """sha256 of array ``name``'s data, as the header records it."""
        return file_data_sha256(self.file(name), npy_layout(self.file(name), DiskGraphError))

    def finish(self, notes: Iterable[str] = (),
               hashes: Mapping[str, str] | None = None) -> DiskGraph:
        """Hash the arrays (those not in ``hashes``, name to `array_sha256`, computed before,
        possibly by other processes), write the header, move the directory into place;
        returns it opened."""
        meta = dict(self.meta)
        meta["notes"] = [*meta["notes"], *notes]
        arrays = {}
        names = self.array_names()
        hashes = hashes or {}
        for name in names:
            layout = npy_layout(self.file(name), DiskGraphError)
            dtype = meta["feature_dtype"] if name == "features" else layout.dtype.name
            arrays[name] = {"dtype": dtype, "shape": list(layout.shape),
                            "sha256": hashes.get(name) or
                            file_data_sha256(self.file(name), layout)}
        meta["num_edges"] = arrays["src" if meta["edges"] == "coo" else "indices"]["shape"][0]
        header = {"format": FORMAT, "version": VERSION, **meta, "arrays": arrays}
        header["content_sha256"] = header_sha256(header)
        _check_header(header, str(self.staging / HEADER))
        extra = [p.name for p in self.staging.iterdir() if p.name not in
                 {f"{a}.npy" for a in names}]
        for name in extra:  # scratch files of the converter
            target = self.staging / name
            shutil.rmtree(target) if target.is_dir() else target.unlink()
        with open(self.staging / HEADER, "w", encoding="utf-8") as f:
            f.write(json.dumps(header, indent=2, sort_keys=True) + "\n")
        replace_directory(self.staging, self.out, check_target)
        return DiskGraph.open(self.out)

    def abort(self) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)


def write_graph(graph: Graph, out: str | os.PathLike, feature_dtype: str = "float32",
                chunk_rows: int = 1 << 20) -> DiskGraph:
    """Write an in-memory `Graph` as a graph directory (edges as it holds them: coo, self loops
    kept). Loading it back (`load_disk_graph`) gives the same graph."""
    if graph.multilabel:
        raise DiskGraphError(f"{graph.name}: a graph directory holds one class per node, not "
                             "multi-label (node×task) labels; partition a multi-label graph "
                             "from memory in one process (--jobs 1)")
    coo = sp.coo_matrix(graph.adj)
    w = DiskGraphWriter(out, name=graph.name, num_nodes=graph.num_nodes,
                        num_features=graph.num_features, num_classes=graph.num_classes,
                        directed=graph.directed, edges="coo", self_loops="keep",
                        feature_dtype=feature_dtype, notes=graph.notes)
    try:
        idx = np.int32 if graph.num_nodes < 2**31 else np.int64
        w.put("src", coo.row.astype(idx))
        w.put("dst", coo.col.astype(idx))
        with w.writer("features", FEATURE_DTYPES[feature_dtype], (graph.num_features,)) as fw:
            for lo in range(0, graph.num_nodes, chunk_rows):
                fw.append(encode_features(graph.features[lo:lo + chunk_rows], feature_dtype))
        w.put("labels", graph.labels.astype(np.int64))
        for name, mask in zip(SPLITS, (graph.train_mask, graph.val_mask, graph.test_mask)):
            w.put(name, np.flatnonzero(mask).astype(np.int64))
        return w.finish()
    except BaseException:
        w.abort()
        raise
