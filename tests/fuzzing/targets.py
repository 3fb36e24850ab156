"""What the store fuzz (`fuzzing.stores`) calls of plexus-train's cache and the API's outputs:
``Targets.of(this module)`` hands them over (by these names; a test may hand over others)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from plexus.api.outputs import (FILES, FORMAT, MARKER, check_outputs_target,
                                publish_outputs)
from plexus_partition.model.grid import GridShape
from plexus_partition.model.model import ModelConfig
from plexus.train.cache import BuildRequest, Cache, Partition, Source, build_store

#: raises `OutputsError` unless a directory may be replaced by an outputs write
check_outputs = check_outputs_target
OUTPUTS_MARKER, OUTPUTS_FILES, OUTPUTS_FORMAT = MARKER, tuple(FILES.values()), FORMAT


def cache_build(cache: Path, grid: str, spec: str) -> Path:
    """The store the cache ``cache`` gives for ``spec`` on ``grid``: found, or built out of core
    through its ``graphs/`` (as `plexus.train.cache.obtain_store` does for a graph too large to
    load in the launching process)."""
    source = Source(spec, None, 0, False)
    request = BuildRequest(source, source.key(), str(cache), GridShape.parse(grid), None,
                           ModelConfig(num_layers=2), "double")
    sizes = Cache(cache).read_sizes(request.source_key)
    if sizes is not None:
        found = Cache(cache).find(request.source_key, Partition(
            request.grid, request.model, request.perm, request.source.seed), sizes)
        if found is not None:
            return found
    return Path(build_store(request)[0])


def write_outputs(target: Path, rows: int) -> Path:
    """An outputs directory of ``rows`` nodes (pred and logits) as `plexus.save_outputs`
    leaves it: its files filled beside ``target``, then rank 0's publishing step."""
    tmp = target.parent / f".{target.name}.partial-fuzz"
    tmp.mkdir(parents=True)
    np.lib.format.open_memmap(tmp / FILES["pred"], mode="w+", dtype=np.int64, shape=(rows,))
    np.lib.format.open_memmap(tmp / FILES["logits"], mode="w+", dtype=np.float32,
                              shape=(rows, 3))
    publish_outputs(tmp, target, rows, {"pred": ((rows,), np.dtype(np.int64)),
                                        "logits": ((rows, 3), np.dtype(np.float32))},
                    {"epoch": 1})
    return target
