"""Which source a kept graph directory (``graph_dir`` of `partition_to_store`) was converted from.

A graph directory given to the partitioner is reused by later runs; without a record of its
source, one holding another dataset (or the same dataset before its files changed) would be cut
instead of the one asked for, silently. The partitioner writes `SOURCE` into the directory after
converting, and reuses a directory only when the record matches the source asked for.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from plexus_datasets.base.atomic import atomic_file
from plexus_datasets.errors import DatasetError

SOURCE = "plexus-source.json"
#: A record is a few hundred bytes per source file
_MAX_BYTES = 64 << 20


def _record(identity: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in identity.items() if k != "graph_dir"}


def record_graph_source(graph_dir: Path, identity: dict[str, Any]) -> None:
    """Write the source ``identity`` (`partition_to_store`'s) into ``graph_dir``."""
    with atomic_file(graph_dir / SOURCE, "w") as f:
        f.write(json.dumps(_record(identity), sort_keys=True, default=str) + "\n")


def check_graph_source(graph_dir: Path, identity: dict[str, Any]) -> None:
    """Raise `DatasetError` unless ``graph_dir`` records that it was converted from
    ``identity``'s source (spec, root, seed, feature dtype, and the files as they are now)."""
    path = graph_dir / SOURCE
    recorded: Any = None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        try:
            st = os.fstat(fd)
            if stat.S_ISREG(st.st_mode) and st.st_size <= _MAX_BYTES:
                with os.fdopen(os.dup(fd), "rb") as f:
                    recorded = json.loads(f.read(_MAX_BYTES + 1).decode("utf-8"))
        finally:
            os.close(fd)
    except (OSError, ValueError, RecursionError):
        recorded = None
    want = json.loads(json.dumps(_record(identity), sort_keys=True, default=str))
    if recorded == want:
        return
    spec = want.get("spec")
    if not isinstance(recorded, dict):
        what = f"an unknown source (no readable {SOURCE})"
    elif recorded.get("spec") != spec:
        what = f"{str(recorded.get('spec'))[:80]!s}"
    else:
        what = f"{spec} with other options or source files than now"
    raise DatasetError(f"{graph_dir}: holds a graph converted from {what}, not {spec}; remove "
                       "it to convert again, or give another graph directory")
