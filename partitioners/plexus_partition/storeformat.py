"""The shard store's format on disk: its names, version, file hashing and how its stages make
GNN layers of the model kind it records (a store may record none: then it is a cut of Â and
stage orders only, as `plexus.train.cache` keeps and older stores are), the one source for the
store's writer (`plexus_partition.rankfile`, `plexus_partition.stream`) and reader
(`plexus_partition.store`)."""

from __future__ import annotations

from plexus_partition.model.ops import KINDS
from plexus_datasets.files import file_sha256  # noqa: F401 (the store's files are hashed so)

FORMAT = "plexus-shard-store"
VERSION = 1
MANIFEST = "manifest.json"
#: A manifest is a few hundred bytes per rank; anything far larger is not one
MAX_MANIFEST_BYTES = 64 << 20


def rank_file_name(coords: dict[str, int]) -> str:
    """File of the rank at ``coords`` inside a store."""
    return f"rank-x{coords['x']}-y{coords['y']}-z{coords['z']}.npz"


def gnn_layers(num_stages: int, model: str) -> int | None:
    """How many GNN layers of the kind ``model`` (`plexus_partition.model.ops.KINDS`, which declares
    its stages per layer) ``num_stages`` stages make (None: not a whole number of them)."""
    per = len(KINDS[model].stage_ops)
    return num_stages // per if num_stages % per == 0 else None
