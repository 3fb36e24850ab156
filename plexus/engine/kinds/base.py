"""What every built-in kind's torch code is: a `KindLayer`, the engine's half of a kind whose
torch-free half, its spec (parameters, widths, flops, memory, options), is
`plexus_partition.model.ops` (``OPERATORS[name]``).

A layer holds its spec (``self.spec``) and writes the stage on the grid with the stage toolkit
(`stage`, on `plexus.engine.graph3d.StageGraph`: the engine's private API) and its serial
reference on the whole graph (`serial`, on `plexus.engine.serial.SerialModel`). The engine runs
every kind through `plexus.engine.stage.Stage3D` and `serial_of`; the dry run records the
collectives of `stage` (`plexus.engine.dryrun`).
"""

from __future__ import annotations

from typing import Any

import torch

from plexus_partition.model.layout import LayerPlan
from plexus_partition.model.ops import OPERATORS, KindSpec

#: named only (the stage that builds the toolkit and the serial model import this registry): the
#: stage toolkit `plexus.engine.graph3d.StageGraph`, the serial model
#: `plexus.engine.serial.SerialModel`
StageGraph = SerialModel = Any


class KindLayer:
    """The torch code of one built-in operator ``name`` (its spec: ``OPERATORS[name]``)."""

    name = ""

    def __init__(self) -> None:
        self.spec: KindSpec = OPERATORS[self.name]

    def stage(self, g: StageGraph, H: torch.Tensor, step: int | None) -> torch.Tensor:
        """The stage on the grid, written with the stage toolkit ``g``
        (`plexus.engine.graph3d.StageGraph`: ``g.linear``, ``g.aggregate``, ``g.conv``,
        ``g.dropout``, the edge operations; the parameter shards ``g.param(kind)``): H received
        (rows by o, columns by i), its output before the bias (the engine adds it, unless the
        spec's ``own_bias``). The earlier outputs the spec `reads` are ``g.outputs`` (in H's
        layout, not yet received); those it `carries` it puts in ``g.carried``, in its
        output's layout. What it issues is the schedule (a dry run records it; the toolkit
        names each collective)."""
        raise NotImplementedError

    def serial(self, m: SerialModel, p: LayerPlan, H: torch.Tensor,
               step: int | None) -> torch.Tensor:
        """The serial reference of the stage on the whole graph before its bias: ``m`` is the
        serial model (``m.adj``: Â as a torch sparse matrix, ``m.param(kind, stage)``, ``m.cfg``,
        ``m.seed``, ``m.training``, ``m.outputs``: the earlier outputs the spec `reads`);
        tensor methods only (``m.adj @ X``)."""
        raise NotImplementedError
