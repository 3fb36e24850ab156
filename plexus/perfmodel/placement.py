"""Where a grid's ranks sit on a GPU cluster, and so which link each axis's collectives cross.

Launchers number ranks node by node (torchrun and srun fill a node's GPUs with consecutive
ranks), and a grid numbers them rank = (x·Y + y)·Z + z
(`plexus_partition.model.grid.GridShape.coords`), so z is the fastest-varying axis. The ranks of one
collective along an axis with stride s (z: 1, y: Z, x: Y·Z) and size p are b, b + s, ..., b +
(p-1)·s; every such group lies inside one node exactly when the job fits in one node or s·p divides
the GPUs per node (aligned blocks of s·p consecutive ranks); otherwise some group crosses the
network, and as a ring runs at the pace of its slowest link, the axis is priced with the "inter"
link class. The rule, with how a collective splits into a node's and the network's parts, is
`plexus_partition.model.topology`'s (the engine builds its groups and counts its ledger by it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from plexus_partition.model.topology import axis_links

from .calibration import Calibration


@dataclass(frozen=True)
class Placement:
    """Ranks on nodes of ``gpus_per_node`` GPUs, one rank per GPU, numbered node by node."""

    gpus_per_node: int

    def __post_init__(self) -> None:
        if isinstance(self.gpus_per_node, bool) or not isinstance(self.gpus_per_node, int) \
                or self.gpus_per_node < 1:
            raise ValueError(f"GPUs per node must be a whole number >= 1, got "
                             f"{self.gpus_per_node!r}")

    def nodes(self, world_size: int) -> int:
        """Nodes a job of ``world_size`` ranks takes."""
        return -(-world_size // self.gpus_per_node)

    def axis_links(self, shape: Mapping[str, int]) -> dict[str, str]:
        """{axis: "intra" or "inter"}: the link class each axis's collectives cross on grid
        ``shape`` ({"x": X, "y": Y, "z": Z}); an axis of size 1 moves nothing ("intra"). The
        rule is `plexus_partition.model.topology.axis_links`, the engine's."""
        return axis_links(shape, self.gpus_per_node)

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
