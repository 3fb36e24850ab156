"""Refuse, at start, a run that the performance model says will not fit in memory: a training
epoch, the set-up (a rank reading its shard, or loading the whole graph to cut it) and the one
process that partitions the graph into a store (`plexus.perfmodel.setup`).

A rank that runs out of memory mid-epoch dies after minutes of loading, or drags a node into
swap; a prediction from the graph's sizes costs nothing. The prediction is
`plexus.perfmodel.epoch_memory` (Â blocks, features, what autograd saves and the step at the
peak, weights and Adam state, the process itself; checked against measured peaks by
benchmarks/memory.py); what is available is the GPU's free memory, or on CPUs the host's
available RAM shared by the ranks of this node.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import torch

from plexus_partition.model.grid import GridShape
from plexus.core.units import format_bytes
from plexus_datasets.validate import available_bytes
from plexus_partition.launch.env import ranks_per_gpu
from plexus.perfmodel import ModelSpec, epoch_memory, partition_memory, setup_memory


class MemoryCheckError(ValueError):
    """The predicted per-rank memory exceeds what is available (a one-line message)."""


@dataclass(frozen=True)
class Available:
    """Bytes one rank may use, and where the figure comes from."""

    bytes: float
    source: str


def host_available_bytes() -> float:
    """The host's available RAM (MemAvailable: free plus reclaimable caches); one rule with the
    loaders' declared-size check."""
    return available_bytes()


def available_memory(device: torch.device, local_ranks: int) -> Available:
    """What one rank may use: its share of its GPU's free memory (ranks beyond the node's GPUs
    share them), or its share of the host's RAM."""
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        per_gpu = ranks_per_gpu(local_ranks)
        return Available(float(free) / per_gpu, f"free on {device}"
                         + (f" / {per_gpu} ranks sharing it" if per_gpu > 1 else ""))
    share = host_available_bytes() / max(1, local_ranks)
    per = f" / {local_ranks} local ranks" if local_ranks > 1 else ""
    return Available(share, f"available host RAM{per}")


def predicted_memory(spec: ModelSpec, grid: GridShape | tuple[int, int, int]) -> float:
    """Bytes per rank the performance model predicts for a training epoch of ``spec`` (the
    graph's sizes, the model and how the run holds it: precision, recompute, store, task kind,
    symmetry, device) on ``grid``."""
    return epoch_memory(spec, grid).total


@dataclass(frozen=True)
class Predicted:
    """The performance model's peaks: a rank's training epoch and set-up (reading its shard from
    a store, or loading the whole graph to cut its own), and the one process that partitions the
    graph when a store is built."""

    training: float
    setup: float
    partition: float

    @property
    def run(self) -> float:
        """A rank's peak over the whole run."""
        return max(self.training, self.setup)


def predicted_peaks(spec: ModelSpec, grid: GridShape | tuple[int, int, int],
                    coords: Mapping[str, int] | None = None) -> Predicted:
    """`predicted_memory` with the set-up's peaks beside it (`plexus.perfmodel.setup`): for the
    rank at ``coords``, or without them the rank that holds the most."""
    return Predicted(epoch_memory(spec, grid, coords=coords).total,
                     setup_memory(spec, grid, coords).rank, partition_memory(spec))


def check_memory(predicted: float, available: Available,
                 grid: GridShape | tuple[int, int, int]) -> None:
    """Raise `MemoryCheckError` when ``predicted`` bytes per rank exceed ``available``."""
    if predicted <= available.bytes:
        return
    raise MemoryCheckError(
        f"predicted memory per rank on grid {GridShape.of(grid)} is {format_bytes(predicted)} but "
        f"only {format_bytes(available.bytes)} is available ({available.source}); use more "
        "ranks, a smaller model or dataset")


def check_partition_memory(predicted: float, available: Available) -> None:
    """Raise `MemoryCheckError` when partitioning the whole graph in one process (``predicted``
    bytes) would not fit ``available``."""
    if predicted <= available.bytes:
        return
    raise MemoryCheckError(
        f"partitioning the graph into a shard store is predicted to take "
        f"{format_bytes(predicted)} in one process but only {format_bytes(available.bytes)} is "
        f"available ({available.source}); partition it where there is more memory "
        "(plexus-partition) and train from --shards")
