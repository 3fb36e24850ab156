"""OGB node datasets converted from their raw files to a graph directory, in pieces.

ogb itself loads a whole dataset into memory (and papers100M's processed cache is a pickle of
all of it). This reads the raw files as ogb lays them out (per ogb's ``master.csv``, located
without importing ogb, so without torch):

- binary datasets (ogbn-papers100M): ``raw/data.npz`` with ``edge_index`` (2 x E, row 0 the
  sources), ``node_feat`` (N x F, float16 in papers100M), ``num_nodes_list``/``num_edges_list``
  (and ``node_year``, not needed), and ``raw/node-label.npz`` with ``node_label`` (N x 1 floats,
  NaN = unlabelled). The members' .npy payloads are streamed in pieces whether the archive stores
  or deflates them;
- csv datasets (ogbn-arxiv, ogbn-products): ``raw/edge.csv.gz``, ``raw/node-feat.csv.gz`` (read
  in chunks of rows), ``raw/num-node-list.csv.gz``, ``raw/num-edge-list.csv.gz``,
  ``raw/node-label.csv.gz``;
- the split: ``split/<name>/{train,valid,test}.csv.gz`` (or ogb's ``split_dict.pt``, read
  without running code).

Edges are kept as coo (``add_inverse_edge`` datasets are undirected; the citation graphs stay
directed), self loops dropped; loading the result gives the graph `load_ogb` gives. Memory: one
chunk of edges, feature rows or labels, plus the split's indices.
"""

from __future__ import annotations

import csv
import gzip
import importlib.util
from pathlib import Path
from typing import Iterator

import numpy as np

from .diskgraph import DiskGraph, DiskGraphWriter, encode_features
from .graph import MAX_NODES, DatasetError, one_line
from .npyio import NpyStream
from .safepickle import load_torch_numpy
from .synthetic import DEFAULT_FEATURES, rng_for

SPLITS = (("train", "train"), ("valid", "valid"), ("test", "test"))
CHUNK_ROWS = 1 << 22


def master_meta(name: str) -> dict[str, str]:
    """The column of ogb's ``master.csv`` for ``name`` (case-insensitive), read as text."""
    spec = importlib.util.find_spec("ogb")
    if spec is None or not spec.submodule_search_locations:
        raise DatasetError(f"{name}: the ogb package is not installed (pip install ogb)")
    path = Path(list(spec.submodule_search_locations)[0]) / "nodeproppred" / "master.csv"
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    header = rows[0]
    for col, column in enumerate(header):
        if col and column.lower() == name.lower():
            meta = {row[0]: row[col] for row in rows[1:] if len(row) > col}
            meta["name"] = column
            return meta
    raise DatasetError(f"{name}: not an OGB node dataset; known: {', '.join(header[1:])}")


def _csv_chunks(path: Path, rows: int, dtype: type) -> Iterator[np.ndarray]:
    """Chunks of a headerless numeric csv(.gz) as 2-D arrays, parsed by pandas as ogb does."""
    import pandas as pd  # noqa: PLC0415 - only the csv datasets need it

    try:
        with gzip.open(path, "rb") as f:
            if not f.read(1):
                return  # an empty file: no rows (pandas refuses to parse it)
        for frame in pd.read_csv(path, compression="gzip", header=None, chunksize=rows):
            values = frame.values
            if values.dtype.kind not in "iuf":
                raise ValueError(f"non-numeric values ({values.dtype})")
            yield values.astype(dtype) if dtype is not None else values
    except (OSError, ValueError, EOFError, UnicodeDecodeError, pd.errors.ParserError,
            pd.errors.EmptyDataError) as e:
        raise DatasetError(f"{path}: not a readable csv.gz of numbers ({type(e).__name__}: "
                           f"{one_line(e)[:200]})") from None


def _csv_column(path: Path) -> np.ndarray:
    """A whole one-column csv.gz (node-sized at most)."""
    parts = [c[:, 0] for c in _csv_chunks(path, CHUNK_ROWS, None)]
    return np.concatenate(parts) if parts else np.zeros(0)


def _require(path: Path, what: str) -> Path:
    if not path.is_file():
        raise DatasetError(f"{path}: missing ({what}); the raw files of the dataset are needed "
                           "to convert it in pieces")
    return path


def _count(values: np.ndarray, path: Path, what: str) -> int:
    if values.size != 1 or values.dtype.kind not in "iuf" or float(values[0]) != int(values[0]) \
            or not 0 <= int(values[0]) <= MAX_NODES * 64:
        raise DatasetError(f"{path}: {what} must be one non-negative integer (one graph), got "
                           f"{one_line(values.tolist())[:80]}")
    return int(values[0])


def _labels(raw: np.ndarray, path: Path) -> np.ndarray:
    """int32 labels of a chunk, -1 for NaN, as `load_ogb` maps them."""
    if raw.dtype.kind not in "iuf":
        raise DatasetError(f"{path}: labels are {raw.dtype}, expected numbers")
    y = raw.astype(np.float64).reshape(-1)
    bad = ~np.isnan(y) & ((y < -1) | (y >= 2**31) | (y != np.floor(y)))
    if bad.any():
        raise DatasetError(f"{path}: label {y[bad][0]!r} is not a class id")
    return np.where(np.isnan(y), -1, np.nan_to_num(y, nan=-1.0)).astype(np.int32)


def _split(ds: Path, split: str) -> dict[str, np.ndarray]:
    folder = ds / "split" / split
    if all((folder / f"{p}.csv.gz").is_file() for p, _ in SPLITS):
        return {p: _csv_column(folder / f"{p}.csv.gz").astype(np.int64) for p, _ in SPLITS}
    pt = folder / "split_dict.pt"
    if pt.is_file():
        try:
            loaded = load_torch_numpy(pt)
        except Exception as e:  # noqa: BLE001 - refused type, damaged zip
            raise DatasetError(f"{pt}: not a readable ogb split ({type(e).__name__}: "
                               f"{one_line(e)[:200]})") from None
        if not isinstance(loaded, dict) or not all(
                isinstance(loaded.get(p), np.ndarray) and loaded[p].dtype.kind in "iu"
                for p, _ in SPLITS):
            raise DatasetError(f"{pt}: does not hold train/valid/test index arrays")
        return {p: loaded[p].astype(np.int64).reshape(-1) for p, _ in SPLITS}
    raise DatasetError(f"{folder}: missing train.csv.gz, valid.csv.gz, test.csv.gz (or "
                       "split_dict.pt)")


def ogb_to_disk(name: str, root: str | Path, out: str | Path, *, chunk_edges: int = CHUNK_ROWS,
                feature_dtype: str | None = None) -> DiskGraph:
    """Convert OGB node dataset ``name`` under ``root`` (``root/ogbn_<name>/raw/...``) into the
    graph directory ``out``. ``feature_dtype`` (float32, float16, bfloat16): how features are
    stored; by default as the raw files hold them (float16 stays float16)."""
    meta = master_meta(name)
    name = meta["name"]
    if meta.get("is hetero") == "True" or meta.get("task type") != "multiclass classification":
        raise DatasetError(f"{name}: not supported (needs a homogeneous, single-task multiclass "
                           "graph)")
    ds = Path(root).expanduser() / name.replace("-", "_")
    if not ds.is_dir():
        raise DatasetError(f"{ds}: OGB dataset directory not found (download {meta['url']}, "
                           f"unzip it in {root} and rename {meta['download_name']}/ to "
                           f"{ds.name}/)")
    raw = ds / "raw"
    directed = meta["add_inverse_edge"] != "True"
    if meta["binary"] == "True":
        reader = _BinaryRaw(raw)
    else:
        reader = _CsvRaw(raw, meta["has_node_attr"] == "True")
    n, e = reader.sizes()
    split = _split(ds, meta["split"])
    fdtype = feature_dtype or reader.feature_dtype()
    width = reader.width or DEFAULT_FEATURES
    w = DiskGraphWriter(out, name=name, num_nodes=n, num_features=width,
                        num_classes=int(meta["num classes"]), directed=directed, edges="coo",
                        self_loops="drop", feature_dtype=fdtype)
    try:
        idx = np.int32 if n < 2**31 else np.int64
        with w.writer("src", idx) as ws, w.writer("dst", idx) as wd:
            for src, dst in reader.edges(e, chunk_edges):
                for arr in (src, dst):
                    if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= n):
                        raise DatasetError(f"{raw}: edges name node ids outside [0, {n - 1}]")
                ws.append(src)
                wd.append(dst)
        if ws.rows != e:
            raise DatasetError(f"{raw}: {ws.rows} edges, the edge count says {e}")
        with w.writer("features", _stored(fdtype), (width,)) as wf:
            for block in reader.features(n, width):
                wf.append(block if block.dtype == _stored(fdtype) else
                          encode_features(block, fdtype))
        if wf.rows != n:
            raise DatasetError(f"{raw}: features for {wf.rows} nodes, expected {n}")
        unlabelled = 0
        with w.writer("labels", np.int32) as wl:
            for chunk in reader.labels(chunk_edges):
                wl.append(chunk)
                unlabelled += int((chunk < 0).sum())
        if wl.rows != n:
            raise DatasetError(f"{reader.label_path}: {wl.rows} labels for {n} nodes")
        for part, _ in SPLITS:
            idx_arr = split[part]
            if idx_arr.size and (idx_arr.min() < 0 or idx_arr.max() >= n):
                raise DatasetError(f"{ds}: split '{part}' has node ids outside [0, {n - 1}]")
            w.put(part, idx_arr)
        notes = []
        if reader.width is None:
            notes.append(f"no node_feat in the files: features are seeded random, "
                         f"{DEFAULT_FEATURES} dims")
        if unlabelled:
            notes.append(f"{unlabelled} nodes have no label (NaN in ogb) -> -1")
        notes.append(f"official OGB split '{meta['split']}'")
        graph = w.finish(notes)
    except BaseException:
        w.abort()
        raise
    graph.masks()  # every split node must have a label, as load_ogb requires
    return graph


def _stored(dtype: str) -> np.dtype:
    from .diskgraph import FEATURE_DTYPES  # noqa: PLC0415

    return FEATURE_DTYPES[dtype]


class _BinaryRaw:
    """``raw/data.npz`` and ``raw/node-label.npz`` (papers100M)."""

    def __init__(self, raw: Path) -> None:
        self.data = _require(raw / "data.npz", "graph arrays")
        self.label_file = _require(raw / "node-label.npz", "labels")
        with NpyStream(self.data, "node_feat.npy") as feat:
            shape, self.dtype = feat.layout.shape, feat.layout.dtype
        if len(shape) != 2 or self.dtype.kind != "f" or feat.layout.fortran:
            raise DatasetError(f"{self.data}: node_feat must be a C-order float matrix, got "
                               f"{self.dtype}{shape}")
        self.width, self.rows = shape[1], shape[0]

    def _whole(self, member: str) -> np.ndarray:
        with NpyStream(self.data, member) as s:
            return s.read(s.remaining)

    def sizes(self) -> tuple[int, int]:
        n = _count(self._whole("num_nodes_list.npy"), self.data, "num_nodes_list")
        e = _count(self._whole("num_edges_list.npy"), self.data, "num_edges_list")
        if n > MAX_NODES:
            raise DatasetError(f"{self.data}: {n} nodes; at most {MAX_NODES} are supported")
        return n, e

    def edges(self, e: int, chunk: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        with NpyStream(self.data, "edge_index.npy") as s:
            lay = s.layout
            if lay.shape != (2, e) or lay.dtype.kind not in "iu":
                raise DatasetError(f"{self.data}: edge_index is {lay.dtype}{lay.shape}, expected "
                                   f"integers of shape (2, {e})")
            if lay.fortran:  # (src, dst) pairs side by side
                for pairs in s.chunks(2 * e, 2 * chunk):
                    yield pairs[0::2], pairs[1::2]
                return
            # C order: every source, then every destination: two sequential passes
            with NpyStream(self.data, "edge_index.npy") as d:
                d.read(e)
                for src in s.chunks(e, chunk):
                    yield src, d.read(src.size)

    def feature_dtype(self) -> str:
        return {"float16": "float16"}.get(self.dtype.name, "float32")

    def features(self, n: int, width: int) -> Iterator[np.ndarray]:
        if self.rows != n:
            raise DatasetError(f"{self.data}: node_feat has {self.rows} rows for {n} nodes")
        rows = max(1, (64 << 20) // (width * self.dtype.itemsize))
        with NpyStream(self.data, "node_feat.npy") as s:
            for flat in s.chunks(n * width, rows * width):
                block = flat.reshape(-1, width)
                yield block if self.dtype in (np.float16, np.float32) else \
                    block.astype(np.float32)

    @property
    def label_path(self) -> Path:
        return self.label_file

    def labels(self, chunk: int) -> Iterator[np.ndarray]:
        with NpyStream(self.label_file, "node_label.npy") as s:
            for raw in s.chunks(s.remaining, chunk):
                yield _labels(raw, self.label_file)


class _CsvRaw:
    """``raw/*.csv.gz`` (arxiv, products)."""

    def __init__(self, raw: Path, has_features: bool) -> None:
        self.raw = raw
        self.edge_file = _require(raw / "edge.csv.gz", "edges")
        self.feat_file = _require(raw / "node-feat.csv.gz", "features") if has_features else None
        self.width = None
        if self.feat_file is not None:
            with gzip.open(self.feat_file, "rt") as f:
                self.width = len(f.readline().split(","))

    def sizes(self) -> tuple[int, int]:
        n_file = _require(self.raw / "num-node-list.csv.gz", "node count")
        e_file = _require(self.raw / "num-edge-list.csv.gz", "edge count")
        return (_count(_csv_column(n_file), n_file, "num-node-list"),
                _count(_csv_column(e_file), e_file, "num-edge-list"))

    def edges(self, e: int, chunk: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for block in _csv_chunks(self.edge_file, chunk, None):
            if block.shape[1] != 2 or block.dtype.kind not in "iu":
                raise DatasetError(f"{self.edge_file}: rows must be two integer node ids")
            yield block[:, 0].astype(np.int64), block[:, 1].astype(np.int64)

    def feature_dtype(self) -> str:
        return "float32"

    def features(self, n: int, width: int) -> Iterator[np.ndarray]:
        if self.feat_file is None:  # random stand-ins, the stream `random_features` draws
            rng = rng_for(0, 1)
            for lo in range(0, n, CHUNK_ROWS):
                yield rng.standard_normal((min(CHUNK_ROWS, n - lo), width), dtype=np.float32)
            return
        rows = max(1, (64 << 20) // (8 * width))
        for block in _csv_chunks(self.feat_file, rows, None):
            if block.shape[1] != width:
                raise DatasetError(f"{self.feat_file}: rows of {block.shape[1]} values, the "
                                   f"first has {width}")
            # ogb parses floats to float64 and casts: the same values
            yield block.astype(np.float32) if block.dtype.kind == "f" else \
                block.astype(np.float32)

    @property
    def label_path(self) -> Path:
        return _require(self.raw / "node-label.csv.gz", "labels")

    def labels(self, chunk: int) -> Iterator[np.ndarray]:
        for block in _csv_chunks(self.label_path, chunk, None):
            yield _labels(block[:, 0], self.label_path)
