"""The shard store's format on disk: its names, version, file hashing and how its stages make
GNN layers, the one source for the store's writer (`plexus.partitioners.rankfile`,
`plexus.partitioners.stream`) and reader (`plexus.partitioners.store`)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from plexus.core.ops import KINDS, ModelKind

FORMAT = "plexus-shard-store"
VERSION = 1
MANIFEST = "manifest.json"
_HASH_BUF = 1 << 20
#: A manifest is a few hundred bytes per rank; anything far larger is not one
MAX_MANIFEST_BYTES = 64 << 20


def rank_file_name(coords: dict[str, int]) -> str:
    """File of the rank at ``coords`` inside a store."""
    return f"rank-x{coords['x']}-y{coords['y']}-z{coords['z']}.npz"


def file_sha256(path: Path) -> str:
    """sha256 of a file, read in 1 MiB pieces (memory independent of the file size)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_HASH_BUF):
            h.update(chunk)
    return h.hexdigest()


def store_kind(aggregation: str) -> ModelKind:
    """The model kind whose stages a store of ``aggregation``'s Â is cut in: GCN's for "gcn"
    (GAT's layers are one stage too), GraphSAGE's for "mean", GIN's for "sum" (agg, dense)."""
    return next(k for k in KINDS.values() if k.aggregation == aggregation and not k.attention)


def gnn_layers(num_stages: int, aggregation: str) -> int | None:
    """How many GNN layers ``num_stages`` stages make for `store_kind`'s layers (None: not a
    whole number of them, as an explicit per-stage order may cut)."""
    per = len(store_kind(aggregation).stage_ops)
    return num_stages // per if num_stages % per == 0 else None
