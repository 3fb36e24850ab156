"""`LayerGraph`: the ``g`` a `plexus.nn.Layer` receives — the engine's graph operations
(`plexus.engine.graph3d.StageGraph`) with every operand's layout checked and every result's
layout attached (`plexus.nn.layouts`), and the graph's edge values."""

from __future__ import annotations

from typing import Callable

import numpy as np
import scipy.sparse as sp
import torch

from plexus.engine.graph3d import StageGraph

from .layouts import (EDGES, NODES_IN, NODES_OUT, PARAMS, REPLICATED, ROW, ROWS_IN, ROWS_OUT,
                      SCALAR, USE, VECTOR, WEIGHT, LayoutError, heads_of, laid, layout_of, plain)

AGG_FIRST = 'a layer that aggregates its input before its linear map declares order = "agg"'
LINEAR_FIRST = 'a layer whose linear map comes before its aggregation declares order = "combine"'


def output_layout(order: str) -> str:
    """The layout a layer of ``order`` returns: Â's rows (a graph layer) or its input's rows
    (a dense one), out_features columns."""
    return NODES_OUT if order == "dense" else ROWS_OUT


class LayerGraph:
    """The graph operations of one layer on this rank, as `StageGraph` (``stage``) has them,
    on tensors that carry their layouts: each refuses operands of another layout than the
    layer's order gives them with a one-line `LayoutError` (on every grid: 1x1x1 too).
    ``weights(ids)`` gives the graph's edge weights among nodes ``ids`` (sorted) as a sparse
    matrix with rows = destinations (`plexus_datasets.graph.incoming` of the induced
    subgraph), for `edge_weights`; ``name`` the layer's, for messages."""

    def __init__(self, stage: StageGraph, name: str,
                 weights: Callable[[np.ndarray], sp.csr_matrix] | None = None) -> None:
        self.stage, self.name, self._weights = stage, name, weights
        self.plan, self.comm = stage.plan, stage.comm
        self.order = stage.plan.order
        self._edge_weights: torch.Tensor | None = None
        # earlier layers' outputs in this layer's input layout (``nodes×in``), set by the
        # Network before each forward: those the layer declared with Layer.reads_output
        self.outputs: dict[int, torch.Tensor] = {}

    def col_block(self, width: int, axis: str | None = None) -> slice:
        """`StageGraph.col_block`: this rank's columns of a width cut by ``axis``."""
        return self.stage.col_block(width, axis)

    # ---- checks ------------------------------------------------------------------------------
    def _need(self, op: str, what: str, x, *layouts: str, fix: str = "") -> torch.Tensor:
        got = layout_of(x)
        if got is None:
            raise LayoutError(f"{self.name}: g.{op}: {what} carries no layout (a tensor made in "
                              "the layer, not derived from its input by g's operations): "
                              "derive it from x with g's operations")
        if got not in layouts:
            want = " or ".join(layouts)
            hint = fix or _move(got, layouts[0])
            raise LayoutError(f"{self.name}: g.{op}: {what} is {got} but an order=\"{self.order}\""
                              f" layer needs {want} here: {hint}")
        return plain(x)

    def _pre(self) -> str:
        """The layout this layer aggregates: its input (agg) or g.linear's output (combine)."""
        return NODES_IN if self.order == "agg" else NODES_OUT

    def _graph_layer(self, op: str) -> None:
        if self.order == "dense":
            raise LayoutError(f"{self.name}: g.{op}: an order=\"dense\" layer has no "
                              f"aggregation: {AGG_FIRST}, or \"combine\" if it combines first")

    def output(self, layer: int) -> torch.Tensor:
        """Layer ``layer``'s output (after its activation, before dropout: e.g. GCNII's H⁰) in
        this layer's input layout, ``nodes×in``; declared in ``__init__`` with
        ``self.reads_output(layer)``."""
        if layer not in self.outputs:
            raise LayoutError(f"{self.name}: g.output({layer}): not declared: call "
                              f"self.reads_output({layer}) in the layer's __init__")
        return self.outputs[layer]

    def carry(self, X: torch.Tensor) -> torch.Tensor:
        """X (``nodes×in``) in this layer's output layout (the next layer's input) unchanged:
        S·X then X·I (order "agg"), X·I then S·X ("combine"), X·I ("dense"): the collectives
        of `to_rows` and `linear`, no weight."""
        if self.order == "agg":
            return self.linear(self.to_rows(X), None, identity=1.0)
        X = self.linear(X, None, identity=1.0)
        return self.to_rows(X) if self.order == "combine" else X

    # ---- node tensors ------------------------------------------------------------------------
    def receive(self, H: torch.Tensor) -> torch.Tensor:
        """The layer's input (the `Network`'s part): ``nodes×in``."""
        return laid(self.stage.receive(plain(H)), NODES_IN)

    def dropout(self, H: torch.Tensor, p: float, step: int, layer: int | None = None
                ) -> torch.Tensor:
        """`StageGraph.dropout` of the layer's input (``nodes×in``)."""
        H = self._need("dropout", "x", H, NODES_IN)
        return laid(self.stage.dropout(H, p, step, layer), NODES_IN)

    def _param(self, op: str, what: str, p, kind: str) -> torch.Tensor:
        """A parameter operand: the layer's own ``kind`` (a view of it, or of a torch operation
        on it alone), as a plain tensor."""
        got = layout_of(p)
        if got != kind:
            have = (f"a {got}" if got in PARAMS else f"a {got} tensor" if got else
                    "a tensor without layout")
            raise LayoutError(f"{self.name}: g.{op}: {what} is {have}; it takes a {kind} "
                              f"declared with self.{kind}(name) in __init__ (self.<name> in "
                              "forward)")
        return plain(p)

    def linear(self, X: torch.Tensor, W: torch.Tensor | None, identity: float = 0.0
               ) -> torch.Tensor:
        """X·(W + identity·I) (`StageGraph.linear`): ``nodes×in`` → ``nodes×out`` in an
        order="combine" or "dense" layer, ``Â-rows×in`` → ``Â-rows×out`` in an order="agg"
        one. ``identity``: GCNII's identity mapping (X·((1-β)·I + β·W) is
        ``linear(X, self.w * β, identity=1 - β)``), in the same product; ``W`` None: X·I
        alone (the features moved to the output's columns, nothing learned)."""
        src = ROWS_IN if self.order == "agg" else NODES_IN
        fix = (f"g.aggregate(x) or g.to_rows(x) first (order \"agg\"), or {LINEAR_FIRST}"
               if self.order == "agg" else
               f"in an order=\"{self.order}\" layer g.linear takes the input x itself; "
               f"{AGG_FIRST}")
        X = self._need("linear", "x", X, src, fix=fix if layout_of(X) in
                       (NODES_IN, ROWS_IN) else "")
        if W is None and not identity:
            raise LayoutError(f"{self.name}: g.linear: no weight and identity=0 give zeros: "
                              "pass self.<weight>, identity=1.0 or both")
        W = None if W is None else self._param("linear", "the weight", W, WEIGHT)
        return laid(self.stage.linear(X, W, float(identity)), src.replace("×in", "×out"))

    def replicate(self, X: torch.Tensor, axis: str | None = None) -> torch.Tensor:
        """A scalar parameter (``g.replicate(self.<scalar>)``, no axis) as the layer uses it:
        wherever it meets a layer tensor its gradient is summed over the axes that tensor is
        cut or partially used over (every rank's part, each counted once). Any other tensor:
        `StageGraph.replicate` over ``axis``, its layout kept."""
        layout = layout_of(X)
        if layout == SCALAR:
            if axis is not None:
                raise LayoutError(f"{self.name}: g.replicate(self.<scalar>, {axis!r}): a "
                                  "scalar takes no axis (the toolkit sums its gradient over "
                                  "the axes of each use): g.replicate(self.<scalar>)")
            out = laid(plain(X), REPLICATED)
            out.plexus_mark = self._mark_scalar
            return out
        if layout in (WEIGHT, VECTOR):
            raise LayoutError(f"{self.name}: g.replicate of a {layout}: use "
                              + USE[layout].format(name=getattr(X, "plexus_name", "<name>")))
        if axis is None:
            raise LayoutError(f"{self.name}: g.replicate(x) of a {layout or 'plain'} tensor "
                              "needs the axis its users take different blocks over")
        Y = self.stage.replicate(plain(X), axis)
        return laid(Y, layout) if layout else Y

    def _mark_scalar(self, s: torch.Tensor, layout: str, dtype: torch.dtype | None
                     ) -> torch.Tensor:
        """A replicated scalar ``s`` where it meets a ``layout`` tensor: its gradient summed
        over the output's rows and columns axes for the output (and its per-row and per-head
        values: whole on their replicas), over every axis for the layer's inner tensors
        (cut by two axes, used partially over the third)."""
        out = output_layout(self.order)
        base = layout[:-len(ROW)] if layout.endswith(ROW) else layout
        p = self.plan
        axes = ((p.out_rows, p.out_cols) if base in (out, heads_of(out)) else
                tuple(self.comm.grid.shape))
        s = s.to(dtype) if dtype is not None else s
        for axis in axes:
            s = self.stage.replicate(s, axis)                 # bwd: AR(ds) over each
        return s

    def row_norm(self, X: torch.Tensor) -> torch.Tensor:
        """Each row's 2-norm of X (a ``×in`` or ``×out`` tensor: its columns cut over the
        grid), rows × 1, float32: `StageGraph.row_norm` (AR over the columns' axis). It
        combines with tensors of X's layout (broadcast over their columns)."""
        layout = layout_of(X)
        X = self._need("row_norm", "x", X, NODES_IN, NODES_OUT, ROWS_IN, ROWS_OUT,
                       fix="row norms are of node tensors (×in, ×out)")
        axis = self.plan.in_cols if layout.endswith("×in") else self.plan.out_cols
        return laid(self.stage.row_norm(X, axis), layout + ROW)

    def normalize_rows(self, X: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
        """X / max(‖X_i‖₂, eps) per row (``F.normalize(X, dim=1)`` over the whole row):
        `row_norm`'s AR over the columns' axis; X's layout."""
        norm = self.row_norm(X)
        return X / norm.clamp_min(eps).to(X.dtype)

    def to_nodes(self, X: torch.Tensor) -> torch.Tensor:
        """Sᵀ·X (`StageGraph.to_nodes`): an aggregation's rows back to the input's rows, for
        another hop in the same layer: ``Â-rows×in`` → ``nodes×in`` (order "agg"),
        ``Â-rows×out`` → ``nodes×out`` (order "combine")."""
        self._graph_layer("to_nodes")
        rows = self._pre().replace("nodes", "Â-rows")
        X = self._need("to_nodes", "x", X, rows)
        return laid(self.stage.to_nodes(X), self._pre())

    def aggregate(self, X: torch.Tensor, values: torch.Tensor | None = None) -> torch.Tensor:
        """Â·X (`StageGraph.aggregate`): ``nodes×in`` → ``Â-rows×in`` (order "agg"),
        ``nodes×out`` (g.linear's output) → ``Â-rows×out`` (order "combine"). ``values``
        (``edges``, edges × 1: e.g. `edge_values` or `edge_weights`, scaled or learned): the
        sum Σ_j v_ij·X_j over Â's edges instead."""
        self._graph_layer("aggregate")
        pre = self._pre()
        fix = AGG_FIRST if self.order == "combine" and layout_of(X) == NODES_IN else ""
        X = self._need("aggregate", "x", X, pre, fix=fix)
        if values is not None:
            values = self._need("aggregate", "values", values, EDGES)
            if values.dim() == 1:
                values = values[:, None]
            if values.shape[1] != 1:
                raise LayoutError(f"{self.name}: g.aggregate: values has {values.shape[1]} "
                                  "columns; give one per edge (edges × 1), or per head with "
                                  "g.aggregate_weighted")
            values = values.float()
        return laid(self.stage.aggregate(X, values), pre.replace("nodes", "Â-rows"))

    def to_rows(self, X: torch.Tensor) -> torch.Tensor:
        """S·X (`StageGraph.to_rows`): a node's own row where its aggregation lands,
        ``nodes×in`` → ``Â-rows×in`` (order "agg"), ``nodes×out`` → ``Â-rows×out``
        (order "combine")."""
        self._graph_layer("to_rows")
        pre = self._pre()
        X = self._need("to_rows", "x", X, pre)
        return laid(self.stage.to_rows(X), pre.replace("nodes", "Â-rows"))

    def head_sums(self, X: torch.Tensor, a: torch.Tensor, heads: int,
                  head_width: int) -> torch.Tensor:
        """`StageGraph.head_sums` of a ``×out`` tensor (columns cut like the output's):
        ``nodes×heads`` or ``Â-rows×heads``."""
        allowed = (NODES_OUT, ROWS_OUT) if self.order != "agg" else (ROWS_OUT,)
        layout = layout_of(X)
        X = self._need("head_sums", "x", X, *allowed)
        a = ([self._param("head_sums", "a", v, VECTOR) for v in a]
             if isinstance(a, (list, tuple)) else self._param("head_sums", "a", a, VECTOR))
        return laid(self.stage.head_sums(X, a, heads, head_width), heads_of(layout))

    def add_bias(self, OUT: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """OUT + b (`StageGraph.add_bias`) on the layer's output layout."""
        want = output_layout(self.order)
        OUT = self._need("add_bias", "out", OUT, want)
        b = self._param("add_bias", "the bias", b, VECTOR)
        return laid(self.stage.add_bias(OUT, b), want)

    # ---- per-edge tensors --------------------------------------------------------------------
    def _per_edge(self, op: str) -> None:
        self._graph_layer(op)
        if self.order != "combine":
            raise LayoutError(f"{self.name}: g.{op}: per-edge scores need the transformed "
                              f"features on both ends of an edge: {LINEAR_FIRST}")

    def attention(self, s_dst: torch.Tensor, s_src: torch.Tensor,
                  negative_slope: float = 0.2) -> torch.Tensor:
        """`StageGraph.attention`: s_dst ``Â-rows×heads``, s_src ``nodes×heads`` → ``edges``."""
        self._per_edge("attention")
        s_dst = self._need("attention", "s_dst", s_dst, heads_of(ROWS_OUT))
        s_src = self._need("attention", "s_src", s_src, heads_of(NODES_OUT))
        return laid(self.stage.attention(s_dst, s_src, negative_slope), EDGES)

    def sddmm(self, Q: torch.Tensor, K: torch.Tensor, heads: int,
              head_width: int) -> torch.Tensor:
        """`StageGraph.sddmm`: Q ``Â-rows×out``, K ``nodes×out`` → ``edges``."""
        self._per_edge("sddmm")
        Q = self._need("sddmm", "q", Q, ROWS_OUT)
        K = self._need("sddmm", "k", K, NODES_OUT)
        return laid(self.stage.sddmm(Q, K, heads, head_width), EDGES)

    def edge_softmax(self, e: torch.Tensor) -> torch.Tensor:
        """`StageGraph.edge_softmax` of ``edges`` scores."""
        self._graph_layer("edge_softmax")
        return laid(self.stage.edge_softmax(self._need("edge_softmax", "e", e, EDGES)), EDGES)

    def aggregate_weighted(self, alpha: torch.Tensor, Z: torch.Tensor, heads: int,
                           head_width: int, dropout: float = 0.0, step: int = 0,
                           reduce: bool = True) -> torch.Tensor:
        """`StageGraph.aggregate_weighted`: α ``edges``, Z ``nodes×out`` → ``Â-rows×out``."""
        self._per_edge("aggregate_weighted")
        alpha = self._need("aggregate_weighted", "alpha", alpha, EDGES)
        Z = self._need("aggregate_weighted", "z", Z, NODES_OUT)
        return laid(self.stage.aggregate_weighted(alpha, Z, heads, head_width, dropout, step,
                                                  reduce), ROWS_OUT)

    def edge_values(self) -> torch.Tensor:
        """Â's value on each of this rank's edges (``edges``, edges × 1, float32): the
        `Network`'s aggregation ("gcn": D̂^-½(A+I)D̂^-½ with the graph's edge weights; "mean";
        "sum")."""
        self._graph_layer("edge_values")
        return laid(self.stage.edge_values(), EDGES)

    def edge_weights(self) -> torch.Tensor:
        """The graph's own weight of each of this rank's edges of Â (``edges``, edges × 1,
        float32): 1 on an unweighted graph's edges, 0 on the self loops GCN's Â adds."""
        self._graph_layer("edge_weights")
        if self._edge_weights is None:
            self._edge_weights = laid(self._lookup_weights(), EDGES)
        return self._edge_weights

    def _lookup_weights(self) -> torch.Tensor:
        """This block's edges' weights: the weight matrix of the subgraph induced by this rank's
        rows and columns (an edge's weight involves its two ends only, symmetrization included),
        then one binary search per edge in its sorted (row, column) keys."""
        e = self.stage.edges
        # padding rows and columns (id -1) hold no edge of Â: any real id stands in for them
        rows, cols = (np.maximum(i.cpu().numpy(), 0) for i in (e.row_ids, e.col_ids))
        ids = np.union1d(rows, cols)
        sub = self._weights(ids)  # the graph's weights among this rank's nodes only
        block = sp.csr_matrix(sub[np.searchsorted(ids, rows)][:, np.searchsorted(ids, cols)])
        block.sum_duplicates()
        block.sort_indices()
        keys = (np.repeat(np.arange(block.shape[0], dtype=np.int64), np.diff(block.indptr))
            * block.shape[1] + block.indices)
        want = e.row.cpu().numpy().astype(np.int64) * block.shape[1] + e.col.cpu().numpy()
        at = np.minimum(np.searchsorted(keys, want), max(len(keys) - 1, 0))
        found = (keys[at] == want) if len(keys) else np.zeros(len(want), bool)
        w = np.where(found, block.data[at] if len(keys) else 0, 0).astype(np.float32)
        return torch.from_numpy(w).to(e.row.device)[:, None]


def _move(got: str, want: str) -> str:
    """How to get from layout ``got`` to ``want`` (``got`` wrong for an operation)."""
    if got == EDGES or want == EDGES:
        return "per-edge values come from g.sddmm, g.attention, g.edge_values, g.edge_weights"
    g_rows, g_cols = got.split("×")
    w_rows, w_cols = want.split("×")
    steps = []
    if g_rows == "nodes" and w_rows == "Â-rows":
        steps.append("g.to_rows(x) (or g.aggregate(x)) moves it to Â's rows")
    if g_rows == "Â-rows" and w_rows == "nodes":
        steps.append("g.to_nodes(x) moves Â·Z's rows back to the input's, for another hop "
                     "(g.aggregate) in the same layer")
    if g_cols != w_cols:
        steps.append("g.linear maps ×in to ×out" if g_cols == "in" else
                     "this operation comes before g.linear in this order")
    return "; ".join(steps) or "see plexus.nn.layouts"
