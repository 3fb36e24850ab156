"""The X×Y×Z process grid on torch.distributed, as a DeviceMesh with named axes x, y, z.

Rank order: ``rank = (x·Y + y)·Z + z``. z is the innermost (fastest-varying) axis, so the Z ranks
that share an (x, y) are consecutive: on a cluster launched node by node they sit on one node, on
the fastest links. Put the axis with the heaviest traffic there (layer 0's depth axis, z, carries
the all-gathers of H and W).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from .schedule import AXES


def parse_grid(text: str) -> tuple[int, int, int]:
    """"2x2x4" -> (2, 2, 4). Raises ValueError with the expected form on bad input."""
    m = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+)\s*[xX]\s*(\d+)\s*", text)
    if not m or min(int(g) for g in m.groups()) < 1:
        raise ValueError(f"bad grid {text!r}: expected XxYxZ with positive integers, e.g. 2x2x4")
    return tuple(int(g) for g in m.groups())  # type: ignore[return-value]


@dataclass
class Grid:
    """This rank's place in the grid and the process group of each axis."""

    mesh: DeviceMesh
    device: torch.device

    @classmethod
    def create(cls, dims: tuple[int, int, int], device: torch.device | str = "cpu") -> "Grid":
        """Build the grid over the current default process group (X·Y·Z must equal its size)."""
        device = torch.device(device)
        world = dist.get_world_size()
        if dims[0] * dims[1] * dims[2] != world:
            raise ValueError(f"grid {dims[0]}x{dims[1]}x{dims[2]} has {dims[0] * dims[1] * dims[2]}"
                             f" ranks but the job has {world}; make X·Y·Z equal the world size")
        mesh = init_device_mesh(device.type, dims, mesh_dim_names=AXES)
        return cls(mesh, device)

    @property
    def dims(self) -> tuple[int, int, int]:
        return tuple(self.mesh.shape)  # type: ignore[return-value]

    @property
    def shape(self) -> dict[str, int]:
        """Axis name -> size."""
        return dict(zip(AXES, self.mesh.shape))

    @property
    def coords(self) -> dict[str, int]:
        """Axis name -> this rank's coordinate."""
        return dict(zip(AXES, self.mesh.get_coordinate()))

    @property
    def rank(self) -> int:
        return dist.get_rank()

    @property
    def world_size(self) -> int:
        return dist.get_world_size()

    def group(self, axis: str) -> dist.ProcessGroup:
        """The process group of the ranks that differ from this one only along ``axis``."""
        return self.mesh.get_group(axis)

    def size(self, axis: str) -> int:
        return self.shape[axis]

    def __str__(self) -> str:
        return "x".join(str(d) for d in self.dims)
