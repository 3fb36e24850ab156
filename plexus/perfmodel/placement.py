"""Where a grid's ranks sit on a GPU cluster, and so which link each axis's collectives cross.

Launchers number ranks node by node (torchrun and srun fill a node's GPUs with consecutive
ranks), and a grid numbers them rank = (x·Y + y)·Z + z
(`plexus_partition.model.grid.GridShape.coords`), so z is the fastest-varying axis. The ranks of one
collective along an axis with stride s (z: 1, y: Z, x: Y·Z) and size p are b, b + s, ..., b +
(p-1)·s. Every such group lies inside one node exactly when the job fits in one node or s·p divides
the GPUs per node G (aligned blocks of s·p consecutive ranks): link class "intra". Otherwise the
group crosses the network: with s dividing G and G dividing s·p, each of its p·s/G nodes holds
k = G/s of its ranks, and a ring crosses each node boundary on k NICs at once ("strided4" for
k >= 4, "strided" for 2 or 3);
with s >= G (or an irregular split) its ranks are on separate nodes, one NIC each ("inter").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from plexus_partition.model.grid import AXES

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

    def axis_split(self, shape: Mapping[str, int]) -> dict[str, tuple[int, int]]:
        """{axis: (k, m)}: each group of the axis on grid ``shape`` is k ranks on each of m
        nodes (k·m = the axis's size; (p, 1) inside one node, (1, p) one rank per node or an
        irregular split)."""
        world = shape["x"] * shape["y"] * shape["z"]
        stride = {"z": 1, "y": shape["z"], "x": shape["y"] * shape["z"]}
        g = self.gpus_per_node
        out = {}
        for axis in AXES:
            p, s = shape[axis], stride[axis]
            if p == 1 or world <= g or g % (s * p) == 0:
                out[axis] = (p, 1)
            elif s < g and g % s == 0 and (s * p) % g == 0:
                out[axis] = (g // s, p * s // g)
            else:
                out[axis] = (1, p)
        return out

    def axis_links(self, shape: Mapping[str, int]) -> dict[str, str]:
        """{axis: "intra", "strided4", "strided" or "inter"}: the link class each axis's collectives cross
        on grid ``shape`` ({"x": X, "y": Y, "z": Z}); an axis of size 1 moves nothing
        ("intra")."""
        return {axis: "intra" if m == 1 else "strided4" if k >= 4 else "strided" if k > 1
                else "inter" for axis, (k, m) in self.axis_split(shape).items()}


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
