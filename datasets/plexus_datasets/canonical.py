"""The incoming adjacency M of a graph, built from an edge list in bounded memory, in row pieces.

M[i, j] = 1 for every edge j -> i (rows are destinations, as `plexus_datasets.graph.incoming`
defines it): an undirected graph gets both directions, repeated edges count once, self loops are
kept or dropped as the source says. Every normalized Â (gcn, mean, sum) and every degree the
partitioner needs follow from M, so M is built once, by three passes over the edge list, none
holding more than one chunk of it or one bucket of M:

1. ``count`` (a task per edge chunk): a histogram of M's entries over at most `HIST_BINS`
   groups of consecutive rows (the chunk's ids are checked on the way); the row ranges of the
   buckets are chosen from it so that each bucket holds about ``bucket_entries`` raw entries;
2. ``route`` (a task per edge chunk): every entry of M, as one int64 key (row, col) (`pack`),
   is appended to the file of its bucket (one file per chunk and bucket);
3. ``dedup`` (a task per bucket): a bucket's keys (as many as pass 1 counted) are sorted and
   repeats dropped; the result is one CSR piece of M (its row counts and its column ids),
   written to disk, and the bucket's files removed.

Raw degrees cannot be counted in pass 1: repeated edges and the second direction of undirected
edges would be counted twice, so every degree comes from the pieces (`plexus_datasets.degrees`). A
graph stored already in CSR form (``edges="csr"``) is cut into pieces directly (`csr_pieces`).

Memory: node-sized arrays only in the serial steps (the histogram is at most `HIST_BINS` bins),
one chunk of edges (about 60 bytes per edge) in passes 1-2, one bucket (about 40 bytes per entry)
in pass 3.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from plexus_datasets.base.tasks import CONSUMED

from .diskgraph import DiskGraph, DiskGraphError
from .errors import DatasetError
from .graph import sorted_unique
from .npyio import load_npy, npy_layout, read_concatenated, read_rows, save_piece
from .work import Runner
from plexus_datasets.base import owned
from plexus_datasets.base import gate

#: row groups of the histogram pass (a bucket is a run of whole groups)
HIST_BINS = 1 << 16
#: edges per chunk and raw entries of M per bucket, by default
CHUNK_EDGES = 1 << 22
BUCKET_ENTRIES = 1 << 23


def pack(rows: np.ndarray, cols: np.ndarray, size: int) -> np.ndarray:
    """One int64 key per (row, col) with ids below ``size``, ordered as (row, col) are: bit
    fields where both fit in 31 bits (fast to split), else row * size + col."""
    if size <= 1 << 31:
        return (rows.astype(np.int64) << 31) | cols
    return rows.astype(np.int64) * size + cols


def unpack(keys: np.ndarray, size: int,
           dtype: np.dtype = np.dtype(np.int64)) -> tuple[np.ndarray, np.ndarray]:
    """(rows, cols) of `pack`'s keys, as ``dtype`` (which must hold ``size``)."""
    if size <= 1 << 31:
        rows, cols = np.empty(keys.shape, dtype), np.empty(keys.shape, dtype)
        np.right_shift(keys, 31, out=rows, casting="unsafe")
        np.bitwise_and(keys, (1 << 31) - 1, out=cols, casting="unsafe")
        return rows, cols
    rows = keys // size
    return rows.astype(dtype), (keys - rows * size).astype(dtype)


def group_order(ids: np.ndarray, groups: int) -> tuple[np.ndarray, np.ndarray]:
    """(order, bounds): ``order`` lists the positions of ``ids`` (group ids in [0, groups)) group
    by group, keeping their order inside a group (numpy sorts small unsigned ids stably by
    radix: one pass for 8-bit ids); group g is ``order[bounds[g]:bounds[g + 1]]``."""
    small = np.uint8 if groups <= 1 << 8 else np.uint16 if groups <= 1 << 16 else np.int64
    ids = ids.astype(small, copy=False)
    order = np.argsort(ids, kind="stable")
    bounds = np.zeros(groups + 1, dtype=np.int64)
    np.cumsum(np.bincount(ids, minlength=groups), out=bounds[1:])
    return order, bounds


def index_dtype(num_nodes: int) -> np.dtype:
    """Node ids as int32 where they fit (as `edges_to_csr` stores them)."""
    return np.dtype(np.int32) if num_nodes < 2**31 else np.dtype(np.int64)


# --------------------------------------------------------------------------- edge sources


@dataclass(frozen=True)
class EdgeFiles:
    """A coo edge list in two .npy files (what a converter generates before canonicalizing)."""

    src: str
    dst: str
    num_nodes: int
    directed: bool
    self_loops: str = "drop"

    @property
    def num_edges(self) -> int:
        return npy_layout(self.src).rows

    def edge_rows(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        out = []
        for path in (self.src, self.dst):
            ids = read_rows(path, npy_layout(path), lo, hi).astype(np.int64, copy=False)
            if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= self.num_nodes):
                raise DatasetError(f"{path}: node ids outside [0, {self.num_nodes - 1}]")
            out.append(ids)
        return out[0], out[1]


def _entries(src: np.ndarray, dst: np.ndarray, directed: bool,
             keep_loops: bool) -> tuple[np.ndarray, np.ndarray]:
    """(row, col) of M's entries from edges src -> dst: (dst, src), and (src, dst) too when
    undirected."""
    if not keep_loops:
        keep = src != dst
        src, dst = src[keep], dst[keep]
    if directed:
        return dst, src
    return np.concatenate([dst, src]), np.concatenate([src, dst])


# --------------------------------------------------------------------------- pieces of M


@dataclass(frozen=True)
class Pieces:
    """M in row pieces: piece k holds rows ``bounds[k]:bounds[k+1]``, ``nnz[k]`` entries.

    ``folder`` holds the pieces (``{k}.counts.npy`` row counts, ``{k}.cols.npy`` sorted column ids
    per row) written by `canonicalize`; or ``graph`` is a csr `DiskGraph` whose rows are read in
    place (``offsets[k]``: where piece k starts in its indices).
    """

    num_nodes: int
    bounds: tuple[int, ...]
    nnz: tuple[int, ...]
    folder: str | None = None
    graph: DiskGraph | None = None
    offsets: tuple[int, ...] = ()

    def __len__(self) -> int:
        return len(self.nnz)

    @property
    def total(self) -> int:
        return int(sum(self.nnz))

    def rows(self, k: int) -> tuple[int, int]:
        return self.bounds[k], self.bounds[k + 1]

    def piece(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(row counts int64, column ids int64) of piece ``k``."""
        r0, r1 = self.rows(k)
        if self.graph is not None:
            ptr = read_rows(self.graph.file("indptr"), self.graph.layouts["indptr"], r0, r1 + 1)
            ptr = ptr.astype(np.int64)
            if ptr.size and (ptr[0] != self.offsets[k] or (np.diff(ptr) < 0).any()):
                raise DiskGraphError(f"{self.graph.file('indptr')}: decreases or disagrees "
                                     f"with itself around rows {r0}..{r1}")
            return np.diff(ptr), self.graph.indices(self.offsets[k], self.offsets[k + 1])
        base = Path(self.folder) / f"{k:05d}"
        counts = load_npy(f"{base}.counts.npy", DatasetError, "iu", (r1 - r0,))
        cols = load_npy(f"{base}.cols.npy", DatasetError, "iu", (self.nnz[k],))
        return counts.astype(np.int64, copy=False), cols.astype(np.int64, copy=False)


def budget_bounds(weights: np.ndarray, budget: int, first: int = 0) -> list[int]:
    """Boundaries cutting ``len(weights)`` consecutive items into runs of total weight at most
    ``budget`` (a single heavier item is a run of its own); item ids start at ``first``."""
    csum = np.cumsum(weights, dtype=np.int64)
    bounds, start, n = [first], 0, len(weights)
    while start < n:
        base = int(csum[start - 1]) if start else 0
        end = max(int(np.searchsorted(csum, base + max(budget, 1), side="right")), start + 1)
        bounds.append(first + min(end, n))
        start = end
    if len(bounds) == 1:
        bounds.append(first)
    return bounds


def csr_pieces(graph: DiskGraph, bucket_entries: int) -> Pieces:
    """Pieces of a csr graph directory, read in place (the row pointer is node-sized)."""
    ptr = graph.indptr()
    bounds = budget_bounds(np.diff(ptr), bucket_entries)
    offsets = tuple(int(ptr[b]) for b in bounds)
    nnz = tuple(int(b - a) for a, b in zip(offsets[:-1], offsets[1:]))
    return Pieces(graph.num_nodes, tuple(bounds), nnz, graph=graph, offsets=offsets)


# --------------------------------------------------------------------------- the three passes


@dataclass(frozen=True)
class CanonJob:
    """What every task of `canonicalize` needs (picklable)."""

    source: Any  # DiskGraph, EdgeFiles, or (in-process runs only) MemoryGraph
    folder: str
    num_nodes: int
    directed: bool
    keep_loops: bool
    chunk_edges: int
    group: int  # rows per histogram bin

    def chunk(self, c: int) -> tuple[np.ndarray, np.ndarray]:
        lo = c * self.chunk_edges
        src, dst = self.source.edge_rows(lo, lo + self.chunk_edges)
        return _entries(src, dst, self.directed, self.keep_loops)


def _count_task(job: CanonJob, c: int) -> dict:
    lo = c * job.chunk_edges
    src, dst = job.source.edge_rows(lo, lo + job.chunk_edges)
    if not job.keep_loops:
        keep = src != dst
        src, dst = src[keep], dst[keep]
    bins = -(-job.num_nodes // job.group)
    hist = np.bincount(dst // job.group, minlength=bins)  # M's rows are destinations
    if not job.directed:  # and sources too (without building the entries)
        hist += np.bincount(src // job.group, minlength=bins)
    save_piece(Path(job.folder) / "hist" / f"{c:06d}.npy", hist)
    return {}


def _route_task(job: CanonJob, c: int) -> dict:
    rows, cols = job.chunk(c)
    bin_bucket = load_npy(Path(job.folder) / "bin_bucket.npy", DatasetError, "iu")
    keys = pack(rows, cols, job.num_nodes)
    bucket = bin_bucket[rows // job.group]
    del rows, cols
    order, bounds = group_order(bucket, int(bin_bucket[-1]) + 1 if bin_bucket.size else 1)
    del bucket
    for b in range(len(bounds) - 1):
        if bounds[b + 1] > bounds[b]:
            folder = Path(job.folder) / "route" / f"{b:05d}"
            gate.make_folder(folder)
            save_piece(folder / f"{c:06d}.npy", keys[order[bounds[b]:bounds[b + 1]]])
    return {}


def _dedup_task(job: CanonJob, k: int, r0: int, r1: int, chunks: int,
                entries: int | None) -> dict:
    folder = Path(job.folder) / "route" / f"{k:05d}"
    raw = read_concatenated(
        [p for c in range(chunks) if (p := folder / f"{c:06d}.npy").exists()], np.int64)
    if entries is not None and raw.size != entries:  # (a bucket consumed by an earlier run)
        raise DatasetError(f"{folder}: holds {raw.size} entries, the count pass found "
                           f"{entries}; the work directory is damaged, remove it and start again")
    keys = sorted_unique(raw)
    del raw
    n = job.num_nodes
    rows, cols = unpack(keys, n, index_dtype(n))
    del keys
    rows -= r0
    counts = np.bincount(rows, minlength=r1 - r0).astype(np.int64)
    if counts.size != r1 - r0:
        raise DatasetError(f"{folder}: a bucket holds rows outside {r0}..{r1}; the work "
                           "directory is damaged, remove it and start again")
    base = Path(job.folder) / "piece" / f"{k:05d}"
    save_piece(Path(f"{base}.counts.npy"), counts)
    save_piece(Path(f"{base}.cols.npy"), cols)
    return {"nnz": int(cols.size), CONSUMED: [str(folder)]}


def _bucket_plan(job: CanonJob, chunks: int, bucket_entries: int) -> dict:
    """Serial step: sum the histograms, cut the row groups into buckets."""
    bins = -(-job.num_nodes // job.group)
    hist = np.zeros(bins, dtype=np.int64)
    for c in range(chunks):
        hist += load_npy(Path(job.folder) / "hist" / f"{c:06d}.npy", DatasetError, "i", (bins,))
    cuts = budget_bounds(hist, bucket_entries)  # in bins
    # uint16 bucket ids where they fit: numpy sorts them stably by radix in the route pass
    ids = np.uint16 if len(cuts) <= 1 << 16 else np.int64
    bin_bucket = np.repeat(np.arange(len(cuts) - 1, dtype=ids), np.diff(cuts))
    save_piece(Path(job.folder) / "bin_bucket.npy", bin_bucket)
    bounds = [min(b * job.group, job.num_nodes) for b in cuts]
    entries = [int(hist[a:b].sum()) for a, b in zip(cuts[:-1], cuts[1:])]
    return {"bounds": bounds, "raw_entries": int(hist.sum()), "entries": entries}


def canonicalize(source: Any, folder: str | Path, runner: Runner, *,
                 chunk_edges: int = CHUNK_EDGES, bucket_entries: int = BUCKET_ENTRIES,
                 prefix: str = "canon") -> Pieces:
    """M of a coo ``source`` (`DiskGraph`, `EdgeFiles` or `MemoryGraph`) as pieces in ``folder``.

    Runs the ``count``, ``route`` and ``dedup`` passes (phase names start with ``prefix``) on
    ``runner``; finished tasks of an interrupted run are not redone. A bucket's route files are
    removed once its dedup task is recorded (`plexus_datasets.work.CONSUMED`).
    """
    n = int(source.num_nodes)
    chunk_edges = max(int(chunk_edges), 1)
    job = CanonJob(source, str(folder), n, bool(source.directed),
                   source.self_loops == "keep", chunk_edges, max(1, -(-n // HIST_BINS)))
    chunks = -(-int(source.num_edges) // chunk_edges)
    weights = [min(chunk_edges, source.num_edges - c * chunk_edges) for c in range(chunks)]
    runner.run(f"{prefix}-count", _count_task, [(job, c) for c in range(chunks)], weights)
    plan = runner.once(f"{prefix}-buckets", _bucket_plan, job, chunks, bucket_entries)
    runner.run(f"{prefix}-route", _route_task, [(job, c) for c in range(chunks)], weights)
    bounds = plan["bounds"]
    buckets = len(bounds) - 1
    entries = plan.get("entries") or [None] * buckets  # (a plan of an older run has none)
    results = runner.run(f"{prefix}-dedup", _dedup_task,
                         [(job, k, bounds[k], bounds[k + 1], chunks, entries[k])
                          for k in range(buckets)], weights=None, unit="bucket")
    if runner.leader:
        owned.remove_tree(Path(folder) / "route", quiet=True)
        owned.remove_tree(Path(folder) / "hist", quiet=True)
    return Pieces(n, tuple(bounds), tuple(r["nnz"] for r in results),
                  folder=str(Path(folder) / "piece"))


# --------------------------------------------------------------------------- content hash


def hash_array_prefix(h: "hashlib._Hash", dtype: np.dtype, shape: tuple[int, ...]) -> None:
    """What `plexus_partition.store`'s array hashing writes before an array's bytes."""
    h.update(f"{np.dtype(dtype).str}{tuple(int(s) for s in shape)};".encode())


def structure_sha256(h: "hashlib._Hash", pieces: Pieces, row_counts: np.ndarray) -> None:
    """Feed M's canonical CSR (int32 indices where they fit, values 1.0 float32) to ``h`` as
    indptr, indices, data, reading the pieces in row order."""
    n, nnz = pieces.num_nodes, pieces.total
    idx = np.dtype(np.int32) if max(n, nnz) < 2**31 else np.dtype(np.int64)
    indptr = np.zeros(n + 1, dtype=idx)
    np.cumsum(row_counts, out=indptr[1:])
    hash_array_prefix(h, idx, indptr.shape)
    h.update(memoryview(indptr).cast("B"))
    del indptr
    hash_array_prefix(h, idx, (nnz,))
    for k in range(len(pieces)):
        h.update(memoryview(np.ascontiguousarray(pieces.piece(k)[1], dtype=idx)).cast("B"))
    hash_array_prefix(h, np.float32, (nnz,))
    ones = np.ones(max(1, min(nnz, 1 << 22)), dtype=np.float32)
    for lo in range(0, nnz, ones.size):
        h.update(memoryview(ones[:min(ones.size, nnz - lo)]).cast("B"))
