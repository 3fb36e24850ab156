"""Where a grid's ranks sit on a GPU cluster, and so which link each axis's collectives cross.

Launchers number ranks node by node (torchrun and srun fill a node's GPUs with consecutive
ranks), and a grid numbers them rank = (x·Y + y)·Z + z
(`plexus_partition.model.grid.GridShape.coords`), so a node holds a block of the grid: as much of
z as fits, then of y, then of x. A group of an axis of size p with k of its ranks on each of its
m = p/k nodes is priced with link class "intra" when m = 1; across nodes, a ring crosses each
node boundary on k NICs at once: "strided4" for k >= 4, "strided" for 2 or 3, "inter" for one
rank per node (each on its own NIC; an irregular split is priced so, the slowest reading). The
rule of where ranks sit, and how a collective splits into a node's and the network's parts, is
`plexus_partition.model.topology`'s (the engine builds its groups and counts its ledger by it);
this module adds the model's link classes and the blocks it may choose from.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Mapping

from plexus_partition.model.grid import AXES
from plexus_partition.model.topology import AxisSpan, axis_span, node_block, ring_class

from .calibration import Calibration


@dataclass(frozen=True)
class Placement:
    """Ranks on nodes of ``gpus_per_node`` GPUs, one rank per GPU, numbered node by node.

    ``node``: how many ranks of each axis (x, y, z) a node holds (their product the GPUs per
    node), a block of the grid; None, the launcher's numbering with z fastest (a node holds
    consecutive ranks: as much of z as fits, then of y, then of x). ``arrange``: the model
    prices every such block (`arrangements`) and keeps the fastest (`estimate`)."""

    gpus_per_node: int
    node: tuple[int, int, int] | None = None
    arrange: bool = False

    def __post_init__(self) -> None:
        if (isinstance(self.gpus_per_node, bool) or not isinstance(self.gpus_per_node, int)
                or self.gpus_per_node < 1):
            raise ValueError(f"GPUs per node must be a whole number >= 1, got "
                             f"{self.gpus_per_node!r}")
        if self.node is not None and (len(self.node) != 3 or math.prod(self.node)
                                      != self.gpus_per_node or min(self.node) < 1):
            raise ValueError(f"a node's block of the grid must be 3 whole numbers whose "
                             f"product is {self.gpus_per_node}, got {self.node!r}")

    def nodes(self, world_size: int) -> int:
        """Nodes a job of ``world_size`` ranks takes."""
        return -(-world_size // self.gpus_per_node)

    def block(self, shape: Mapping[str, int]) -> tuple[int, int, int] | None:
        """(x, y, z) ranks per node on grid ``shape``
        (`plexus_partition.model.topology.node_block`: ``node`` where it tiles the grid, else
        the launcher's, z first; None where neither does)."""
        return node_block(shape, self.gpus_per_node, self.node)

    def arrangements(self, shape: Mapping[str, int]) -> list["Placement"]:
        """This placement with each block of ``gpus_per_node`` ranks that tiles grid
        ``shape`` (the launcher's first), for the model to choose from; only itself on one
        node or where no block tiles the grid."""
        g, world = self.gpus_per_node, shape["x"] * shape["y"] * shape["z"]
        mine = Placement(g, self.node)
        if world <= g or world % g:
            return [mine]
        blocks = [b for b in itertools.product(*(_divisors(shape[a]) for a in AXES))
                  if math.prod(b) == g]
        first = mine.block(shape)
        return [mine] + [Placement(g, b) for b in blocks if b != first]

    def spans(self, shape: Mapping[str, int]) -> dict[str, AxisSpan]:
        """{axis: how its groups sit on nodes} on grid ``shape``
        (`plexus_partition.model.topology.axis_span`)."""
        return {axis: axis_span(shape, axis, self.gpus_per_node, self.node) for axis in AXES}

    def axis_links(self, shape: Mapping[str, int]) -> dict[str, str]:
        """{axis: "intra", "strided4", "strided" or "inter"}: the link class each axis's
        collectives cross on grid ``shape`` ({"x": X, "y": Y, "z": Z}); an axis of size 1
        moves nothing ("intra")."""
        return {axis: ring_class(span) for axis, span in self.spans(shape).items()}


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def pricing(calibration: Calibration, ranks_per_host: int | None
            ) -> tuple[int | None, Placement | None]:
    """(ranks per host, placement) to price a job of ``ranks_per_host`` ranks on each host
    with: a CPU calibration's ranks share its cores (`Calibration.core_share`); a GPU
    calibration with link classes places them node by node, one rank per GPU; the built-in
    rates and profiles without a job's shape take neither (one rank per device)."""
    if not calibration.calibrated or not ranks_per_host:
        return None, None
    if calibration.device == "cpu":
        return ranks_per_host, None
    return None, Placement(ranks_per_host) if calibration.links else None
