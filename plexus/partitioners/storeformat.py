"""The shard store's format on disk: its names, version and file hashing, the one source for
the store's writer (`plexus.partitioners.rankfile`, `plexus.partitioners.stream`) and reader
(`plexus.partitioners.store`)."""

from __future__ import annotations

import hashlib
from pathlib import Path

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
