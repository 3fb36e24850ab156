"""The X×Y×Z process grid on torch.distributed: a DeviceMesh with named axes x, y, z.

Rank order is that of `plexus_partition.model.grid.GridShape`: ``rank = (x·Y + y)·Z + z``. z is the
innermost (fastest-varying) axis, so the Z ranks that share an (x, y) are consecutive: on a
cluster launched node by node they sit on one node, on the fastest links. Put the axis with the
heaviest traffic there, or give the grid a block per node (`Grid.create`'s ``node``: the grid's
ranks are then mapped onto the processes so that each node holds that block).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Mapping

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from plexus_partition.model.grid import AXES, GridShape
from plexus_partition.model.topology import node_text, placed_ranks, subgroups

from .twolevel import Levels


@dataclass
class Grid:
    """This rank's place in the grid and the process group of each axis (and, once asked
    for, the sub-groups of a split axis's two-level collectives, `levels`)."""

    mesh: DeviceMesh
    device: torch.device
    shape: GridShape
    timeout_s: float | None = None  # how long a collective of a group made here may wait
    #: ranks on nodes of ``gpus_per_node``, each node holding the grid block ``node`` (x, y, z
    #: ranks; None: the launcher's numbering, grid rank = process rank)
    gpus_per_node: int | None = None
    node: tuple[int, int, int] | None = None
    _levels: dict = field(default_factory=dict, repr=False, compare=False)
    _ranks: tuple[int, ...] = field(default=(), repr=False, compare=False)
    _me: int = field(default=0, repr=False, compare=False)

    @classmethod
    def create(cls, shape: GridShape | str | Mapping[str, int] | tuple[int, int, int],
               device: torch.device | str = "cpu", timeout_s: float | None = None,
               gpus_per_node: int | None = None, node: tuple[int, int, int] | None = None
               ) -> "Grid":
        """Build the grid over the current default process group (X·Y·Z must equal its size).

        ``gpus_per_node`` and ``node``: process rank r sits on node r // K and each node holds
        the block ``node`` of the grid (`plexus_partition.model.topology.placed_ranks`), so
        that an axis's heaviest traffic stays inside a node; the grid's rank (`rank`, what a
        shard and every coordinate are cut by) is then this process's position in that map,
        and process rank 0 is always grid rank 0. None: grid rank = process rank.

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
        ranks = placed_ranks(shape, gpus_per_node, node)
        if node is None or ranks == tuple(range(len(ranks))):
            mesh = init_device_mesh(device.type, shape.dims, mesh_dim_names=AXES,
                                    backend_override=override)
            return cls(mesh, device, shape, timeout_s, gpus_per_node, None)
        layout = torch.tensor(ranks, dtype=torch.int64).reshape(shape.dims)
        mesh = DeviceMesh(device.type, layout, mesh_dim_names=AXES,
                          backend_override=None if override is None else
                          tuple(override[a] for a in AXES))
        return cls(mesh, device, shape, timeout_s, gpus_per_node, tuple(node), _ranks=ranks,
                   _me=ranks.index(dist.get_rank()))

    @property
    def dims(self) -> tuple[int, int, int]:
        return self.shape.dims

    @property
    def coords(self) -> dict[str, int]:
        """Axis name -> this rank's coordinate."""
        return self.shape.coords(self.rank)

    @property
    def rank(self) -> int:
        """This process's rank in the grid (its coordinates' (x·Y + y)·Z + z): the process
        rank, unless the grid places ranks on nodes by blocks (``node``)."""
        return self._me if self._ranks else dist.get_rank()

    @property
    def ranks(self) -> tuple[int, ...]:
        """The process rank at each grid rank."""
        return self._ranks or tuple(range(self.world_size))

    def placement(self) -> str:
        """How the ranks sit, in words (`plexus_partition.model.topology.node_text`)."""
        return node_text(self.gpus_per_node, self.node)

    def process_rank(self, grid_rank: int) -> int:
        """The process (torch.distributed) rank at grid rank ``grid_rank``."""
        return self._ranks[grid_rank] if self._ranks else grid_rank

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
            intra, inter = ([[self.process_rank(r) for r in ranks] for ranks in lists]
                            for lists in subgroups(self.shape, axis, per_node))
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
