"""The out-of-core partitioner's steps and tasks, each a function of the `Job` and the files
of the phases before it (so that a phase is resumable task by task): the permutation step
(phase 3 of `plexus_partition.stream`), the route tasks (phase 4: Â's non-zeros, feature
chunks, the graph's hash; the labels), and the sort tasks (phase 5: a sub-bucket to the column
blocks of every layer). `plexus_partition.stream` drives them."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import numpy as np

from plexus_datasets.base import gate
from plexus_datasets.base.tasks import CONSUMED
from plexus_datasets.canonical import (budget_bounds, group_order, hash_array_prefix, pack,
                                       structure_sha256, unpack)
from plexus_datasets.degrees import Degrees
from plexus_datasets.graph import row_scale
from plexus_datasets.npyio import load_npy, read_concatenated, save_piece

from .permutations import Permutation, permutation_from_counts
from .plan import MASKS, pack_masks
from .streamjob import (Job, PartitionError, col_order_index, index_dtype, pos_dtype, route_of,
                        routed_adjs, row_order_index)


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


def permutation_step(job: Job, degrees: Degrees, kind: str, seed: int, given: bool) -> dict:
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
    # the factor every value of a row is scaled by: normalize's rule, in float32
    scale = row_scale(job.aggregation, row_nnz.astype(np.float32))
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
        ids = (np.uint8 if len(cuts) <= 1 << 8 else np.uint16 if len(cuts) <= 1 << 16 else
            np.int32)
        save_piece(job.path("node", f"sub{adj}.npy"),
              np.repeat(np.arange(len(cuts) - 1, dtype=ids), np.diff(cuts)))
    meta["subs"] = subs
    return meta


def write_given(job: Job, perm: Permutation) -> dict:
    save_piece(job.path("node", "given.p1.npy"), np.asarray(perm.p1, dtype=np.int64))
    save_piece(job.path("node", "given.p2.npy"), np.asarray(perm.p2, dtype=np.int64))
    gate.save_text(job.path("node", "given.json"), json.dumps(
        {"kind": perm.kind, "seed": int(perm.seed), "locality": bool(perm.locality)}))
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


def route_task(job: Job, k: int, meta: dict) -> dict:
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


def feature_task(job: Job, chunk: int, piece_rows: int) -> dict:
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


def hash_task(job: Job, chunk_rows: int) -> dict:
    """The graph's content hash, the same as `plexus_partition.store.graph_hash` of it."""
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
    (as `plexus_datasets.graph.Graph` holds them)."""
    return np.int8 if labels.ndim == 2 else np.int64


def labels_step(job: Job) -> dict:
    """Serial step: labels and split masks as node-sized files the rank tasks map."""
    labels = job.source.labels()
    masks = job.source.masks(labels)
    save_piece(job.path("node", "labels.npy"), labels.astype(label_dtype(labels)))
    save_piece(job.path("node", "masks.npy"), pack_masks(masks))
    return {"counts": {name: int(m.sum()) for name, m in zip(MASKS, masks)}}


# --------------------------------------------------------------------------- sort


def sort_task(job: Job, adj: int, sub: int, p0: int, p1: int, meta: dict) -> dict:
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
