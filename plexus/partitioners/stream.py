"""The out-of-core partitioner: a graph (on disk or in memory) to a shard store in bounded memory.

Phases (every one a list of tasks run by a `plexus.datasets.work.Runner`, resumable; see
docs/design.md, "Big graphs: graph directories and the out-of-core partitioner"):

1. ``canon-*``: M, the incoming adjacency, as row pieces (`plexus.datasets.canonical`): edge
   chunks are histogrammed, routed to row-range buckets and each bucket deduplicated. A graph
   stored in csr form is cut into pieces in place instead.
2. ``degrees-*``: entries per row and column of M and its self loops, from the pieces (never from
   raw edges: repeats and the second direction of undirected edges would count twice).
3. ``permutation``: the permutation from Â's row and column counts (node-sized), the scale factor
   of every row (gcn: D^-1/2, mean: D^-1), and how the rows of each Â_k are cut into sub-buckets
   of at most ``bucket_entries`` non-zeros (from the row counts in permuted order), none
   crossing a block row.
4. ``route``: every non-zero of Â_k (k = 1, 2, the two permuted adjacencies; only one when
   p1 == p2, as for the none and single permutations) goes to the file of its sub-bucket as one
   int64 key (row position, column position); features are routed by row chunks to the pieces
   of the rank row groups that hold them; one task hashes the graph's content.
5. ``sort``: every sub-bucket is sorted by (row, column); the blocks of every layer that
   multiplies by Â_k take their columns from it in that order (`_column_blocks`), their values
   from the node-sized scale factors: one piece of indptr counts, indices and data per block
   and sub-bucket. A sub-bucket's files go once its task is recorded (``CONSUMED``), M's pieces
   by a task of the phase.
6. ``ranks``: every rank's file is assembled by copying its blocks' pieces and its feature rows
   into the zip members, in the format `plexus.partitioners.store.read_shard` reads
   (`plexus.partitioners.rankfile`), leaving the page cache as it is written.
7. ``manifest``: written last, by the leader, and the finished store renamed into place.
8. ``clean``: the ranks' inputs removed, a folder per task, then the work directory.

Memory: node-sized arrays (permutation, inverses, degrees, scale factors: about 40 bytes per
node at the permutation step, 4-8 bytes per node per mapped array elsewhere) plus one chunk or
one bucket. No array of the whole graph's edges is ever created. `write_store` runs the same
phases with one chunk.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from plexus.core.grid import GridShape
from plexus.core.layout import layer_plans, pad_to, padding
from plexus.core.ops import KINDS
from plexus.core.tasks import CONSUMED, call, remove_task
from plexus.datasets.canonical import (BUCKET_ENTRIES, CHUNK_EDGES, Degrees, budget_bounds,
                                       canonicalize, csr_pieces, group_order, hash_array_prefix,
                                       pack, scan_pieces, structure_sha256, unpack)
from plexus.datasets.graph import AGGREGATIONS
from plexus.datasets.npyio import load_npy, read_concatenated
from plexus.datasets.work import Runner

from . import rankfile
from .permutations import Permutation, permutation_from_counts
from .plan import MASKS, pack_masks
from .storeformat import MANIFEST, gnn_layers
from .streamjob import (Job, PartitionError, block_specs, col_order_index, index_dtype,
                        pos_dtype, route_of, routed_adjs, row_order_index, save_piece)
from plexus.core import owned

#: bytes of feature rows per routed chunk and per assembled piece
FEATURE_BYTES = 1 << 27


# --------------------------------------------------------------------------- permutation step


def _array_sha256(arr: np.ndarray) -> str:
    h = hashlib.sha256()
    arr = np.ascontiguousarray(arr)
    hash_array_prefix(h, arr.dtype, arr.shape)
    h.update(memoryview(arr).cast("B"))
    return h.hexdigest()


def _inverse(order: np.ndarray, dtype: np.dtype) -> np.ndarray:
    inv = np.empty(len(order), dtype=dtype)
    inv[order] = np.arange(len(order), dtype=dtype)
    return inv


def _permutation_step(job: Job, degrees: Degrees, kind: str, seed: int, given: bool) -> dict:
    """Serial step: the permutation, its inverses, the row scale factors, the sub-buckets."""
    gcn = job.aggregation == "gcn"
    counts = np.dtype(np.int32) if job.n < 2**31 - 2 else np.dtype(np.int64)

    def nnz_of(name: str) -> np.ndarray:
        """Non-zeros of Â per row or column: gcn replaces M's self loops by one per node."""
        deg = degrees.load(name).astype(counts)
        if gcn:
            deg += 1
            deg -= degrees.load("loops")
        return deg

    row_nnz = nnz_of("row")
    if given:
        p1 = load_npy(job.path("node", "given.p1.npy"), PartitionError, "i", (job.n,))
        p2 = load_npy(job.path("node", "given.p2.npy"), PartitionError, "i", (job.n,))
        given_meta = json.loads(job.path("node", "given.json").read_text(encoding="utf-8"))
        perm = Permutation(given_meta["kind"], given_meta["seed"], p1.astype(np.int64),
                           p2.astype(np.int64), given_meta["locality"])
    else:
        perm = permutation_from_counts(kind, seed, row_nnz, nnz_of("col"), job.grid.world_size)
    meta = {"kind": perm.kind, "seed": int(perm.seed), "locality": bool(perm.locality),
            "p1_sha256": _array_sha256(perm.p1), "p2_sha256": _array_sha256(perm.p2),
            "nnz": int(row_nnz.sum(dtype=np.int64))}
    pos = pos_dtype(job.npad)
    for name, order in (("p1", perm.p1), ("p2", perm.p2)):
        save_piece(job.path("node", f"{name}.npy"), order.astype(pos))
        save_piece(job.path("node", f"inv{name[1]}.npy"), _inverse(order, pos))
    del perm
    # the factor every value of a row is scaled by, exactly as plexus.datasets.normalize
    # computes it in float32 (gcn: Â[i, j] = d[i] * d[j] with d = 1/sqrt(deg))
    if gcn:
        scale = np.float32(1.0) / np.sqrt(row_nnz.astype(np.float32))
    elif job.aggregation == "mean":
        scale = np.float32(1.0) / np.maximum(row_nnz.astype(np.float32), np.float32(1.0))
    else:
        scale = np.ones(job.n, dtype=np.float32)
    scale = scale.astype(np.float32)
    for adj in (1, 2):  # in the position order of Â_adj's rows and columns, padding 0
        for name, order in ((f"rscale{adj}", f"p{row_order_index(adj)}"),
                            (f"cscale{adj}", f"p{col_order_index(adj)}")):
            by_pos = np.zeros(job.npad, dtype=np.float32)
            by_pos[:job.n] = scale[job.node(order)]
            save_piece(job.path("node", f"{name}.npy"), by_pos)
            del by_pos
    del scale
    # Â1 and Â2 are one matrix when p1 == p2 (none, single): it is routed and sorted once
    meta["same"] = bool(np.array_equal(job.node("p1"), job.node("p2")))
    meta["first_adj"] = min((s.adj for s in job.blocks), default=1)
    subs = {}
    for adj in routed_adjs(job, meta["same"]):
        # a sub-bucket never crosses a row block of any block of this adjacency
        align = job.npad // math.lcm(*(s.nr for s in job.blocks if route_of(s, meta) == adj))
        order = job.node(f"p{row_order_index(adj)}")
        per_pos = np.zeros(job.npad, dtype=row_nnz.dtype)
        per_pos[:job.n] = row_nnz[order]
        cuts: list[int] = [0]
        for lo in range(0, job.npad, max(align, 1)):
            cuts += budget_bounds(per_pos[lo:lo + align], job.bucket_entries, first=lo)[1:]
        subs[str(adj)] = [[a, b] for a, b in zip(cuts[:-1], cuts[1:])]
        del per_pos, order
        # the sub-bucket of every row position (a gather in the route, not a search)
        ids = np.uint8 if len(cuts) <= 1 << 8 else np.uint16 if len(cuts) <= 1 << 16 else \
            np.int32
        save_piece(job.path("node", f"sub{adj}.npy"),
              np.repeat(np.arange(len(cuts) - 1, dtype=ids), np.diff(cuts)))
    meta["subs"] = subs
    return meta


def _write_given(job: Job, perm: Permutation) -> dict:
    save_piece(job.path("node", "given.p1.npy"), np.asarray(perm.p1, dtype=np.int64))
    save_piece(job.path("node", "given.p2.npy"), np.asarray(perm.p2, dtype=np.int64))
    job.path("node", "given.json").write_text(json.dumps(
        {"kind": perm.kind, "seed": int(perm.seed), "locality": bool(perm.locality)}),
        encoding="utf-8")
    return {}


# --------------------------------------------------------------------------- route


def _ahat_entries(job: Job, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(row, col) of Â's non-zeros in piece k's rows (gcn: M without loops, plus the diagonal)."""
    counts, cols = job.pieces.piece(k)
    r0, r1 = job.pieces.rows(k)
    rows = np.repeat(np.arange(r0, r1, dtype=np.int64), counts)
    if job.aggregation == "gcn":
        keep = rows != cols
        diag = np.arange(r0, r1, dtype=np.int64)
        rows = np.concatenate([rows[keep], diag])
        cols = np.concatenate([cols[keep], diag])
    return rows, cols


def _route_task(job: Job, k: int, meta: dict) -> dict:
    """Route piece k's non-zeros of Â_k, for each routed k, to the sub-buckets of its rows."""
    rows, cols = _ahat_entries(job, k)
    for adj in routed_adjs(job, meta["same"]):
        pos_r = job.node(f"inv{row_order_index(adj)}")[rows]
        keys = pack(pos_r, job.node(f"inv{col_order_index(adj)}")[cols], job.npad)
        subs = len(meta["subs"][str(adj)])
        order, bounds = group_order(job.node(f"sub{adj}")[pos_r], subs)
        del pos_r
        for i in range(subs):
            if bounds[i + 1] > bounds[i]:
                save_piece(job.path("blk", str(adj), f"{i:05d}", f"{k:05d}.npy"),
                      keys[order[bounds[i]:bounds[i + 1]]])
        del order, keys
    return {}


def _feature_task(job: Job, chunk: int, piece_rows: int) -> dict:
    """Route feature rows of one chunk to the (row group, piece) files of the ranks."""
    lo = chunk * job.feature_rows
    x = job.source.feature_rows(lo, min(lo + job.feature_rows, job.n))
    pos = job.node(f"inv{col_order_index(job.plans[0].adj)}")[lo:lo + len(x)].astype(np.int64)
    group = pos // job.group_rows
    local = pos - group * job.group_rows
    pieces = job.feature_pieces(piece_rows)
    bucket = group * pieces + local // piece_rows
    order, bounds = group_order(bucket, job.feature_groups * pieces)
    for b in range(len(bounds) - 1):
        if bounds[b + 1] > bounds[b]:
            sel = order[bounds[b]:bounds[b + 1]]
            g, p = divmod(b, pieces)
            base = job.feature_folder(g, p) / f"{chunk:06d}"
            save_piece(Path(f"{base}.rows.npy"), local[sel])
            save_piece(Path(f"{base}.vals.npy"), x[sel])
    return {}


def _hash_task(job: Job, chunk_rows: int) -> dict:
    """The graph's content hash, the same as `plexus.partitioners.store.graph_hash` of it."""
    h = hashlib.sha256()
    h.update(f"N={job.n};C={job.num_classes};directed={job.directed};".encode())
    row = load_npy(job.path("degrees", "sum", "row.npy"), PartitionError, "i")
    structure_sha256(h, job.pieces, row)
    del row
    hash_array_prefix(h, np.float32, (job.n, job.num_features))
    for lo in range(0, job.n, chunk_rows):
        x = job.source.feature_rows(lo, min(lo + chunk_rows, job.n))
        h.update(memoryview(np.ascontiguousarray(x)).cast("B"))
    labels = job.source.labels()
    dtype = label_dtype(labels)
    hash_array_prefix(h, dtype, labels.shape)
    h.update(memoryview(np.ascontiguousarray(labels, dtype=dtype)).cast("B"))
    for mask in job.source.masks(labels):
        hash_array_prefix(h, np.bool_, mask.shape)
        h.update(memoryview(np.ascontiguousarray(mask, dtype=np.bool_)).cast("B"))
    return {"sha256": h.hexdigest()}


def label_dtype(labels: np.ndarray) -> type:
    """The stored labels' type: int64 class ids, or int8 for a multi-label node×task matrix
    (as `plexus.datasets.graph.Graph` holds them)."""
    return np.int8 if labels.ndim == 2 else np.int64


def _labels_step(job: Job) -> dict:
    """Serial step: labels and split masks as node-sized files the rank tasks map."""
    labels = job.source.labels()
    masks = job.source.masks(labels)
    save_piece(job.path("node", "labels.npy"), labels.astype(label_dtype(labels)))
    save_piece(job.path("node", "masks.npy"), pack_masks(masks))
    return {"counts": {name: int(m.sum()) for name, m in zip(MASKS, masks)}}


# --------------------------------------------------------------------------- sort


def _sort_task(job: Job, adj: int, sub: int, p0: int, p1: int, meta: dict) -> dict:
    """Sort one sub-bucket of Â_adj (rows p0..p1 in position order) by (row, column), compute
    its values, and split it into the pieces of every block cut from it."""
    folder = job.path("blk", str(adj), f"{sub:05d}")
    keys = read_concatenated([p for k in range(len(job.pieces))
                              if (p := folder / f"{k:05d}.npy").exists()], np.int64,
                             PartitionError)
    keys.sort()
    pos_r, pos_c = unpack(keys, job.npad, pos_dtype(job.npad))
    del keys
    if pos_r.size and (pos_r[0] < p0 or pos_r[-1] >= p1):
        raise PartitionError(f"{folder}: holds rows outside {p0}..{p1}; the work directory is "
                             "damaged, remove it and start again")
    # the scale factors in row and column position order (gcn: Â = D^-1/2 M D^-1/2)
    data = np.asarray(job.node(f"rscale{adj}")[pos_r])
    if job.aggregation == "gcn":
        data *= job.node(f"cscale{adj}")[pos_c]
    pos_r -= p0  # rows within the sub-bucket
    nnz = {}
    for spec in job.blocks:
        if route_of(spec, meta) != adj:
            continue
        r = p0 // spec.rs
        nnz[spec.key] = []
        for c, sel in _column_blocks(pos_c, spec.cs, spec.nc):
            base = job.block_folder(spec, r, c) / f"{sub:05d}"
            save_piece(Path(f"{base}.counts.npy"),
                       np.bincount(pos_r[sel], minlength=p1 - p0).astype(np.int64))
            cols = pos_c[sel]
            cols -= c * spec.cs
            # column indices as stored; a block with 2^31 non-zeros or more gets int64
            # indices when its rank file is written
            save_piece(Path(f"{base}.indices.npy"), cols.astype(index_dtype(spec.cs),
                                                                copy=False))
            save_piece(Path(f"{base}.data.npy"), data[sel])
            nnz[spec.key].append(int(cols.size))
            del cols
    return {"nnz": nnz, "r": {spec.key: p0 // spec.rs for spec in job.blocks
                              if route_of(spec, meta) == adj}, CONSUMED: [str(folder)]}


def _column_blocks(pos_c: np.ndarray, cs: int, nc: int):
    """(c, selection) of the entries of each of ``nc`` column blocks of width ``cs``, each in
    the entries' order: boolean masks for a few blocks (sequential passes), a stable radix
    grouping for many."""
    if nc == 1:
        yield 0, slice(None)
        return
    block = pos_c // cs
    if nc <= 4:
        for c in range(nc):
            yield c, block == c
        return
    order, cuts = group_order(block, nc)
    for c in range(nc):
        yield c, order[cuts[c]:cuts[c + 1]]


# --------------------------------------------------------------------------- the driver


@dataclass(frozen=True)
class Settings:
    """How the streaming partitioner cuts its work: edges per chunk, non-zeros (or raw
    entries) per bucket. Results never depend on them."""

    chunk_edges: int = CHUNK_EDGES
    bucket_entries: int = BUCKET_ENTRIES
    feature_bytes: int = FEATURE_BYTES


def partition_source(source: Any, out_dir: str | os.PathLike, shape: GridShape,
                     num_layers: int, orders: Sequence[str] | str, perm: str | Permutation,
                     seed: int, aggregation: str, runner: Runner, work: Path,
                     settings: Settings = Settings(),
                     replace: Any = None, model: str | None = None) -> dict:
    """Partition ``source`` (a `DiskGraph` or a `MemoryGraph`) into the store ``out_dir``, the
    work going into ``work`` (kept on failure, so that a rerun resumes; removed on success).
    ``replace(new, out)`` moves the finished store into place. ``model``: the kind the store is
    recorded as cut for (`check_store_kind`; None: none recorded). Returns the manifest."""
    check_store_kind(model, aggregation, num_layers)
    job = _plan_job(source, shape, num_layers, orders, aggregation, runner, work, settings,
                    model)
    degrees = _degrees(job, runner)
    given = isinstance(perm, Permutation)
    if given:
        if len(perm.p1) != job.n or len(perm.p2) != job.n:
            raise PartitionError(f"the permutation orders {len(perm.p1)} nodes, the graph has "
                                 f"{job.n}")
        runner.once("permutation-given", _write_given, job, perm)
    kind = perm.kind if given else perm
    meta = runner.once("permutation", _permutation_step, job, degrees, kind, int(seed), given)
    labels = runner.once("labels", _labels_step, job)
    piece_rows = max(1, min(job.group_rows, job.feature_rows))
    chunks = -(-job.n // job.feature_rows)
    routed = routed_adjs(job, meta["same"])
    graph_sha256 = _route_phase(job, runner, meta, routed, chunks, piece_rows)
    block_nnz = _sort_phase(job, runner, meta, routed)
    idx_dtypes = {s.key: [index_dtype(max(s.rs, s.cs, nz)).name for nz in block_nnz[s.key]]
                  for s in job.blocks}
    world = shape.world_size
    rank_tasks = [(job, r, meta, block_nnz, idx_dtypes, labels["counts"], piece_rows, chunks)
                  for r in range(world)]
    per_rank = sum(block_nnz[s.key][0] for s in job.blocks) if job.blocks else 0
    ranks = runner.run("ranks", rankfile.rank_task, rank_tasks, [per_rank + 1] * world)
    manifest = runner.once("manifest", rankfile.manifest_step, job, meta, ranks, graph_sha256,
                           meta["nnz"])
    if runner.leader:
        _install(work / "store", Path(out_dir), ranks, replace)
    # the rank files' inputs, removed by every process at once, then the rest by the leader
    inputs = [job.block_folder(s, r, c) for s in job.blocks for r in range(s.nr)
              for c in range(s.nc)]
    inputs += [job.feature_folder(g, p) for g in range(job.feature_groups)
               for p in range(job.feature_pieces(piece_rows))]
    runner.run("clean", call, _removals(inputs), unit="folder")
    if runner.leader:
        owned.remove_tree(work, quiet=True)
    return manifest


def check_store_kind(model: str | None, aggregation: str, num_stages: int) -> None:
    """`PartitionError` unless ``aggregation`` is one of `AGGREGATIONS` and, with a ``model``
    kind recorded, that kind's (`plexus.core.ops.KINDS`) with whole layers of its stages."""
    if aggregation not in AGGREGATIONS:
        raise PartitionError(f"unknown aggregation {aggregation!r}; use one of "
                             f"{', '.join(AGGREGATIONS)}")
    if model is None:
        return
    if model not in KINDS:
        raise PartitionError(f"unknown model kind {model!r}; use one of {', '.join(KINDS)}")
    kind = KINDS[model]
    if kind.aggregation != aggregation:
        raise PartitionError(f"the {model} model aggregates with {kind.aggregation}'s Â, not "
                             f"{aggregation}'s")
    if gnn_layers(num_stages, model) is None:
        raise PartitionError(f"{num_stages} stages make no whole {model} layers "
                             f"({len(kind.stage_ops)} stages each)")


def _plan_job(source: Any, shape: GridShape, num_layers: int, orders: Sequence[str] | str,
              aggregation: str, runner: Runner, work: Path, settings: Settings,
              model: str | None = None) -> Job:
    """The sizes, blocks and pieces of the work: the incoming adjacency in sorted pieces (a csr
    source's own rows, or a coo source canonicalized), and the `Job` every task receives."""
    plans = layer_plans(num_layers, orders)
    n = int(source.num_nodes)
    npad = pad_to(n, shape.world_size)
    widths = [source.num_features] + [1] * (num_layers - 1) + [source.num_classes]
    fpad = padding(shape, plans, n, widths).widths_padded[0]
    specs = block_specs(shape, plans, npad)
    bucket = max(1, int(settings.bucket_entries))
    if source.edges == "csr":
        pieces = csr_pieces(source, bucket)
    else:
        pieces = canonicalize(source, work / "canon", runner, chunk_edges=settings.chunk_edges,
                              bucket_entries=bucket)
    feature_rows = max(1, settings.feature_bytes // (4 * max(source.num_features, 1)))
    return Job(str(work), tuple(shape.as_dict().items()), num_layers,
               tuple(p.order for p in plans), aggregation, source.name, n, npad, fpad,
               source.num_features, source.num_classes, bool(source.directed), specs, pieces,
               source, bucket, feature_rows, model)


def _degrees(job: Job, runner: Runner) -> Degrees:
    """Every node's degrees from the job's pieces (a csr source's pieces are checked here: no
    canonicalization checked them)."""
    return scan_pieces(job.pieces, job.path("degrees"), runner,
                       check=job.source.edges == "csr", directed=job.directed,
                       bucket_entries=job.bucket_entries)


def _route_phase(job: Job, runner: Runner, meta: dict, routed: list, chunks: int,
                 piece_rows: int) -> str:
    """Route every piece's non-zeros to their blocks and every feature chunk to its ranks, and
    hash the graph meanwhile; returns the graph's sha256."""
    pieces, n, feature_rows = job.pieces, job.n, job.feature_rows
    tasks: list[tuple] = [(_hash_task, job, feature_rows)]
    tasks += [(_route_task, job, k, meta) for k in range(len(pieces))]
    tasks += [(_feature_task, job, c, piece_rows) for c in range(chunks)]
    weights = [0] + [nz * len(routed) for nz in pieces.nnz] + [0] * chunks  # the bar: non-zeros
    # tasks start costliest first: the hash (it reads the whole graph) first; a feature chunk
    # costs about as much as routing one non-zero (an 8-byte key) per 8 bytes of its rows
    chunk_rows = [min(feature_rows, n - c * feature_rows) for c in range(chunks)]
    costs = weights[1:len(pieces) + 1] + [r * job.num_features * 4 // 8 for r in chunk_rows]
    costs = [sum(costs) + 1] + costs
    results = runner.run("route", call, tasks, weights, costs=costs)
    return results[0]["sha256"]


def _sort_phase(job: Job, runner: Runner, meta: dict, routed: list) -> dict[str, list[int]]:
    """Sort every routed sub-bucket into its blocks; returns each block's non-zeros per tile,
    checked to add up to Â's."""
    specs, work = job.blocks, Path(job.work)
    sort_tasks = [(_sort_task, job, adj, i, p0, p1, meta) for adj in routed
                  for i, (p0, p1) in enumerate(meta["subs"][str(adj)])]
    # the bar counts non-zeros: about the same in every sub-bucket
    sorted_ = runner.run("sort", call, sort_tasks + _removals([work / "canon"]),
                         [meta["nnz"] * len(routed) // max(len(sort_tasks), 1)] *
                         len(sort_tasks) + [0])[:len(sort_tasks)]
    block_nnz = {s.key: [0] * (s.nr * s.nc) for s in specs}
    for result in sorted_:
        for key, counts in result["nnz"].items():
            spec = next(s for s in specs if s.key == key)
            r = result["r"][key]
            for c, count in enumerate(counts):
                block_nnz[key][r * spec.nc + c] += count
    for spec in specs:  # (a sub-bucket consumed by an earlier run would go missing here)
        if sum(block_nnz[spec.key]) != meta["nnz"]:
            raise PartitionError(f"{work}: the sorted pieces of block {spec.key} hold "
                                 f"{sum(block_nnz[spec.key])} non-zeros, Â has {meta['nnz']}; "
                                 "the work directory is damaged, remove it and start again")
    return block_nnz


def _install(new: Path, out: Path, ranks: list, replace: Any) -> None:
    """The leader's last step: move the finished store into place (``replace``), once nothing
    but the manifest and its rank files is in it."""
    if new.exists():
        extra = sorted(set(os.listdir(new)) - {MANIFEST, *(r["file"] for r in ranks)})
        if extra:  # nothing but the manifest and its rank files ever becomes the store
            raise PartitionError(f"{new / extra[0]}: not a file of the store its manifest "
                                 "lists; the work directory is damaged and cannot be resumed")
        replace(new, out)


def _removals(paths: Sequence[Path]) -> list[tuple]:
    """Tasks (of a phase run with `call`) removing ``paths``, in order."""
    return [(remove_task, str(path)) for path in paths]


def config_key(config: Mapping[str, Any]) -> str:
    """A key naming one configuration of a run (its work directory)."""
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()
