"""The X×Y×Z process grid on torch.distributed: a DeviceMesh with named axes x, y, z.

Rank order is that of `plexus_partition.model.grid.GridShape`: ``rank = (x·Y + y)·Z + z``. z is the
innermost (fastest-varying) axis, so the Z ranks that share an (x, y) are consecutive: on a
cluster launched node by node they sit on one node, on the fastest links. Put the axis with the
heaviest traffic there (layer 0's depth axis, z, carries the all-gathers of H and W).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Mapping

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from plexus_partition.model.grid import AXES, GridShape
from plexus_partition.model.topology import subgroups

from .twolevel import Levels


@dataclass
class Grid:
    """This rank's place in the grid and the process group of each axis (and, once asked
    for, the sub-groups of a split axis's two-level collectives, `levels`)."""

    mesh: DeviceMesh
    device: torch.device
    shape: GridShape
    timeout_s: float | None = None  # how long a collective of a group made here may wait
    _levels: dict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def create(cls, shape: GridShape | str | Mapping[str, int] | tuple[int, int, int],
               device: torch.device | str = "cpu", timeout_s: float | None = None) -> "Grid":
        """Build the grid over the current default process group (X·Y·Z must equal its size).

        ``timeout_s`` is how long a collective of an axis group may wait for a peer (None:
        PyTorch's default, 30 minutes on gloo). The axis groups are new process groups, which do
        not inherit the default group's timeout: a job's timeout must be given here too.
        """
        shape = GridShape.of(shape)
        shape.check_world(dist.get_world_size())
        device = torch.device(device)
        override = None
        if timeout_s is not None:
            options = _group_options(dist.get_backend(), timedelta(seconds=timeout_s))
            override = {axis: (dist.get_backend(), options) for axis in AXES}
        mesh = init_device_mesh(device.type, shape.dims, mesh_dim_names=AXES,
                                backend_override=override)
        return cls(mesh, device, shape, timeout_s)

    @property
    def dims(self) -> tuple[int, int, int]:
        return self.shape.dims

    @property
    def coords(self) -> dict[str, int]:
        """Axis name -> this rank's coordinate."""
        return self.shape.coords(self.rank)

    @property
    def rank(self) -> int:
        return dist.get_rank()

    @property
    def world_size(self) -> int:
        return self.shape.world_size

    def group(self, axis: str) -> dist.ProcessGroup:
        """The process group of the ranks that differ from this one only along ``axis``."""
        return self.mesh.get_group(axis)

    def levels(self, axis: str, per_node: int, staged: bool = False) -> Levels:
        """This rank's sub-groups of ``axis`` split into nodes of ``per_node`` of its ranks
        (`plexus_partition.model.topology.subgroups`). The first call for an axis is a
        collective of the whole world: every rank makes it, axis by axis in the same order
        (`plexus.engine.comm.Comm.place` does, at set-up); the groups are kept on the grid."""
        if (axis, per_node) not in self._levels:
            intra, inter = subgroups(self.shape, axis, per_node)
            timeout = None if self.timeout_s is None else timedelta(seconds=self.timeout_s)
            mine = [dist.new_subgroups_by_enumeration(lists, timeout=timeout)[0]
                    for lists in (intra, inter)]
            self._levels[axis, per_node] = (*mine, len(inter[0]))
        node, network, m = self._levels[axis, per_node]
        return Levels(node, network, per_node, m, staged)

    def size(self, axis: str) -> int:
        return self.shape[axis]

    def __str__(self) -> str:
        return str(self.shape)


def _group_options(backend: str, timeout: timedelta) -> Any:
    """Options of a new process group of ``backend`` whose collectives wait at most
    ``timeout`` (NCCL takes its own options class)."""
    if backend == "nccl":
        options = dist.ProcessGroupNCCL.Options()
        options._timeout = timeout
        return options
    return torch._C._distributed_c10d.Backend.Options(backend, timeout)
