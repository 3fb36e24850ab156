"""Memory of a run's set-up, beside `epoch_memory` (training's peak): what partitioning the graph
takes in the one process that does it, and what a rank holds while it reads its shard.

A ``plexus-train --dataset`` run on more than one rank partitions the graph once, in a child of
the launching process, into a shard store; every rank then reads only its own shard
(`plexus.train.cache`). A rank that cuts its shard itself (one rank, ``--no-cache``, the Python
API) holds the whole graph for a while, as the partitioner does. Measured (benchmarks/
cache_setup.py, R-MAT scale 20, 2x2x2): a rank reading its shard peaks at 440-590 MiB, below its
training peak of 750-950 MiB; partitioning peaks at 0.73 GiB in its child process (out of core;
1.9 GiB when the child loads the whole graph).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping

from .model import epoch_memory
from .spec import Grid3, ModelSpec

# The in-memory partitioner (`plexus_partition.write_store`) holds the graph's adjacency, the
# normalized Â and one row group's cut pieces at once: about 38 bytes per non-zero of Â at R-MAT
# scale 22 (5.59 GiB for 132.5 M non-zeros and 32 features), plus the float32 features, plus the
# process (an interpreter with torch, numpy and scipy imported).
PARTITION_BYTES_PER_NNZ = 38
PARTITION_RUNTIME_BYTES = 400 * 2**20
# The out-of-core partitioner (R-MAT, OGB and graph directories, `plexus_partition.stream`)
# holds node-sized arrays, one chunk and one bucket: its peak does not grow with the edges. Fitted
# over R-MAT scales 21, 23 and 24 (benchmarks/results/partition_stream.txt): 304 MiB + 29.6 B/node.
STREAM_PARTITION_BYTES_PER_NODE = 30
STREAM_PARTITION_RUNTIME_BYTES = 320 * 2**20


@dataclass(frozen=True)
class SetupMemory:
    """Peak bytes of the set-up: ``partition`` in the one process that partitions the whole graph
    (the launcher's child), ``rank`` in each rank before training starts."""

    partition: float
    rank: float

    def to_dict(self) -> dict[str, float]:
        return {"partition": self.partition, "rank": self.rank}


def partition_memory(spec: ModelSpec, streamed: bool = False) -> float:
    """Peak bytes of the process that partitions the whole graph into a shard store (or of a
    rank that loads the whole graph and cuts its own shard); ``streamed``: the out-of-core
    partitioner reading the graph in pieces."""
    if streamed:
        return STREAM_PARTITION_RUNTIME_BYTES + STREAM_PARTITION_BYTES_PER_NODE * spec.num_nodes
    return (PARTITION_RUNTIME_BYTES + PARTITION_BYTES_PER_NNZ * spec.nnz
            + 4.0 * spec.num_nodes * spec.num_features)


def read_memory(spec: ModelSpec, grid: Grid3 | Mapping[str, int],
                coords: Mapping[str, int] | None = None) -> float:
    """Peak bytes of a rank that reads its shard from a store and builds its model: the process,
    its Â blocks (with the transposes it builds) and its feature shard, what it holds resident
    during training (never above training's peak). ``coords``: as in `epoch_memory`."""
    m = epoch_memory(replace(spec, from_store=True), grid, coords=coords)
    return m.runtime + m.adjacency + m.features


def setup_memory(spec: ModelSpec, grid: Grid3 | Mapping[str, int],
                 coords: Mapping[str, int] | None = None) -> SetupMemory:
    """The set-up peaks of a run: with ``spec.from_store`` a rank reads its shard (and one
    process partitioned the graph before); without it, each rank holds the whole graph while it
    cuts its shard. ``coords``: the rank's grid coordinates (`epoch_memory`); without them the
    rank that holds the most."""
    whole = partition_memory(spec)
    return SetupMemory(whole, read_memory(spec, grid, coords) if spec.from_store else whole)


def run_peak(spec: ModelSpec, grid: Grid3 | Mapping[str, int],
             coords: Mapping[str, int] | None = None) -> float:
    """A rank's peak over the whole run: its set-up or a training epoch, whichever is larger."""
    return max(epoch_memory(spec, grid, coords=coords).total,
               setup_memory(spec, grid, coords).rank)
