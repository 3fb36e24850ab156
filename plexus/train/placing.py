"""``--placement``: which block of the grid each node holds, resolved with the grid.

Launchers put consecutive ranks on a node, so by default a node holds as much of z as fits, then
of y (`plexus_partition.model.topology.node_block`). A block of the grid chosen instead (x, y, z
ranks per node) keeps the axis with the heaviest traffic inside the node: the ranks then take
their grid coordinates from that block (`plexus.engine.grid.Grid.create`'s ``node``), and the
performance model prices the same block (`plexus.perfmodel.Placement`). "auto" takes the block
the model prices fastest for this run where the calibration has link classes (a GPU cluster's
profile); without link rates there is nothing to choose by, and the launcher's numbering stays.
"""

from __future__ import annotations

from dataclasses import replace

from plexus.api.training import EngineConfig
from plexus.perfmodel import Calibration, Placement, estimate
from plexus_partition.model.cli import UsageError
from plexus_partition.model.grid import GridShape
from plexus_partition.model.topology import node_block, placed_ranks

#: --placement's words besides a block XxYxZ.
PLACEMENT_WORDS = ("auto", "launcher")


def parse_placement(text: str) -> str:
    """``text`` as --placement's value ("auto", "launcher" or "XxYxZ", whole numbers >= 1),
    normalized; `UsageError` otherwise."""
    value = str(text).strip().lower()
    if value in PLACEMENT_WORDS:
        return value
    parts = value.split("x")
    if len(parts) != 3 or not all(p.isdigit() and int(p) >= 1 for p in parts):
        raise UsageError(f"--placement {text!r}: give auto, launcher, or a node's block of the "
                         "grid as XxYxZ (ranks of x, y and z on one node, e.g. 1x2x2)")
    return "x".join(str(int(p)) for p in parts)


def placed_engine(placement: str, engine: EngineConfig, grid: GridShape,
                  ranks_per_host: int | None, calibration: Calibration | None,
                  spec_of=None) -> EngineConfig:
    """``engine`` with the node block of ``placement`` on ``grid`` (and its ranks per node):
    a block "XxYxZ" checked against the nodes (``engine.gpus_per_node``, else the launcher's
    ``ranks_per_host`` where the job spans hosts); "auto" the model's fastest block with
    ``calibration``'s link classes (``spec_of()``: the run's `ModelSpec`); "launcher", or no
    nodes, as it is. Raises `UsageError` for a block that does not fit."""
    world = grid.world_size
    k = engine.gpus_per_node or (ranks_per_host if ranks_per_host and world > ranks_per_host
                                 else None)
    if placement == "launcher" or k is None or world <= k:
        if placement not in PLACEMENT_WORDS:
            raise UsageError(f"--placement {placement} needs ranks on several nodes "
                             "(--gpus-per-node K, or a launcher's nodes)")
        return engine
    if placement == "auto":
        if calibration is None or not calibration.links or spec_of is None:
            return engine
        best = estimate(spec_of(), grid, calibration, placement=Placement(k, arrange=True))
        block = best.node
    else:
        block = tuple(int(v) for v in placement.split("x"))
        if node_block(grid, k, block) is None:  # type: ignore[arg-type]
            raise UsageError(f"--placement {placement}: a node of {k} ranks cannot hold that "
                             f"block of grid {grid} (each number must divide its axis, their "
                             f"product {k})")
    if block is None or placed_ranks(grid, k, block) == tuple(range(world)):
        return engine  # the launcher's numbering already
    return replace(engine, gpus_per_node=k, node_block=block)


def grid_rank(engine: EngineConfig, grid: GridShape, process_rank: int) -> int:
    """The grid rank of process ``process_rank`` under ``engine``'s placement (the shard a
    process loads is its grid rank's)."""
    if engine.node_block is None:
        return process_rank
    return placed_ranks(grid, engine.gpus_per_node, engine.node_block).index(process_rank)
