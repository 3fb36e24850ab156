"""The collectives of a dry run (`plexus.engine.dryrun`): a `DryComm` on a `DryGrid`, one
simulated rank whose collectives keep their shapes but move nothing (an all-reduce returns its
input, an all-gather repeats it p times, a reduce-scatter keeps the first 1/p of the rows) and
record every call (`Call`) in a `Ledger`, as the real `Comm` does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

from plexus_partition.model.grid import GridShape

from .comm import Comm, Label
from .ledger import Ledger
from .timing import Timers


@dataclass
class DryGrid:
    """A grid stand-in for one simulated rank: axis sizes and this rank's coordinates, no
    process group."""

    shape: GridShape
    coords: dict[str, int]
    device: torch.device = torch.device("cpu")

    def size(self, axis: str) -> int:
        return self.shape[axis]


class Call(NamedTuple):
    """One collective a dry run recorded: what the ledger keys (phase, op, axis, size, item
    size), whether it was sent exactly, an all-reduce's operation, and its `Label`'s name,
    sparse exchange and (where it says so) the tensor's rows."""

    phase: str
    op: str
    axis: str
    size: int
    itemsize: int
    exact: bool
    reduce: str
    name: str
    sparse: str | None
    rows: int | None


class DryComm(Comm):
    """A `Comm` whose raw collectives keep shapes but move nothing, and record each call in
    the ledger (as `Comm.record` does) with whether it was issued exactly (a statistic)."""

    def __init__(self, grid: DryGrid, wire: torch.dtype | None = None) -> None:
        super().__init__(grid, Ledger(), Timers(grid.device, enabled=False), budget=2 ** 40,
                         wire=wire)
        self.calls: list[Call] = []
        self._reduce, self._rows = "sum", 0

    def record(self, axis, op, numel, p, itemsize, form="flat"):  # noqa: D102
        super().record(axis, op, numel, p, itemsize, form)
        label = self._label or Label()
        back = self._phase == "backward"
        self.calls.append(Call(self._phase, op, axis, int(numel), int(itemsize), self._exact,
                               self._reduce, label.backward if back else label.forward,
                               label.sparse, self._rows if label.rows else None))

    def _itemsize(self, x: torch.Tensor, op: str = "sum") -> int:
        wire = self.wire_of(x) if op == "sum" else None
        return wire.itemsize if wire is not None else x.element_size()

    def raw_all_reduce(self, x, axis, op="sum", async_op=False):  # noqa: D102
        p = self.grid.size(axis)
        if p > 1:
            self._reduce, self._rows = op, x.shape[0]
            self.record(axis, "all_reduce", x.numel(), p, self._itemsize(x, op))
            self._reduce = "sum"
        return None if async_op else x

    def wait(self, work, axis):  # noqa: D102
        return None

    def raw_all_gather(self, x, axis):  # noqa: D102
        p = self.grid.size(axis)
        if p == 1:
            return x
        out = x.repeat((p,) + (1,) * (x.dim() - 1))
        self._rows = out.shape[0]
        self.record(axis, "all_gather", out.numel(), p, self._itemsize(x))
        return out

    def raw_reduce_scatter(self, x, axis):  # noqa: D102
        p = self.grid.size(axis)
        if p == 1:
            return x
        self._rows = x.shape[0]
        self.record(axis, "reduce_scatter", x.numel(), p, self._itemsize(x))
        return x[: x.shape[0] // p].clone()
