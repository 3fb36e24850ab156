"""The out-of-core partitioner: a graph (on disk or in memory) to a shard store in bounded memory.

Phases (every one a list of tasks run by a `plexus_datasets.work.Runner`, resumable; see
docs/design.md, "Big graphs: graph directories and the out-of-core partitioner"):

1. ``canon-*``: M, the incoming adjacency, as row pieces (`plexus_datasets.canonical`): edge
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
   multiplies by Â_k take their columns from it in that order (`streamsteps`), their values
   from the node-sized scale factors: one piece of indptr counts, indices and data per block
   and sub-bucket. A sub-bucket's files go once its task is recorded (``CONSUMED``), M's pieces
   by a task of the phase.
6. ``ranks``: every rank's file is assembled by copying its blocks' pieces and its feature rows
   into the zip members, in the format `plexus_partition.store.read_shard` reads
   (`plexus_partition.rankfile`), leaving the page cache as it is written.
7. ``manifest``: written last, by the leader, and the finished store renamed into place.
8. ``clean``: the ranks' inputs removed, a folder per task, then the work directory.

Memory: node-sized arrays (permutation, inverses, degrees, scale factors: about 40 bytes per
node at the permutation step, 4-8 bytes per node per mapped array elsewhere) plus one chunk or
one bucket. No array of the whole graph's edges is ever created. `write_store` runs the same
phases with one chunk.

This module drives the phases; their steps and tasks are `plexus_partition.streamsteps`.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from plexus_datasets.base import owned
from plexus_partition.model.grid import GridShape
from plexus_partition.model.layout import layer_plans, pad_to, padding
from plexus_partition.model.ops import KINDS
from plexus_datasets.base.tasks import call, remove_task
from plexus_datasets.canonical import BUCKET_ENTRIES, CHUNK_EDGES, canonicalize, csr_pieces
from plexus_datasets.degrees import Degrees, scan_pieces
from plexus_datasets.graph import AGGREGATIONS
from plexus_datasets.synthetic import split_origin
from plexus_datasets.work import Runner

from . import rankfile
from .permutations import Permutation
from .storeformat import MANIFEST, gnn_layers
from .streamjob import Job, PartitionError, block_specs, index_dtype, routed_adjs
from .streamsteps import (feature_task, hash_task, labels_step, permutation_step, route_task,
                          sort_task, write_given)

#: bytes of feature rows per routed chunk and per assembled piece
FEATURE_BYTES = 1 << 27


# --------------------------------------------------------------------------- the driver


@dataclass(frozen=True)
class Settings:
    """How the streaming partitioner cuts its work: edges per chunk, non-zeros (or raw
    entries) per bucket. Results never depend on them."""

    chunk_edges: int = CHUNK_EDGES
    bucket_entries: int = BUCKET_ENTRIES
    feature_bytes: int = FEATURE_BYTES


def partition_source(source: Any, out_dir: str | os.PathLike, shape: GridShape,
                     num_stages: int, orders: Sequence[str] | str, perm: str | Permutation,
                     seed: int, aggregation: str, runner: Runner, work: Path,
                     settings: Settings = Settings(),
                     replace: Any = None, model: str | None = None) -> dict:
    """Partition ``source`` (a `DiskGraph` or a `MemoryGraph`) into the store ``out_dir``, the
    work going into ``work`` (kept on failure, so that a rerun resumes; removed on success).
    ``replace(new, out)`` moves the finished store into place. ``model``: the kind the store is
    recorded as cut for (`check_store_kind`; None: none recorded). Returns the manifest."""
    check_store_kind(model, aggregation, num_stages)
    job = _plan_job(source, shape, num_stages, orders, aggregation, runner, work, settings,
                    model)
    degrees = _degrees(job, runner)
    given = isinstance(perm, Permutation)
    if given:
        if len(perm.p1) != job.n or len(perm.p2) != job.n:
            raise PartitionError(f"the permutation orders {len(perm.p1)} nodes, the graph has "
                                 f"{job.n}")
        runner.once("permutation-given", write_given, job, perm)
    kind = perm.kind if given else perm
    meta = runner.once("permutation", permutation_step, job, degrees, kind, int(seed), given)
    labels = runner.once("labels", labels_step, job)
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
    split = {**labels["counts"], "origin": split_origin(source.notes)}  # which split it carries
    manifest = runner.once("manifest", rankfile.manifest_step, job, meta, ranks, graph_sha256,
                           meta["nnz"], split)
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
    kind recorded, that kind's (`plexus_partition.model.ops.KINDS`) with whole layers of its
    stages."""
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


def _plan_job(source: Any, shape: GridShape, num_stages: int, orders: Sequence[str] | str,
              aggregation: str, runner: Runner, work: Path, settings: Settings,
              model: str | None = None) -> Job:
    """The sizes, blocks and pieces of the work: the incoming adjacency in sorted pieces (a csr
    source's own rows, or a coo source canonicalized), and the `Job` every task receives."""
    plans = layer_plans(num_stages, orders)
    n = int(source.num_nodes)
    npad = pad_to(n, shape.world_size)
    widths = [source.num_features] + [1] * (num_stages - 1) + [source.num_classes]
    fpad = padding(shape, plans, n, widths).widths_padded[0]
    specs = block_specs(shape, plans, npad)
    bucket = max(1, int(settings.bucket_entries))
    if source.edges == "csr":
        pieces = csr_pieces(source, bucket)
    else:
        pieces = canonicalize(source, work / "canon", runner, chunk_edges=settings.chunk_edges,
                              bucket_entries=bucket)
    feature_rows = max(1, settings.feature_bytes // (4 * max(source.num_features, 1)))
    return Job(str(work), tuple(shape.as_dict().items()), num_stages,
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
    tasks: list[tuple] = [(hash_task, job, feature_rows)]
    tasks += [(route_task, job, k, meta) for k in range(len(pieces))]
    tasks += [(feature_task, job, c, piece_rows) for c in range(chunks)]
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
    sort_tasks = [(sort_task, job, adj, i, p0, p1, meta) for adj in routed
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
