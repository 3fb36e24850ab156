"""On-disk shard store: one verified file per rank, written atomically and streamed.

Layout of a store directory::

    manifest.json            format/version, grid, layers, orders, permutation, seed, sizes,
                             dataset name, sha256 of the source graph, and per rank its file,
                             size and sha256
    rank-x0-y0-z0.npz ...    exactly that rank's `RankShard` (plain .npy members, no pickle)

This module writes a store and answers whether a directory is one: `write_store` (the
out-of-core partitioner, `plexus_partition.stream`, run on an in-memory graph) goes into a
hidden work directory next to the target and is renamed into place at the end, so a crash never
leaves a directory that looks complete; the content hashes a store records. Reading is
`plexus_partition.storeread` (``read_shard(store_dir, rank)``: only the caller's file,
checked against the manifest) and `plexus_partition.storemanifest` (the manifest); their
names stay importable from here. Files are byte-identical for the same inputs and seed (fixed
zip timestamps, no clock, no pids).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import scipy.sparse as sp

from plexus_datasets.base import gate, owned
from plexus_datasets.base.atomic import UnsafeTargetError, replace_directory, replaceable_directory
from plexus_partition.model.grid import GridError, GridShape
from plexus_partition.model.layout import DEFAULT_PERMUTATION
from plexus_datasets.diskgraph import MemoryGraph
from plexus_datasets.graph import Graph, incoming
from plexus_datasets.work import Runner

from .permutations import Permutation
# the format's, the manifest's and the reader's names stay importable from here, the store's
# module, for its users
from .storeformat import (FORMAT, MANIFEST, MAX_MANIFEST_BYTES, VERSION,  # noqa: F401
                          file_sha256, gnn_layers, rank_file_name)
from .storemanifest import (LEGACY_AGGREGATION, ShardStoreError, read_manifest,  # noqa: F401
                            store_aggregation, store_aggregation_of, store_model,
                            store_split)
from .storeread import read_shard  # noqa: F401
from .stream import Settings, partition_source
from .streamjob import PartitionError
from .workdir import stage_work_dir


# --------------------------------------------------------------------------- small helpers


def _hash_array(h: "hashlib._Hash", arr: np.ndarray) -> None:
    arr = np.ascontiguousarray(arr)
    h.update(f"{arr.dtype.str}{arr.shape};".encode())
    h.update(memoryview(arr).cast("B"))


def graph_hash(graph: Graph) -> str:
    """sha256 of a graph's content: its incoming adjacency M (M[i, j] for an edge j -> i, as
    `plexus_datasets.graph.incoming` builds it) in canonical CSR form, features, labels, masks
    and class count. The out-of-core partitioner computes the same hash from pieces of M
    (`plexus_datasets.canonical.structure_sha256`)."""
    h = hashlib.sha256()
    m = incoming(graph.adj, graph.directed)
    idx = np.int32 if max(graph.num_nodes, m.nnz) < 2**31 else np.int64
    h.update(f"N={graph.num_nodes};C={graph.num_classes};directed={graph.directed};".encode())
    for arr in (m.indptr.astype(idx), m.indices.astype(idx), np.ones(m.nnz, np.float32),
                graph.features, graph.labels, graph.train_mask, graph.val_mask, graph.test_mask):
        _hash_array(h, arr)
    return h.hexdigest()


def array_hash(arr: np.ndarray) -> str:
    """sha256 of one array (dtype, shape and bytes)."""
    h = hashlib.sha256()
    _hash_array(h, arr)
    return h.hexdigest()


def is_store(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a directory holding a shard-store manifest."""
    try:
        manifest = Path(path) / MANIFEST
        if not manifest.is_file() or manifest.stat().st_size > MAX_MANIFEST_BYTES:
            return False
        with open(manifest, encoding="utf-8") as f:
            return json.load(f).get("format") == FORMAT
    except (OSError, ValueError, AttributeError, RecursionError):
        return False


def is_own_store(path: str | os.PathLike, exact: bool = True) -> bool:
    """Whether ``path`` is a shard store this user's Plexus wrote, exactly as written: its
    seal (`plexus_datasets.base.owned`, under this user's key) lists every file there, the manifest
    by sha256. A folder that merely holds a store-format manifest (or a store with a file added) is
    not. Not ``exact``: its files may have been damaged since (it may be replaced, never reused)."""
    return owned.is_sealed(path, FORMAT, exact=exact)


def check_out_dir(out_dir: str | os.PathLike) -> Path:
    """Refuse a target that exists and is neither an empty directory nor a shard store this
    user wrote with nothing added (`is_own_store`, not exact: a damaged one is replaced),
    naming why in one line; a folder of the system too (--out /usr/share/x was written as
    root)."""
    path = Path(out_dir)
    why = gate.system_folder(os.path.realpath(path))
    if why is not None:
        raise ShardStoreError(f"{path}: {why}")
    if path.is_dir() and not path.is_symlink() and any(path.iterdir()):
        why = owned.seal_problem(path, FORMAT, exact=False)
        if why is not None:
            raise ShardStoreError(f"{why}; not a shard store this user's Plexus wrote, refusing "
                                  "to replace it (give another --out, or remove it yourself "
                                  "if it is yours)")
    out = replaceable_directory(path, lambda p: is_own_store(p, exact=False),
                                "a shard store this user's Plexus wrote", ShardStoreError)
    if out.parent.exists() and not out.parent.is_dir():
        raise ShardStoreError(f"{out.parent}: not a directory, cannot hold the store")
    return out


# --------------------------------------------------------------------------- writing


def write_store(graph: Graph, out_dir: str | os.PathLike, shape: GridShape | Mapping[str, int],
                num_stages: int,
                orders: Sequence[str] | str = "agg", perm: str | Permutation = DEFAULT_PERMUTATION,
                seed: int = 0, *, adj_hat: sp.csr_matrix | None = None,
                aggregation: str | None = None, chunk_nnz: int | None = None,
                model: str | None = None) -> dict:
    """Partition the in-memory ``graph`` for a grid ``shape`` and write one shard file per rank
    to ``out_dir``; returns the manifest.

    This is the out-of-core partitioner (`plexus_partition.stream`) run in this process on
    the graph as it is in memory, with one chunk (``chunk_nnz``: a smaller chunk and bucket size,
    for tests); the store is the same, byte for byte, as `partition_to_store` writes from the
    graph on disk. ``perm`` is a permutation kind or a built `Permutation`. ``adj_hat`` is
    accepted for compatibility and not used: Â is built while streaming, exactly as
    `plexus_datasets.normalize` builds it. An existing store at ``out_dir`` (or an empty
    directory) is replaced only once the new one is complete; anything else there is refused
    with `ShardStoreError`. ``model``: the kind the store records it was cut for (its Â is then
    the kind's; ``num_stages`` counts stages, whole layers of the kind's); ``aggregation``
    without one: a store of that Â and the orders only (default GCN's).
    """
    del adj_hat
    out = check_out_dir(out_dir)
    try:
        shape = GridShape.of(shape)
    except GridError as e:
        raise ShardStoreError(str(e)) from None
    source = MemoryGraph(graph)
    size = max(1, source.num_edges * 2 + graph.num_nodes)
    settings = Settings(chunk_edges=chunk_nnz or size, bucket_entries=chunk_nnz or size,
                        feature_bytes=max(1, 4 * graph.num_nodes * graph.num_features))
    work = stage_work_dir(out, None)
    try:
        with Runner(work, progress=False) as runner:
            return partition_source(source, out, shape, num_stages, orders, perm, seed,
                                    store_aggregation_of(model, aggregation), runner, work,
                                    settings, replace_store_dir, model)
    except PartitionError as e:
        raise ShardStoreError(str(e)) from None
    finally:
        owned.remove_tree(work, quiet=True)


def replace_store_dir(new: Path, out: Path) -> None:
    """Move the finished store ``new`` to ``out``; an old store there is moved aside, then
    removed (a crash in between leaves one of the two, never a mix)."""
    try:
        replace_directory(new, out, check_out_dir, seal=FORMAT, describes=(MANIFEST,))
    except UnsafeTargetError as e:
        raise ShardStoreError(str(e)) from None
