"""The layouts of the tensors a `plexus.nn` layer works on, carried by the tensors themselves.

A layer's tensors are blocks of matrices cut over the grid; which matrix and which cut is the
tensor's layout, named by what its rows and columns are:

- ``nodes×in``: the layer's input (rows: its input nodes, Â's columns; columns: in_features);
- ``nodes×out``: ``g.linear`` of it in an order="combine" layer (columns: out_features);
- ``Â-rows×in`` / ``Â-rows×out``: after ``g.aggregate`` or ``g.to_rows`` (rows: Â's rows, where
  the aggregation lands); ``Â-rows×out`` is a graph layer's output;
- ``nodes×heads`` / ``Â-rows×heads``: per-node scores of ``g.head_sums``;
- ``edges``: per-edge values of this rank's block of Â (``g.sddmm``, ``g.edge_values``, ...).

- ``weight``, ``vector``, ``scalar``: a layer's own parameters inside its forward
  (`param_view`); ``scalar (replicated)``: ``g.replicate(self.<scalar>)``; ``<layout>/row``: one
  value per row of a layout (``g.row_norm``).

On one rank (1x1x1) every block is the whole matrix, so shapes often match where layouts do
not; on a grid they are different blocks, and mixing them is wrong. `LaidTensor` carries the
layout as a plain Python attribute: each torch operation on such tensors refuses operands of
different layouts, parameters used without their collective (their gradient would miss the
other ranks' parts), and reductions, contractions and reshapes over cut rows or columns, with a
one-line `LayoutError`. The check costs a few Python operations per torch call (no device work,
nothing that grows with the graph; benchmarks/nn_checks.py measures it).
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


#: the layouts of a layer's own parameters (its shards, as ``self.<name>`` inside forward):
#: each has one collective that makes its use right on a grid, so using it otherwise is refused
WEIGHT, VECTOR, SCALAR = "weight", "vector", "scalar"
PARAMS = (WEIGHT, VECTOR, SCALAR)
#: ``g.replicate(self.<scalar>)``: a scalar whose gradient is summed over the axes the tensor it
#: meets is cut or used over (the layer's toolkit marks it when it meets one)
REPLICATED = "scalar (replicated)"
ROW = "/row"  # suffix: one value per row of a layout (``g.row_norm``), complete over its columns

#: each parameter's use: the fix a message names
USE = {WEIGHT: "g.linear(x, self.{name})",
       VECTOR: "g.add_bias(out, self.{name}) (or g.head_sums(x, self.{name}, ...))",
       SCALAR: "g.replicate(self.{name}) (its gradient then sums every rank's part)"}

#: torch operations that reduce over a dimension (or the whole tensor)
REDUCTIONS = frozenset("""sum mean norm normalize softmax log_softmax softmin max min amax amin
    argmax argmin prod std var std_mean var_mean logsumexp cumsum cumprod cummax cummin
    vector_norm linalg_vector_norm matrix_norm layer_norm group_norm median nansum nanmean topk
    sort argsort all any count_nonzero kthvalue mode""".split())
#: torch operations contracting a column dimension with a plain matrix (a weight's job)
CONTRACTIONS = frozenset("""matmul mm addmm bmm baddbmm einsum linear bilinear tensordot inner
    dot mv addmv __matmul__ __rmatmul__""".split())
#: torch operations that move elements between rows or columns: on a cut tensor each rank's
#: block would be sliced, reshaped or joined as if it were the whole matrix
STRUCTURE = frozenset("""__getitem__ view reshape narrow split chunk tensor_split unbind cat
    concat concatenate stack hstack vstack t transpose permute flatten unflatten gather
    index_select take roll flip repeat tile""".split())


class LaidTensor(torch.Tensor):
    """A tensor whose layout (`plexus_layout`, one of this module's names) travels with it
    through torch operations; operations mixing layouts, reductions or reshapes over cut rows
    or columns, and parameters used without their collective raise `LayoutError`."""

    plexus_layout: str = ""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):  # noqa: D105
        kwargs = kwargs or {}
        layouts, params, marked, raw = [], {}, None, None
        for a in _tensors(args, kwargs):
            if isinstance(a, LaidTensor):
                lay = a.plexus_layout
                if lay in PARAMS:
                    params.setdefault(lay, getattr(a, "plexus_name", "<parameter>"))
                elif lay == REPLICATED:
                    marked = a
                elif lay not in layouts:
                    layouts.append(lay)
            elif isinstance(a, nn.Parameter):
                raw = a
        name = _name(func)
        layouts = _merge_rows(name, layouts)
        if params and layouts:
            kind, pname = next(iter(params.items()))
            raise LayoutError(
                f"{name}: the {kind} self.{pname} used directly on a {layouts[0]} tensor "
                f"(on a grid its gradient would miss the other ranks' parts): use "
                + USE[kind].format(name=pname))
        if len(params) > 1:
            (k1, n1), (k2, n2) = list(params.items())[:2]
            raise LayoutError(f"{name}: the {k1} self.{n1} and the {k2} self.{n2} are cut "
                              "differently on a grid: combine each with the layer's tensors "
                              "through its own g operation")
        if layouts and raw is not None:
            raise LayoutError(
                f"{name}: a parameter shard used directly on a {layouts[0]} tensor (its "
                "gradient would miss the other ranks' parts): use g.linear(x, self.<weight>), "
                "g.add_bias(out, self.<vector>) or g.replicate(self.<scalar>)")
        if marked is not None and params and not layouts:
            kind, pname = next(iter(params.items()))
            raise LayoutError(f"{name}: a replicated scalar with the {kind} self.{pname}: "
                              "the scalar's gradient would miss the other ranks' blocks of "
                              f"it: scale the layer's tensor instead (e.g. "
                              f"t * {USE[kind].format(name=pname).split(' (')[0]})")
        layout = layouts[0] if layouts else next(iter(params), None)
        if layout is not None:
            _refuse_cut(name, func, layout, args, kwargs)
        if marked is not None and layouts:  # a replicated scalar meets a layer tensor
            args, kwargs = _substitute(args, kwargs, marked, layouts[0])
        with torch._C.DisableTorchFunctionSubclass():
            out = func(*args, **kwargs)
        if layout is None and marked is not None:  # e.g. 1 + g.replicate(self.eps)
            return _wrap_all(out, REPLICATED, marked.plexus_mark)
        out = _wrap_all(out, layout) if layout else out
        if layout in params and isinstance(out, LaidTensor):  # e.g. 1 + self.eps: still eps
            out.plexus_name = params[layout]
        return out


def _merge_rows(name: str, layouts: list[str]) -> list[str]:
    """Layouts with per-row values (``L/row``) folded into their layout ``L`` (they broadcast
    over its columns); raises `LayoutError` for two different layouts."""
    if len(layouts) > 1:
        bases = {l[:-len(ROW)] if l.endswith(ROW) else l for l in layouts}
        if len(bases) == 1:
            return [bases.pop()]
        a, b = layouts[:2]
        raise LayoutError(f"{name}: operands in different layouts {a} and {b} (different "
                          f"blocks on a grid): {_fix(a, b)}")
    return layouts


def _refuse_cut(name: str, func, layout: str, args, kwargs) -> None:
    """Refuse operations over cut dimensions of a ``layout`` tensor: reductions (over a weight's
    or vector's elements, over a node tensor's rows or cut columns), contractions and
    reshapes of node tensors' blocks."""
    bare = name.removeprefix("torch.")
    if layout == SCALAR or layout.endswith(ROW):
        return  # a scalar is whole on every rank; a row's value too
    if layout in PARAMS:
        if bare in REDUCTIONS:
            raise LayoutError(f"{name} over a {layout}'s elements: each rank holds a block of "
                              "it, so the reduction would see this rank's block only")
        return
    cut_cols = layout.endswith("×in") or layout.endswith("×out")
    if bare in REDUCTIONS and (cut_cols or _dim(bare, args, kwargs) not in (1, -1)):
        fix = _reduction_fix(bare) if cut_cols else "reduce over dim=1 (the heads) only"
        raise LayoutError(f"{name} over a {layout} tensor: its rows{' and columns' if cut_cols else ''}"
                          f" are cut over the grid, so a reduction sees this rank's block "
                          f"only: {fix}")
    if bare in CONTRACTIONS:
        raise LayoutError(f"{name} of a {layout} tensor with a plain matrix: its columns are "
                          "cut over the grid: use g.linear(x, self.<weight>) (a declared "
                          "weight, gathered and all-reduced)")
    if bare in STRUCTURE and cut_cols:
        raise LayoutError(f"{name} of a {layout} tensor: each rank holds a block of its rows "
                          "and columns, so slicing, reshaping or joining it differs per grid: "
                          "use g's operations (elementwise torch operations are fine)")


#: reductions that are a row's 2-norm, which g all-reduces over the columns' axis
NORMS = frozenset("norm normalize vector_norm linalg_vector_norm".split())


def _reduction_fix(bare: str) -> str:
    """The fix for a reduction over a node tensor's cut columns, by what it computes."""
    if bare in NORMS:
        return ("g.row_norm(x) or g.normalize_rows(x) for a row's 2-norm (all-reduced over the "
                "columns' axis)")
    if bare in ("softmax", "log_softmax", "softmin", "logsumexp"):
        return ("plexus.nn has no softmax over a node's features: the loss takes the softmax "
                "over the classes itself (return the logits), g.edge_softmax normalizes over "
                "a node's edges")
    return ("plexus.nn has no plain reduction over a node's features (a sum, mean, max, ...): "
            "a learnt one is g.linear(x, self.<weight>); g.row_norm(x) gives a row's 2-norm")


def _dim(name: str, args, kwargs):
    """The ``dim`` a reduction was given (None: over the whole tensor)."""
    if "dim" in kwargs:
        return kwargs["dim"]
    at = 2 if name in ("norm", "normalize", "vector_norm", "linalg_vector_norm") else 1
    return args[at] if len(args) > at and isinstance(args[at], int) else None


def _substitute(args, kwargs, marked: "LaidTensor", layout: str):
    """``marked`` (a replicated scalar) in ``args``/``kwargs`` replaced by its use marked for
    ``layout`` (`plexus.nn.graph.LayerGraph`'s rule: its gradient summed over that layout's
    cut and partial axes)."""
    dtype = next((t.dtype for t in _tensors(args, kwargs) if layout_of(t) not in
                   (None, REPLICATED, *PARAMS)), None)

    def swap(a):
        if a is marked:
            return marked.plexus_mark(plain(a), layout, dtype)
        if isinstance(a, (list, tuple)) and not hasattr(a, "_fields"):
            return type(a)(swap(x) for x in a)
        return a
    return tuple(swap(a) for a in args), {k: swap(v) for k, v in kwargs.items()}


def param_view(p: torch.Tensor, kind: str, name: str) -> LaidTensor:
    """Parameter shard ``p`` as a layer's forward sees it: tagged with its ``kind`` (weight,
    vector, scalar) and ``name``, for the messages."""
    out = laid(p, kind)
    out.plexus_name = name
    return out


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


def _wrap_all(out: Any, layout: str, mark=None) -> Any:
    if isinstance(out, torch.Tensor):
        t = laid(out, layout)
        if mark is not None:
            t.plexus_mark = mark
        return t
    if isinstance(out, (list, tuple)) and any(isinstance(t, torch.Tensor) for t in out):
        items = [_wrap_all(t, layout, mark) for t in out]
        return type(out)(*items) if hasattr(out, "_fields") else type(out)(items)
    return out


def _name(func) -> str:
    name = getattr(func, "__name__", str(func))
    return {"__add__": "+", "__radd__": "+", "__iadd__": "+=", "__sub__": "-", "__rsub__": "-",
            "__mul__": "*", "__rmul__": "*", "__matmul__": "@", "__rmatmul__": "@",
            "__truediv__": "/"}.get(name, f"torch.{name}")
