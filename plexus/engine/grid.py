"""The X×Y×Z process grid on torch.distributed: a DeviceMesh with named axes x, y, z.

Rank order is that of `plexus_partition.model.grid.GridShape`: ``rank = (x·Y + y)·Z + z``. z is the
innermost (fastest-varying) axis, so the Z ranks that share an (x, y) are consecutive: on a
cluster launched node by node they sit on one node, on the fastest links. Put the axis with the
heaviest traffic there (layer 0's depth axis, z, carries the all-gathers of H and W).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Mapping

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from plexus_partition.model.grid import AXES, GridShape


@dataclass
class Grid:
    """This rank's place in the grid and the process group of each axis."""

    mesh: DeviceMesh
    device: torch.device
    shape: GridShape

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
        return cls(mesh, device, shape)

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
