"""The layouts of the tensors a `plexus.nn` layer works on, carried by the tensors themselves.

A layer's tensors are blocks of matrices cut over the grid; which matrix and which cut is the
tensor's layout, named by what its rows and columns are:

- ``nodes×in``: the layer's input (rows: its input nodes, Â's columns; columns: in_features);
- ``nodes×out``: ``g.linear`` of it in an order="combine" layer (columns: out_features);
- ``Â-rows×in`` / ``Â-rows×out``: after ``g.aggregate`` or ``g.to_rows`` (rows: Â's rows, where
  the aggregation lands); ``Â-rows×out`` is a graph layer's output;
- ``nodes×heads`` / ``Â-rows×heads``: per-node scores of ``g.head_sums``;
- ``edges``: per-edge values of this rank's block of Â (``g.sddmm``, ``g.edge_values``, ...).

On one rank (1x1x1) every block is the whole matrix, so shapes often match where layouts do
not; on a grid they are different blocks, and mixing them is wrong. `LaidTensor` carries the
layout as a plain Python attribute: each torch operation on such tensors refuses operands of
different layouts, and parameters used directly (their gradient would miss the other ranks'
parts), with a one-line `LayoutError`. The check costs a few Python operations per torch call
(no device work, nothing that grows with the graph).
"""

from __future__ import annotations

from typing import Any, Iterator

import torch
from torch import nn

NODES_IN, NODES_OUT = "nodes×in", "nodes×out"
ROWS_IN, ROWS_OUT = "Â-rows×in", "Â-rows×out"
EDGES = "edges"


def heads_of(layout: str) -> str:
    """The layout of per-node scores of a tensor of ``layout`` (same rows, one column per
    head)."""
    return layout.split("×")[0] + "×heads"


class LayoutError(ValueError):
    """Operands of a `plexus.nn` operation whose layouts do not fit it (the message names the
    operation, the layouts and the fix)."""


def _fix(a: str, b: str) -> str:
    """How to bring tensors of layouts ``a`` and ``b`` to one layout."""
    rows = {x.split("×")[0] for x in (a, b)}
    cols = {x.split("×")[-1] for x in (a, b)}
    if EDGES in (a, b):
        return ("per-edge tensors combine with per-edge tensors only; reach nodes with "
                "g.aggregate(x, values) or g.aggregate_weighted")
    if rows == {"nodes", "Â-rows"}:
        fix = "g.to_rows(x) moves a nodes× tensor to Â's rows (a node's own features)"
        return fix + ("; g.linear maps ×in to ×out" if len(cols) > 1 else "")
    return "g.linear(x, self.<weight>) maps ×in columns to ×out"


class LaidTensor(torch.Tensor):
    """A tensor whose layout (`plexus_layout`, one of this module's names) travels with it
    through torch operations; operations mixing layouts raise `LayoutError`."""

    plexus_layout: str = ""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):  # noqa: D105
        kwargs = kwargs or {}
        layouts, param = [], None
        for a in _tensors(args, kwargs):
            if isinstance(a, LaidTensor):
                if a.plexus_layout not in layouts:
                    layouts.append(a.plexus_layout)
            elif isinstance(a, nn.Parameter):
                param = a
        name = _name(func)
        if len(layouts) > 1:
            raise LayoutError(f"{name}: operands in different layouts {layouts[0]} and "
                              f"{layouts[1]} (different blocks on a grid): {_fix(*layouts[:2])}")
        if layouts and param is not None:
            raise LayoutError(
                f"{name}: a parameter shard used directly on a {layouts[0]} tensor (its "
                "gradient would miss the other ranks' parts): use g.linear(x, self.<weight>), "
                "g.add_bias(out, self.<vector>) or g.replicate(self.<scalar>, axis)")
        with torch._C.DisableTorchFunctionSubclass():
            out = func(*args, **kwargs)
        return _wrap_all(out, layouts[0]) if layouts else out


def laid(t: torch.Tensor, layout: str) -> LaidTensor:
    """``t`` tagged with ``layout`` (an alias: autograd flows through)."""
    out = t.as_subclass(LaidTensor)
    out.plexus_layout = layout
    return out


def plain(t: torch.Tensor) -> torch.Tensor:
    """``t`` as a plain tensor (an alias: autograd flows through), for the engine's code."""
    return t.as_subclass(torch.Tensor) if isinstance(t, LaidTensor) else t


def layout_of(t: Any) -> str | None:
    """The layout ``t`` carries, None for anything else."""
    return t.plexus_layout if isinstance(t, LaidTensor) else None


def _tensors(args, kwargs) -> Iterator[torch.Tensor]:
    for a in (*args, *kwargs.values()):
        if isinstance(a, (list, tuple)):
            yield from (x for x in a if isinstance(x, torch.Tensor))
        elif isinstance(a, torch.Tensor):
            yield a


def _wrap_all(out: Any, layout: str) -> Any:
    if isinstance(out, torch.Tensor):
        return laid(out, layout)
    if isinstance(out, (list, tuple)) and any(isinstance(t, torch.Tensor) for t in out):
        items = [_wrap_all(t, layout) for t in out]
        return type(out)(*items) if hasattr(out, "_fields") else type(out)(items)
    return out


def _name(func) -> str:
    name = getattr(func, "__name__", str(func))
    return {"__add__": "+", "__radd__": "+", "__iadd__": "+=", "__sub__": "-", "__rsub__": "-",
            "__mul__": "*", "__rmul__": "*", "__matmul__": "@", "__rmatmul__": "@",
            "__truediv__": "/"}.get(name, f"torch.{name}")
