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
import io
import zlib
from pathlib import Path
from typing import IO, Iterator

import numpy as np

from plexus_datasets.base.values import one_line

from .diskgraph import DiskGraph, encode_features
from .diskwrite import DiskGraphWriter
from .files import open_regular
from .errors import MAX_NODES, DatasetError
from .npyio import NpyStream
from .safepickle import load_torch_numpy
from .synthetic import DEFAULT_FEATURES, rng_for

SPLITS = (("train", "train"), ("valid", "valid"), ("test", "test"))
CHUNK_ROWS = 1 << 22
MAX_COUNT_VALUES = 16  # num_nodes_list / num_edges_list: one value per graph


def master_meta(name: str, task: str = "nodeproppred") -> dict[str, str]:
    """The column of ``ogb.<task>``'s ``master.csv`` for ``name`` (case-insensitive), as text."""
    spec = importlib.util.find_spec("ogb")
    if spec is None or not spec.submodule_search_locations:
        raise DatasetError(f"{name}: the ogb package is not installed (pip install ogb)")
    path = Path(list(spec.submodule_search_locations)[0]) / task / "master.csv"
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    header = rows[0]
    for col, column in enumerate(header):
        if col and column.lower() == name.lower():
            meta = {row[0]: row[col] for row in rows[1:] if len(row) > col}
            meta["name"] = column
            return meta
    raise DatasetError(f"{name}: not an OGB {'link' if task == 'linkproppred' else 'node'} "
                       f"dataset; known: {', '.join(header[1:])}")


#: The most values one csv line may hold (OGB's widest node features have 128): pandas makes a
#: column object per value, so a line of a million values takes gigabytes before any check
MAX_CSV_VALUES = 4096
#: The longest csv line read (64 bytes per value is far more than any number takes)
MAX_CSV_LINE = 64 * MAX_CSV_VALUES


class _BoundedLines(io.RawIOBase):
    """A decompressed stream that raises `DatasetError` as soon as a line runs past
    `MAX_CSV_LINE` bytes, before pandas buffers it (a few kB of gzip can hold a line of
    gigabytes)."""

    def __init__(self, f: IO[bytes], path: Path) -> None:
        self.f, self.path, self.run = f, path, 0  # run: bytes of the line still open

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:  # noqa: ANN001 - a writable buffer
        n = self.f.readinto(b)
        if n:
            ends = np.flatnonzero(np.frombuffer(b, np.uint8, n) == 10)
            if ends.size:
                longest = max(self.run + int(ends[0]),
                              int(np.diff(ends).max()) if ends.size > 1 else 0)
                self.run = n - 1 - int(ends[-1])
            else:
                longest = self.run = self.run + n
            if max(longest, self.run) > MAX_CSV_LINE:
                raise DatasetError(f"{self.path}: a line longer than {MAX_CSV_LINE} bytes; at "
                                   f"most {MAX_CSV_VALUES} values per line are read")
        return n


def check_csv_lines(path: Path, max_lines: int | None = None) -> None:
    """Read the csv.gz ``path`` through once, refusing a line past `MAX_CSV_LINE` bytes, lines
    of different lengths (ragged) and more than ``max_lines`` lines (for readers that hand the whole
    file to pandas, as ogb does: a few kB of gzip can hold millions of lines)."""
    lines, width, carry = 0, None, 0  # carry: commas of the line still open
    try:
        with open_regular(path) as raw, gzip.open(raw, "rb") as gz:
            bounded = _BoundedLines(gz, path)
            buf = bytearray(1 << 20)
            while n := bounded.readinto(buf):
                view = np.frombuffer(buf, np.uint8, n)
                ends = np.flatnonzero(view == 10)
                commas = np.cumsum(view == 44)
                per_line = np.diff(commas[ends], prepend=0)
                if ends.size:  # a short row would reach pandas as NaN: name it here
                    per_line[0] += carry
                    width = int(per_line[0]) if width is None else width
                    bad = np.flatnonzero(per_line != width)
                    if bad.size:
                        raise DatasetError(f"{path}: line {lines + int(bad[0]) + 1} has "
                                           f"{int(per_line[bad[0]]) + 1} values, the first "
                                           f"{width + 1}: ragged rows")
                    carry = int(commas[-1] - commas[ends[-1]])
                else:
                    carry += int(commas[-1])
                lines += ends.size
                if max_lines is not None and lines > max_lines:
                    raise DatasetError(f"{path}: more than {max_lines} lines")
    except (OSError, EOFError, zlib.error) as e:
        raise DatasetError(f"{path}: not a readable csv.gz ({e})") from None


def csv_count(path: Path, what: str) -> int:
    """The one count a ``num-*-list.csv.gz`` file holds (of one graph)."""
    return _count(_csv_column(path, MAX_COUNT_VALUES), path, what)


def _csv_chunks(path: Path, rows: int, dtype: type) -> Iterator[np.ndarray]:
    """Chunks of a headerless numeric csv(.gz) as 2-D arrays, parsed by pandas as ogb does
    (`MAX_CSV_LINE` bytes a line at most). Missing values are refused, naming the row: a short
    row would otherwise read as NaN."""
    import pandas as pd  # noqa: PLC0415 - only the csv datasets need it

    try:
        with open_regular(path) as raw:
            with gzip.open(raw, "rb") as f:
                if not f.read(1):
                    return  # an empty file: no rows (pandas refuses to parse it)
        with (open_regular(path) as raw, gzip.open(raw, "rb") as gz,
                io.BufferedReader(_BoundedLines(gz, path)) as f):
            seen = 0
            for frame in pd.read_csv(f, header=None, chunksize=rows, na_filter=False):
                values = frame.values
                if values.dtype.kind not in "iuf":
                    empty = (frame.astype(str) == "").to_numpy()
                    if empty.any():
                        row = seen + int(np.flatnonzero(empty.any(axis=1))[0]) + 1
                        raise DatasetError(f"{path}: line {row} has fewer values than the "
                                           f"first ({values.shape[1]}): ragged rows")
                    raise ValueError(f"non-numeric values ({values.dtype})")
                seen += len(values)
                yield values.astype(dtype) if dtype is not None else values
    except DatasetError:
        raise
    except (OSError, ValueError, EOFError, UnicodeDecodeError, zlib.error,
            pd.errors.ParserError, pd.errors.EmptyDataError) as e:
        raise DatasetError(f"{path}: not a readable csv.gz of numbers ({type(e).__name__}: "
                           f"{one_line(e)[:200]})") from None


def _csv_column(path: Path, max_rows: int) -> np.ndarray:
    """A whole one-column csv.gz of at most ``max_rows`` rows (refused as soon as it has
    more, before they are all held)."""
    parts, held = [], 0
    for c in _csv_chunks(path, min(CHUNK_ROWS, max_rows + 1), None):
        held += len(c)
        if held > max_rows:
            raise DatasetError(f"{path}: more than {max_rows} rows")
        parts.append(c[:, 0])
    return np.concatenate(parts) if parts else np.zeros(0)


def _require(path: Path, what: str) -> Path:
    if not path.is_file():
        raise DatasetError(f"{path}: missing ({what}); the raw files of the dataset are needed "
                           "to convert it in pieces")
    return path


def _count(values: np.ndarray, path: Path, what: str) -> int:
    if (values.size != 1 or values.dtype.kind not in "iuf" or float(values[0]) != int(values[0])
            or not 0 <= int(values[0]) <= MAX_NODES * 64):
        raise DatasetError(f"{path}: {what} must be one non-negative integer (one graph), got "
                           f"{values.size} values starting {one_line(values[:4].tolist())[:80]}")
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


def _split(ds: Path, split: str, n: int) -> dict[str, np.ndarray]:
    """The split's train/valid/test node ids (each at most ``n``: one per node)."""
    folder = ds / "split" / split
    if all((folder / f"{p}.csv.gz").is_file() for p, _ in SPLITS):
        return {p: _csv_column(folder / f"{p}.csv.gz", n).astype(np.int64) for p, _ in SPLITS}
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
    split = _split(ds, meta["split"], n)
    fdtype = feature_dtype or reader.feature_dtype()
    width = reader.width or DEFAULT_FEATURES
    w = DiskGraphWriter(out, name=name, num_nodes=n, num_features=width,
                        num_classes=int(meta["num classes"]), directed=directed, edges="coo",
                        self_loops="drop", feature_dtype=fdtype)
    try:
        idx = np.int32 if n < 2**31 else np.int64
        with w.writer("src", idx) as ws, w.writer("dst", idx) as wd:
            for src, dst in reader.edges(e, min(chunk_edges, e + 1)):
                for arr in (src, dst):
                    if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= n):
                        raise DatasetError(f"{raw}: edges name node ids outside [0, {n - 1}]")
                if ws.rows + src.size > e:  # stop before writing more than declared
                    raise DatasetError(f"{raw}: more than the {e} edges the edge count says")
                ws.append(src)
                wd.append(dst)
        if ws.rows != e:
            raise DatasetError(f"{raw}: {ws.rows} edges, the edge count says {e}")
        with w.writer("features", _stored(fdtype), (width,)) as wf:
            for block in reader.features(n, width):
                if wf.rows + len(block) > n:
                    raise DatasetError(f"{raw}: features for more than {n} nodes")
                wf.append(block if block.dtype == _stored(fdtype) else
                          encode_features(block, fdtype))
        if wf.rows != n:
            raise DatasetError(f"{raw}: features for {wf.rows} nodes, expected {n}")
        unlabelled = 0
        with w.writer("labels", np.int32) as wl:
            for chunk in reader.labels(min(chunk_edges, n + 1)):
                if wl.rows + chunk.size > n:  # nothing past the node count reaches the disk
                    raise DatasetError(f"{reader.label_path}: more than {n} labels for {n} "
                                       "nodes")
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
        """A count member (one per graph: one value), refused before reading more than a few."""
        with NpyStream(self.data, member) as s:
            if s.remaining > MAX_COUNT_VALUES:
                raise DatasetError(f"{self.data}:{member}: declares {s.remaining} values; a "
                                   "count of one graph has one")
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
                yield (block if self.dtype in (np.float16, np.float32) else
                    block.astype(np.float32))

    @property
    def label_path(self) -> Path:
        return self.label_file

    def labels(self, chunk: int) -> Iterator[np.ndarray]:
        with NpyStream(self.label_file, "node_label.npy") as s:
            if s.remaining != self.rows:  # known from the header: nothing streamed first
                raise DatasetError(f"{self.label_file}: node_label declares {s.remaining} "
                                   f"labels for {self.rows} nodes")
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
            try:
                with open_regular(self.feat_file) as raw_f, gzip.open(raw_f, "rb") as f:
                    line = f.readline(MAX_CSV_LINE + 1)
            except (OSError, EOFError, zlib.error) as e:
                raise DatasetError(f"{self.feat_file}: not a readable csv.gz ({e})") from None
            self.width = line.count(b",") + 1
            if len(line) > MAX_CSV_LINE or self.width > MAX_CSV_VALUES:
                raise DatasetError(f"{self.feat_file}: the first line holds more than "
                                   f"{MAX_CSV_VALUES} values (at most that many features)")

    def sizes(self) -> tuple[int, int]:
        n_file = _require(self.raw / "num-node-list.csv.gz", "node count")
        e_file = _require(self.raw / "num-edge-list.csv.gz", "edge count")
        return csv_count(n_file, "num-node-list"), csv_count(e_file, "num-edge-list")

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
            yield (block.astype(np.float32) if block.dtype.kind == "f" else
                block.astype(np.float32))

    @property
    def label_path(self) -> Path:
        return _require(self.raw / "node-label.csv.gz", "labels")

    def labels(self, chunk: int) -> Iterator[np.ndarray]:
        for block in _csv_chunks(self.label_path, chunk, None):
            yield _labels(block[:, 0], self.label_path)


def csv_node_features(raw: Path, num_nodes: int) -> np.ndarray:
    """The (num_nodes, F) float32 features of ``raw/node-feat.csv.gz``, whole (link datasets)."""
    reader = _CsvRaw(Path(raw), True)
    x = np.concatenate([np.zeros((0, reader.width), np.float32),
                        *reader.features(num_nodes, reader.width)])
    if x.shape[0] != num_nodes:
        raise DatasetError(f"{reader.feat_file}: {x.shape[0]} feature rows, {num_nodes} nodes")
    return x
