"""The arguments of `plexus.nn.Network` and of a `Layer`'s declarations checked before anything
is built (issue 56, item 5): one `plexus.engine.arguments.ArgumentError` line naming what is
wrong (a graph that is None, a ``torch.nn.Linear`` where a `Layer` goes, a parameter named
``"../x"`` or declared twice, a width that is no whole number in the bounds table's range), never
an ``AttributeError`` from deep inside the build."""

from __future__ import annotations

import numbers
from typing import Any

from torch import nn

from plexus_partition.model.bounds import MAX_WIDTH

from plexus_datasets import Graph
from plexus.engine.arguments import ArgumentError, check_kind, check_name, shown
from plexus.engine.grid import Grid


def check_network(graph: Any, grid: Any, layers: Any, layer_class: type) -> None:
    """`Network`'s graph (a `plexus_datasets.Graph`), grid (a `plexus.engine.grid.Grid`) and
    layers (a non-empty list or tuple of ``layer_class``, `plexus.nn.Layer`)."""
    check_kind(graph, Graph, "Network", "graph")
    check_kind(grid, Grid, "Network", "grid")
    if not isinstance(layers, (list, tuple, nn.ModuleList)) or not layers:
        raise ArgumentError(f"Network: layers must be a non-empty list of plexus.nn.Layer, got "
                            f"{shown(layers)}")
    for i, layer in enumerate(layers):
        if not isinstance(layer, layer_class):
            hint = (" (a torch module: write it as a plexus.nn.Layer, its weight declared with "
                    "self.weight(name), its forward with g.linear)"
                    if isinstance(layer, nn.Module) else "")
            raise ArgumentError(f"Network: layer {i} is a {type(layer).__module__}."
                                f"{type(layer).__name__}, not a plexus.nn.Layer{hint}")


def check_declared(layer: Any, name: Any, kind: str) -> None:
    """A parameter ``layer`` declares (``kind``: weight, vector or scalar): an identifier not
    declared before and not an attribute the layer already has."""
    where = f"{type(layer).__name__}.{kind}"
    taken = {n for n, _, _ in layer.declared}
    check_name(name, taken, where)
    if name not in taken and (name in layer.__dict__ or name in dir(type(layer))
                              or name in layer._modules):
        raise ArgumentError(f"{where}: {name!r} is already an attribute of the layer; give the "
                            "parameter another name")


def check_width(owner: Any, value: Any, what: str) -> int:
    """A width ``owner`` (a `Layer`, a `BatchNorm`) is made with: a whole number in the table's
    [1, MAX_WIDTH] (`plexus_partition.model.bounds`, as --hidden's). Checked when it is made:
    the `Network` draws each weight at full size on every rank, where None or 2.5 was a bare
    TypeError from torch.rand and 10**12 an allocation of terabytes."""
    if (isinstance(value, bool) or not isinstance(value, numbers.Integral)
            or not 1 <= value <= MAX_WIDTH):
        raise ArgumentError(f"{type(owner).__name__}: {what} must be an integer in "
                            f"[1, {MAX_WIDTH}], got {shown(value)}")
    return int(value)
