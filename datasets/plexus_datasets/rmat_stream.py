"""R-MAT graphs generated straight into a graph directory, in pieces: the same graph as the
``rmat:`` dataset spec (`plexus_datasets.rmat.rmat_graph`) for the same parameters, at any scale
the disk holds (scale 26 and beyond), never all in memory.

Phases (tasks of a `plexus_datasets.work.Runner`, resumable):

- ``rmat-generate``: edge ranges drawn on their own (`rmat_edges` with ``lo``/``hi``) into raw
  src/dst files; one task draws the features row block by row block from the same stream as
  `random_features`;
- M (here the symmetric adjacency) in row pieces (`plexus_datasets.canonical.canonicalize`):
  duplicates and self loops removed, both directions kept;
- ``rmat-projection``: H = X·W block by block (`rmat_projection`'s blocks);
- ``rmat-labels``: per piece of rows, the neighbour sum of H by scipy's CSR product over windows
  of H, each window's product continuing the sum so far (so every row adds its terms in column
  order, and the labels are bit for bit those of `rmat_labels`), then ``argmax(H + sum / deg)``;
- ``rmat-indices``, ``rmat-hash`` and ``rmat-finish``: the pieces' columns become the graph's
  csr indices while one task draws the split, every array is hashed (a task each), the
  directory is written.

Memory: node-sized arrays (the node relabelling, int32; the labels when the split is drawn)
plus one chunk of edges, one piece of M, and one window of H (`WINDOW_BYTES`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from plexus_datasets.base.tasks import call

from .canonical import BUCKET_ENTRIES, CHUNK_EDGES, EdgeFiles, Pieces, canonicalize
from .diskgraph import (FEATURE_DTYPES, DiskGraph, decode_features, encode_features,
                        is_disk_graph)
from .diskwrite import DiskGraphWriter
from .errors import DatasetError
from .npyio import NpyWriter, load_npy, npy_layout, read_rows, read_rows_into, save_npy
from .rmat import (PROJECTION_ROWS, rmat_chunks, rmat_edges, rmat_name, rmat_node_permutation,
                   rmat_notes, rmat_projection)
from .synthetic import random_split, rng_for
from .work import Runner
from plexus_datasets.base import owned
from plexus_datasets.base import gate

#: bytes of H read at once while summing neighbours
WINDOW_BYTES = 1 << 27
_FEATURES = 1  # synthetic.random_features' stream


@dataclass(frozen=True)
class RmatJob:
    params: dict
    work: str
    writer: DiskGraphWriter
    feature_dtype: str

    @property
    def n(self) -> int:
        return 1 << self.params["scale"]

    def path(self, *parts: str) -> Path:
        return Path(self.work, *parts)


def _setup(job: RmatJob, m: int) -> dict:
    save_npy(job.path("perm.npy"), rmat_node_permutation(job.params["scale"], job.params["seed"]))
    for name in ("src", "dst"):
        NpyWriter(job.path(f"{name}.npy"), np.int32, (), rows=m).close()
    NpyWriter(job.writer.file("features"), FEATURE_DTYPES[job.feature_dtype],
              (job.params["features"],), rows=job.n).close()
    NpyWriter(job.path("h.npy"), np.float32, (job.params["classes"],), rows=job.n).close()
    NpyWriter(job.writer.file("labels"), np.int32, (), rows=job.n).close()
    return {}


def _edges_task(job: RmatJob, lo: int, hi: int, m: int) -> dict:
    p = job.params
    perm = load_npy(job.path("perm.npy"), DatasetError, "i", (job.n,), mmap=True)
    src, dst = rmat_edges(p["scale"], p["edge_factor"], p["seed"], p["a"], p["b"], p["c"],
                          lo, hi, perm=np.asarray(perm))
    for name, arr in (("src", src), ("dst", dst)):
        w = NpyWriter(job.path(f"{name}.npy"), np.int32, (), rows=m, create=False)
        w.write_at(lo, arr)
        w.close()
    return {}


def _features_task(job: RmatJob, rows: int) -> dict:
    """One sequential stream, as `random_features` draws it (it cannot jump ahead)."""
    f = job.params["features"]
    rng = rng_for(job.params["seed"], _FEATURES)
    w = NpyWriter(job.writer.file("features"), FEATURE_DTYPES[job.feature_dtype], (f,),
                  rows=job.n, create=False)
    for lo in range(0, job.n, rows):
        block = rng.standard_normal((min(rows, job.n - lo), f), dtype=np.float32)
        w.write_at(lo, encode_features(block, job.feature_dtype))
    w.close()
    return {}


def _projection_task(job: RmatJob, lo: int) -> dict:
    layout = npy_layout(job.writer.file("features"))
    x = decode_features(read_rows(job.writer.file("features"), layout, lo, lo + PROJECTION_ROWS),
                        job.feature_dtype)
    h = rmat_projection(x, job.params["classes"], job.params["seed"])
    w = NpyWriter(job.path("h.npy"), np.float32, (job.params["classes"],), rows=job.n,
                  create=False)
    w.write_at(lo, h)
    w.close()
    return {}


def _labels_task(job: RmatJob, pieces: Pieces, k: int) -> dict:
    """Labels of piece k's rows. The neighbour sum is scipy's CSR product, as `rmat_labels`
    computes it, window by window of H: each window's product starts from the sum so far,
    entered as the row's first term (a column of its own with value 1), so that every row adds
    its terms one at a time in column order, exactly as one product over all of H would."""
    counts, cols = pieces.piece(k)
    r0, r1 = pieces.rows(k)
    rows = r1 - r0
    classes = job.params["classes"]
    local = np.repeat(np.arange(rows, dtype=np.int64), counts)
    h_path = job.path("h.npy")
    layout = npy_layout(h_path)
    step = max(1, WINDOW_BYTES // (4 * classes))
    h_all = load_npy(h_path, DatasetError, "f", (job.n, classes), mmap=True)
    neigh = np.zeros((rows, classes), dtype=np.float32)
    started = False
    x = None  # the operand of every later product: the sum so far, then the window
    for k0 in range(0, job.n, step):
        sel = (cols >= k0) & (cols < k0 + step)
        if not sel.any():
            continue
        k1 = min(k0 + step, job.n)
        indptr = np.zeros(rows + 1, dtype=np.int64)
        per_row = np.bincount(local[sel], minlength=rows)
        if not started:
            # the first product starts from 0, as one product over all of H: its operand is
            # the window of H as mapped (one copy in the page cache for every process)
            np.cumsum(per_row, out=indptr[1:])
            a = sp.csr_matrix((np.ones(int(indptr[-1]), np.float32), cols[sel] - k0, indptr),
                              shape=(rows, k1 - k0))
            neigh = a @ h_all[k0:k1]
            started = True
        else:
            np.cumsum(per_row + 1, out=indptr[1:])
            indices = np.empty(int(indptr[-1]), dtype=np.int64)
            real = np.ones(indices.size, dtype=bool)
            real[indptr[:-1]] = False
            indices[indptr[:-1]] = np.arange(rows)  # the sum so far, first in every row
            indices[real] = cols[sel] - k0 + rows
            del real
            if x is None:
                x = np.empty((rows + min(step, job.n), classes), dtype=np.float32)
            x[:rows] = neigh
            read_rows_into(h_path, layout, k0, k1, x[rows:rows + k1 - k0])
            a = sp.csr_matrix((np.ones(indices.size, np.float32), indices, indptr),
                              shape=(rows, rows + k1 - k0))
            neigh = a @ x[:rows + k1 - k0]
            del indices
        del a, sel
    del h_all, x
    deg = counts.astype(np.float32)
    h = read_rows(h_path, layout, r0, r1)
    labels = np.argmax(h + neigh / np.maximum(deg, 1.0)[:, None], axis=1).astype(np.int32)
    w = NpyWriter(job.writer.file("labels"), np.int32, (), rows=job.n, create=False)
    w.write_at(r0, labels)
    w.close()
    return {}


def _alloc_indices(job: RmatJob, pieces: Pieces) -> dict:
    ptr = np.zeros(job.n + 1, dtype=np.int64)
    for k in range(len(pieces)):
        r0, r1 = pieces.rows(k)
        ptr[r0 + 1:r1 + 1] = pieces.piece(k)[0]
    np.cumsum(ptr, out=ptr)
    job.writer.put("indptr", ptr)
    NpyWriter(job.writer.file("indices"), np.int32, (), rows=pieces.total).close()
    return {"isolated": int((np.diff(ptr) == 0).sum())}


def _indices_task(job: RmatJob, pieces: Pieces, k: int) -> dict:
    _, cols = pieces.piece(k)
    w = NpyWriter(job.writer.file("indices"), np.int32, (), rows=pieces.total, create=False)
    w.write_at(int(sum(pieces.nnz[:k])), cols.astype(np.int32))
    w.close()
    return {}


def _split_task(job: RmatJob) -> dict:
    """The split, drawn from the labels (beside the indices' tasks)."""
    labels = load_npy(job.writer.file("labels"), DatasetError, "i", (job.n,)).astype(np.int64)
    for name, mask in zip(("train", "valid", "test"), random_split(labels, job.params["seed"])):
        job.writer.put(name, np.flatnonzero(mask).astype(np.int64))
    return {}


def _hash_task(job: RmatJob, name: str) -> dict:
    return {"sha256": job.writer.array_sha256(name)}


def _finish(job: RmatJob, isolated: int, hashes: dict) -> dict:
    if not job.writer.staging.exists() and is_disk_graph(job.writer.out):
        return {}  # finished by a run killed before it could record so
    job.writer.finish(rmat_notes(job.params, isolated), hashes)
    for name in ("perm.npy", "src.npy", "dst.npy", "h.npy"):
        owned.remove_file(job.path(name))
    return {}


def rmat_to_disk(params: dict, out: str | Path, runner: Runner, work: str | Path, *,
                 chunk_edges: int = CHUNK_EDGES, bucket_entries: int = BUCKET_ENTRIES,
                 feature_dtype: str = "float32") -> DiskGraph:
    """Generate the R-MAT graph of ``params`` (`parse_rmat_params`' keys) into the graph
    directory ``out`` (csr form), working in ``work`` with ``runner``. Loading the result
    (`DiskGraph.to_graph`) gives `rmat_graph(**params)` exactly (with float32 features)."""
    work = Path(work)
    if is_disk_graph(out) and not (work / "graph.partial").exists():
        return DiskGraph.open(out)  # finished by an earlier run that was then interrupted
    gate.make_folder(work)
    p = dict(params)
    n = 1 << p["scale"]
    m = p["edge_factor"] * n
    writer = DiskGraphWriter(out, name=rmat_name(p), num_nodes=n, num_features=p["features"],
                             num_classes=p["classes"], directed=False, edges="csr",
                             feature_dtype=feature_dtype, staging=work / "graph.partial")
    job = RmatJob(p, str(work), writer, feature_dtype)
    runner.once("rmat-setup", _setup, job, m)
    ranges = rmat_chunks(p["scale"], p["edge_factor"], chunk_edges)
    rows = max(1, (64 << 20) // (4 * p["features"]))
    # the features come from one sequential stream: their task goes first, beside the edges'
    tasks = [(_features_task, job, rows)] + [(_edges_task, job, lo, hi, m) for lo, hi in ranges]
    runner.run("rmat-generate", call, tasks, [0] + [hi - lo for lo, hi in ranges],
               costs=[m] + [hi - lo for lo, hi in ranges])
    edges = EdgeFiles(str(job.path("src.npy")), str(job.path("dst.npy")), n, directed=False)
    pieces = canonicalize(edges, work / "canon", runner, chunk_edges=chunk_edges,
                          bucket_entries=bucket_entries, prefix="rmat-canon")
    blocks = list(range(0, n, PROJECTION_ROWS))
    runner.run("rmat-projection", _projection_task, [(job, lo) for lo in blocks],
               [min(PROJECTION_ROWS, n - lo) for lo in blocks], unit="node")
    runner.run("rmat-labels", _labels_task, [(job, pieces, k) for k in range(len(pieces))],
               pieces.nnz)
    alloc = runner.once("rmat-alloc", _alloc_indices, job, pieces)
    # one task draws the split beside the pieces' indices: it starts first (its cost), and
    # comes last in the list so that the pieces' tasks keep the places older runs recorded
    runner.run("rmat-indices", call, [(_indices_task, job, pieces, k)
                                      for k in range(len(pieces))] + [(_split_task, job)],
               [*pieces.nnz, 0], costs=[*pieces.nnz, pieces.total + 1])
    names = job.writer.array_names()
    sizes = [job.writer.file(name).stat().st_size for name in names]
    hashes = runner.run("rmat-hash", _hash_task, [(job, name) for name in names], sizes,
                        unit="B")
    runner.once("rmat-finish", _finish, job, alloc["isolated"],
                {name: h["sha256"] for name, h in zip(names, hashes)})
    return DiskGraph.open(out)
