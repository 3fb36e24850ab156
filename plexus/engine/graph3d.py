"""One stage's view of the graph on the grid: the differentiable operations a layer is written
with, the 3D layouts handled: the one stage toolkit. Every built-in kind's torch code
(``stage`` in `plexus.engine.kinds`) is written with it, and so are users' layers
(`plexus.nn`, which wraps it to check layouts).

A stage has roles (o, i, d) for its outer, inner and depth axes
(`plexus_partition.model.layout.LayerPlan`) and three layouts, named by the axis cutting the rows,
the axis cutting the columns and the axis the block is replicated over:

- the input H: rows by o, columns by i, replicated over d;
- a combine-first stage: ``linear(H)`` gives rows by o, columns by d, replicated over i;
  ``aggregate`` of that gives the output, rows by i (Â's rows), columns by d, replicated over o;
- an aggregate-first stage: ``aggregate(H)`` gives rows by d (Â's rows), columns by i,
  replicated over o; ``linear`` of that gives the output, rows by d, columns by o.

``to_rows`` moves a tensor in the rows-by-o layout to Â's rows (S·X, S the identity's block laid
out like Â's), for root terms and destination scores. Per-edge tensors are (edges, heads) of
this rank's block of Â (`plexus.engine.edges`). Each method issues its collectives itself, one
line each below with its axis, and is exact on every grid: random masks are keyed by global ids.

Gradients follow the engine's convention (a tensor replicated over an axis carries the full
gradient on every replica), and the methods mark replicated results where the stage's next
step uses them on different blocks: ``linear``'s result (replicated over i) in a combine-first
stage, which aggregates it over this rank's rows of Â; ``aggregate``'s and ``to_rows``'
(replicated over o) in an aggregate-first stage, whose ``linear`` multiplies it by W's columns
cut by o; the node scores and row inputs of the per-edge operations. A stage's output needs
nothing: the next stage's ``receive`` marks it.
"""

from __future__ import annotations

from typing import Mapping

import torch

from plexus_partition.model.layout import block
from plexus_partition.model.ops.conv import RootTerm

from .exchange import GatherGrad, InputSum
from .exchanges3d import StageExchanges
from .edges import (EdgeBlock, attention_softmax, edge_softmax, head_matrix, head_ranges,
                    sddmm, weighted_aggregate)
from .primitives import aggregate, gemm
from .stagespec import StageContext, StageSpec
from .masks import dropout as masked_dropout


class StageGraph(StageExchanges):
    """The graph operations of one stage on this rank (see the module docstring for the
    layouts), built from the model's `StageContext` (``ctx``: communicator, blocks, seed,
    precision, tuner, model and engine configs, node count) and the stage's `StageSpec`
    (``spec``: plan, input ids, padded and real widths, output ids, dropout rate). A built-in
    stage (`plexus.engine.stage.Stage3D`) also gives its parameter shards (``params``, read with
    `param`); it sets ``training``, ``stats`` and ``outputs`` (the earlier stages' outputs a
    kind reads, `KindSpec.reads`; those it hands on go in ``carried``) before each forward,
    ``consume_input`` and ``update_stats`` when they change."""

    def __init__(self, ctx: StageContext, spec: StageSpec,
                 params: Mapping[str, torch.Tensor] | None = None) -> None:
        plan, comm, d_in, d_out = spec.plan, ctx.comm, spec.d_in, spec.d_out
        self.plan, self.comm, self.graph, self.dtype = plan, comm, ctx.graph, ctx.dtype
        self.input_ids, self.seed, self.d_in, self.d_out = spec.input_ids, ctx.seed, d_in, d_out
        self.real, self.tuner = spec.real or (d_in, d_out), ctx.tuner
        self.params = params if params is not None else {}
        self.rate, self.model, self.engine = spec.rate, ctx.model, ctx.engine
        self.output_ids, self.num_nodes = spec.output_ids, ctx.num_nodes
        self.training, self.outputs, self.carried = True, {}, {}
        # Set by a model that gathered its fixed input features once at set-up and keeps them
        # (stage 0): H arrives gathered over depth already
        self.input_kept = False
        # A stage with running statistics (BatchNorm's): its buffers by kind (set before each
        # forward), whether a training pass updates them (not a recomputed one)
        self.stats: Mapping[str, torch.Tensor] = {}
        self.update_stats = True
        # Set by a model that passes H to this stage and never reads it again (e.g. a fresh
        # ReLU output): the stage may overwrite H (aggregate-first dropout), not copy it.
        self.consume_input = False
        shape, coords = comm.grid.shape, comm.grid.coords
        self.in_col_start = block(d_in, shape[plan.in_cols], coords[plan.in_cols]).start
        self._edges: EdgeBlock | None = None
        self._S = self._A = self._St = None
        self._P: dict[tuple, torch.Tensor] = {}
        self._conv: dict[RootTerm, tuple] = {}
        self._cache: dict[object, torch.Tensor] = {}

    def param(self, kind: str) -> torch.Tensor | None:
        """The shard of the stage's parameter ``kind`` ("W", "Wr", "eps", ...; None if it has
        none), as declared (`plexus_partition.model.ops`)."""
        return self.params[kind] if kind in self.params else None

    def cached(self, key: object, make) -> torch.Tensor:
        """``make()`` once per stage (a constant such as an index tensor): no work per step."""
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    # ---- where things are -------------------------------------------------------------------
    def col_block(self, width: int, axis: str | None = None) -> slice:
        """This rank's columns of a width cut by ``axis`` (default: the output's, W's too)."""
        axis = axis or self.plan.out_cols
        return block(width, self.comm.grid.shape[axis], self.comm.grid.coords[axis])

    def _ranges(self, X: torch.Tensor, heads: int, head_width: int
                ) -> tuple[int, int, list[tuple[int, int, int]]]:
        """The first column and the width of this rank's columns of X, and the (head, first,
        last) column ranges of the heads there: X's columns are its block of a (padded) width
        cut by the output's column axis, heads of ``head_width`` columns from column 0 (padding
        beyond the last head). Plain integers from the plan: no device work."""
        width = X.shape[1] * self.comm.grid.shape[self.plan.out_cols]
        cols = self.col_block(width)
        n = cols.stop - cols.start
        return cols.start, n, head_ranges(cols.start, n, head_width, heads)

    def _head_matrix(self, X: torch.Tensor, heads: int, head_width: int) -> torch.Tensor:
        """P (this rank's columns of X × heads, X's dtype), built once per shape."""
        start, n, _ = self._ranges(X, heads, head_width)
        key = (start, n, head_width, heads, X.dtype)
        if key not in self._P:
            self._P[key] = head_matrix(start, n, head_width, heads, X.device, X.dtype)
        return self._P[key]

    @property
    def edges(self) -> EdgeBlock:
        """This rank's block of Â as edges (rows: Â's rows, the output's; columns: H's rows)."""
        if self._edges is None:
            g, p = self.graph, self.plan
            self._edges = EdgeBlock(g.matrix(p), g.out_ids[p.index], g.shard.input_ids[p.index],
                                    self.comm.grid.device, self.comm.budget)
        return self._edges

    # ---- node tensors -------------------------------------------------------------------------
    def receive(self, H: torch.Tensor, by_aggregation: bool = False) -> torch.Tensor:
        """H as the stage uses it: stage 0's block gathered over depth (unless ``input_kept``);
        ``by_aggregation``: H meets only the block (`KindSpec.reads_input_by_aggregation`)."""
        d, c = self.plan.depth, self.comm
        if self.plan.index == 0 and self.input_kept:          # gathered at set-up, fixed
            return H
        if self.plan.index == 0:
            with c.labelled("AG(H)", "RS(dH)"):               # over d
                return c.all_gather(H, d)
        ex = self._input_exchange() if by_aggregation else None
        with c.labelled(backward="AR(dH)"):                   # bwd: AR(dH) over d, or
            return c.all_reduce_grad(H, d) if ex is None else InputSum.apply(H, c, ex)
        #                                                       SRS + AG(dH) (sparse exchange)

    def dropout_args(self, rate: float, step: int | None, layer: int | None = None
                     ) -> tuple | None:
        """The arguments of a dropout of the input at ``rate`` (`plexus.engine.masks.masked`),
        None for none: its mask a hash of (seed, step, layer, node id, feature column)."""
        if rate <= 0:
            return None
        layer = self.plan.layer if layer is None else layer
        return (self.seed, step or 0, layer, self.input_ids, self.in_col_start, rate,
                self.comm.budget)

    def dropout(self, H: torch.Tensor, rate: float, step: int, layer: int | None = None
                ) -> torch.Tensor:
        """Dropout of the input H (rows by o, columns by i) at ``rate``, its mask a hash of
        (seed, step, layer, node id, feature column): the same on every grid."""
        args = self.dropout_args(rate, step, layer)
        return H if args is None else masked_dropout(H, *args)

    def stage_rate(self) -> float:
        """A built-in stage's dropout rate of its input: its configured rate while training."""
        return self.rate if self.training else 0.0

    def linear(self, X: torch.Tensor, W: torch.Tensor | None, identity: float = 0.0
               ) -> torch.Tensor:
        """X·(W + identity·I) with W's shard (stored like the engine's W: rows by i then W's
        flat axis, columns by W's column axis): gathered, multiplied, summed over i. ``W``
        None: X·(identity·I), the columns moved from i's cut to the output's (no gather)."""
        p, c = self.plan, self.comm
        if W is None:
            W = identity * self.cached("I", self._identity_weight)
        else:
            with c.labelled("AG(W)", "RS(dW)"):
                W = c.all_gather(W.to(self.dtype), p.w_flat)  # AG(W) over W's flat axis
            if identity:
                W = W + identity * self.cached("I", self._identity_weight)
        Y, combine = self._gemm(X, W), p.order == "combine"
        with c.labelled("AR(Z)" if combine else "AR(OUT)"):
            Y = c.all_reduce(Y, p.inner)                      # AR over i (X's columns)
        return self.replicate(Y, p.inner, "AR(dZ)") if combine else Y  # bwd: AR over i

    def replicate(self, X: torch.Tensor, axis: str, name: str = "") -> torch.Tensor:
        """Mark X, replicated over ``axis``, as used differently by the ranks of the axis: its
        gradient is summed over it (that all-reduce called ``name``, else by the code's label)."""
        if not name:
            return self.comm.all_reduce_grad(X, axis)         # bwd: AR over axis
        with self.comm.labelled(backward=name):
            return self.comm.all_reduce_grad(X, axis)         # bwd: AR over axis

    def aggregate(self, X: torch.Tensor, values: torch.Tensor | None = None) -> torch.Tensor:
        """Â·X, X in the rows-by-o layout (the input, or a combine-first stage's linear output):
        rows by Â's rows, columns unchanged, replicated over o. ``values`` (edges × 1, float32,
        this rank's edges of Â as `edge_values` orders them): Σ_j v_ij·X_j over Â's edges
        instead of Â's own values."""
        if values is not None:
            return self._mid(weighted_aggregate(values, X, self.edges, self.comm,
                                                self.plan.a_cols, [(0, 0, X.shape[1])]))
        if self._A is None:
            self._A = self.graph.plain_block(self.plan)
        return self._mid(aggregate(X, self._A, self.comm, self.plan.a_cols))  # AR(Â·X) over o

    def to_rows(self, X: torch.Tensor) -> torch.Tensor:
        """S·X: X (rows by o) in Â's row layout, replicated over o (a node's own features where
        its aggregation lands)."""
        if self._S is None:
            self._S = self.graph.identity(self.plan, X.dtype)
        return self._mid(aggregate(X, self._S, self.comm, self.plan.a_cols))  # AR(S·X) over o

    def to_nodes(self, X: torch.Tensor) -> torch.Tensor:
        """Sᵀ·X: X in Â's row layout back in the rows-by-o layout (another propagation hop in
        the same stage): Sᵀ's block multiplies this rank's Â rows, AR over Â's row axis; the
        result is marked like a stage's input (its users take different blocks of it)."""
        p, c = self.plan, self.comm
        if p.order == "combine":  # Â·Z's gradient is whole on its replicas: Sᵀ's is partial
            X = self.replicate(X, p.a_cols)                   # bwd: AR over o
        if self._St is None:
            self._St = self.graph.identity(p, X.dtype, transpose=True)
        Y = aggregate(X, self._St, c, p.a_rows)               # AR(Sᵀ·X) over Â's row axis
        return self.replicate(Y, p.a_rows)                    # bwd: AR over it

    def row_norm(self, X: torch.Tensor, axis: str) -> torch.Tensor:
        """Each row's 2-norm (rows × 1, float32) of X whose columns are cut by ``axis``: the
        squares summed over this rank's columns, AR over ``axis``, then marked (each rank
        divides its own columns by it)."""
        s = (X.float() ** 2).sum(1, keepdim=True)
        s = self.comm.all_reduce(s, axis)                     # AR(Σx²) over the columns' axis
        s = self.replicate(s, axis)                           # bwd: AR over it
        # a zero row (padding) has norm 0 and gradient 0, not sqrt's infinite slope at 0
        return torch.where(s > 0, s.clamp_min(torch.finfo(s.dtype).tiny).sqrt(), 0.0)

    def _mid(self, X: torch.Tensor) -> torch.Tensor:
        """An aggregate-first stage multiplies Â's rows by W's columns cut by o."""
        return self.replicate(X, self.plan.a_cols) if self.plan.order == "agg" else X  # bwd: AR over o

    def head_sums(self, X: torch.Tensor, a, heads: int,
                  head_width: int) -> torch.Tensor:
        """Per node and head, Σ_c X[:, c]·a[c, k] over the head's columns, for each column k of
        ``a`` (this rank's rows of k vectors, or a list of the k vectors; X rows by o, columns cut
        by the output's column axis, heads of ``head_width``): (nodes, k·heads) float32,
        complete."""
        P = self._head_matrix(X, heads, head_width)
        if isinstance(a, (list, tuple)):  # k vectors: their columns side by side
            a = torch.stack(a, 1)
        a = a if a.dim() == 2 else a[:, None]
        p = self.plan
        a = self.replicate(self.replicate(a, p.outer, "AR(da)"), p.inner, "AR(da)")  # o, i
        A = torch.cat([P * a[:, k:k + 1].to(X.dtype) for k in range(a.shape[1])], 1)
        s = (X @ A).float()
        with self.comm.labelled("AR(s)"):
            s = self.comm.all_reduce(s, self.plan.out_cols)   # AR(s) over the columns' cut
        return self.replicate(s, self.plan.out_cols, "AR(ds)")  # bwd: AR(ds) over it

    # ---- per-edge tensors ---------------------------------------------------------------------
    def edge_values(self) -> torch.Tensor:
        """Â's value on each edge of this rank's block (edges × 1, float32): the aggregation's
        normalized weights (GCN's with the graph's edge weights), constant."""
        return self.edges.values()

    def attention(self, s_dst: torch.Tensor, s_src: torch.Tensor,
                  negative_slope: float = 0.2) -> torch.Tensor:
        """GAT's α: the softmax over each row's in-edges of LeakyReLU(s_dst[i] + s_src[j]), with
        s_dst in Â's row layout and s_src in the rows-by-o layout (node × head, float32)."""
        s_dst = self.replicate(s_dst, self.plan.a_cols, "AR(ds→rows)")  # bwd: AR over o
        with self.comm.labelled(backward="AR(Σα·dα)"):
            return attention_softmax(s_dst, s_src, self.edges, self.comm, self.plan.a_cols,
                                     negative_slope)          # AR-MAX, AR-SUM over o

    def sddmm(self, Q: torch.Tensor, K: torch.Tensor, heads: int,
              head_width: int) -> torch.Tensor:
        """Per-edge, per-head dot products Q_i·K_j (Q in Â's row layout, K rows by o, columns
        cut by the output's column axis, heads of ``head_width``): (edges, heads), float32."""
        _, _, ranges = self._ranges(K, heads, head_width)
        Q = self.replicate(Q, self.plan.a_cols)               # bwd: AR(dQ) over o
        return sddmm(Q, K, self.edges, ranges, heads, self.comm,
                     self.plan.out_cols)                      # AR(e) over it

    def edge_softmax(self, e: torch.Tensor) -> torch.Tensor:
        """α: the softmax of per-edge scores over each row's in-edges, across the grid."""
        return edge_softmax(e, self.edges, self.comm, self.plan.a_cols)  # AR-MAX, AR-SUM over o

    def aggregate_weighted(self, alpha: torch.Tensor, Z: torch.Tensor, heads: int,
                           head_width: int, dropout: float = 0.0, step: int = 0,
                           reduce: bool = True) -> torch.Tensor:
        """Σ_j α_ij·Z_j per head (Z rows by o, columns cut by the output's column axis, heads of
        ``head_width``): rows by Â's rows, all-reduced over o (``reduce`` False: this rank's
        partial sum). ``dropout``: attention dropout, its masks a hash of (seed, step, layer,
        head, destination, source)."""
        _, _, ranges = self._ranges(Z, heads, head_width)
        drop = (self.seed, step, self.plan.layer, dropout) if dropout > 0 else None
        with self.comm.labelled("AR(OUT)"):
            return weighted_aggregate(alpha, Z, self.edges, self.comm,
                                      self.plan.a_cols if reduce else None, ranges,
                                      drop)                   # AR(OUT) over o

    def average_heads(self, part: torch.Tensor, heads: int, head_width: int) -> torch.Tensor:
        """The mean over ``heads`` heads of ``head_width`` columns each of this rank's partial
        per-head sums (``aggregate_weighted(..., reduce=False)`` of a combine-first stage):
        summed locally per output column, RS over the columns' axis d, AR over o: the output,
        rows by i, columns by d, replicated over o."""
        p, c = self.plan, self.comm
        out_col = self.cached(("out_col", part.shape[1], head_width),
                              lambda: self._head_columns(part.shape[1], head_width))
        mean = torch.zeros(part.shape[0], head_width, dtype=part.dtype,
                           device=part.device).index_add(1, out_col, part)
        with c.labelled("RS(OUT)", "AG(dOUT)"):
            mean = c.reduce_scatter(mean.mul_(1.0 / heads).T, p.depth).T  # RS(OUT) over d; bwd: AG
        with c.labelled("AR(OUT)"):
            return c.all_reduce(mean, p.outer)                # AR(OUT) over o

    def _head_columns(self, local: int, head_width: int) -> torch.Tensor:
        """The output column of each of this rank's ``local`` columns of the heads."""
        cols = self.col_block(local * self.comm.grid.shape[self.plan.out_cols])
        return torch.arange(cols.start, cols.stop, device=self.comm.grid.device) % head_width

    def add_bias(self, OUT: torch.Tensor, b: torch.Tensor, inplace: bool = False
                 ) -> torch.Tensor:
        """OUT + b, b's shard cut like the output's columns (its gradient summed over the output's
        rows); ``inplace``: into a fresh OUT nobody saved (a built-in stage's), not a copy."""
        with self.comm.labelled(backward="AR(db)"):
            b = self.comm.all_reduce_grad(b.to(OUT.dtype), self.plan.out_rows)
        return OUT.add_(b) if inplace else OUT + b

    def scalar(self, x: torch.Tensor) -> torch.Tensor:
        """A parameter replicated on every rank (GIN's ε) cast to the compute precision, its
        gradient summed over every rank's block."""
        x = x.to(self.dtype)
        for axis in self.comm.grid.shape:
            x = self.comm.all_reduce_grad(x, axis)            # bwd: AR(dx) over each axis
        return x

    # ---- the graph convolution Â·H·W with a root term ---------------------------------------
    def conv(self, H: torch.Tensor, step: int | None, root: RootTerm = RootTerm.NONE,
             Wr: torch.Tensor | None = None, eps: torch.Tensor | None = None) -> torch.Tensor:
        """The stage's graph convolution H' = Â·dropout(H)·W (+ root term) in its order, with the
        stage's dropout (`stage_rate`) and weight "W": aggregate first AR([Â;S]·H) over o, then
        [AGG | S·H]·[W; Wr] (or (AGG + (1+ε)·S·H)·W), AR(OUT) over i; combine first H·[W | Wr],
        AR(Z) over i, then AR([Â | S]·[Z; Zr]) over o (`plexus_partition.model.ops.conv` declares
        it). ``root`` (the declaration's `ConvOperator.root`, a `RootTerm`): none; a learned root
        weight (H·Wr, ``Wr`` the shard); a residual (H: the identity as Wr); scaled ((1+ε)·H,
        ``eps`` the shard or None for ε = 0). A root term multiplies the stage's own stacked block
        [Â; S] or [Â | S], so one SpMM and one all-reduce serve both."""
        drop = self.dropout_args(self.stage_rate(), step)
        if self.plan.order == "agg":  # dropout inside the SpMM's autograd function
            return self._aggregate_first(H, root, Wr, eps,
                                         None if drop is None else drop + (self.consume_input,))
        return self._combine_first(H if drop is None else masked_dropout(H, *drop), root, Wr,
                                   eps)

    def _conv_block(self, root: RootTerm) -> tuple:
        """The convolution's block and its forward row chunks (plain or stacked), built once."""
        if root not in self._conv:
            self._conv[root] = (self.graph.stacked(self.plan) if root.stacked else
                self.graph.plain(self.plan))
        return self._conv[root]

    def _root_weight(self, root: RootTerm, Wr: torch.Tensor | None, axis: str) -> torch.Tensor:
        """Wr gathered over W's flat axis (a learned root weight), or the identity's block (a
        residual: H·I, a constant, gathered already)."""
        if root.learned:
            with self.comm.labelled("AG(Wr)", "RS(dWr)"):
                return self.comm.all_gather(Wr.to(self.dtype), axis)  # AG(Wr); bwd: RS(dWr)
        return self.cached("I", self._identity_weight)

    def _identity_weight(self) -> torch.Tensor:
        p, shape, coords = self.plan, self.comm.grid.shape, self.comm.grid.coords
        eye = torch.eye(self.d_in, self.d_out)
        rows = block(eye.shape[0], shape[p.inner], coords[p.inner])
        cols = block(eye.shape[1], shape[p.w_cols], coords[p.w_cols])
        return eye[rows, cols].clone().to(self.comm.grid.device, self.dtype)

    def _one_plus_eps(self, eps: torch.Tensor | None) -> torch.Tensor | float:
        with self.comm.labelled(backward="AR(dε)"):  # bwd: AR(dε) over each axis
            return 1.0 if eps is None else 1 + self.scalar(eps)

    def _aggregate_first(self, H: torch.Tensor, root: RootTerm, Wr, eps, drop: tuple | None
                         ) -> torch.Tensor:
        o, i, d, c = self.plan.outer, self.plan.inner, self.plan.depth, self.comm
        a, chunks = self._conv_block(root)
        summed, gathered = self._exchanges(root)
        sparse = None if root.stacked else "sum"  # a stacked block's S rows are not exchanged
        with c.labelled("AR(AGG)", sparse=sparse, rows=True):
            X = aggregate(H, a, c, o, chunks, self.engine.overlap, drop, summed)  # AR([Â;S]·H)
            #                                        over o, or SRS + AG(AGG) (sparse exchange)
        with c.labelled(backward="AR(dAGG)", sparse=sparse and "gather", rows=True):
            X = (c.all_reduce_grad(X, o) if gathered is None  # bwd: AR(d[AGG;R]) over o, or
                 else GatherGrad.apply(X, c, gathered))       # RS + SAG(dAGG) (sparse)
        with c.labelled("AG(W)", "RS(dW)"):
            W = c.all_gather(self.params["W"].to(self.dtype), d)  # AG(W) over d; bwd: RS(dW)
        if root.stacked:
            AGG, R = X.chunk(2)                               # Â·H and S·H = H in OUT's rows
            if root.scaled:
                X = AGG + self._one_plus_eps(eps) * R
            else:                                             # [AGG | R]·[W; Wr]
                X, W = torch.cat([AGG, R], 1), torch.cat([W, self._root_weight(root, Wr, d)], 0)
        with c.labelled("AR(OUT)"):
            return c.all_reduce(self._gemm(X, W), i)          # AR(OUT) over i

    def _combine_first(self, H: torch.Tensor, root: RootTerm, Wr, eps) -> torch.Tensor:
        o, i, c = self.plan.outer, self.plan.inner, self.comm
        with c.labelled("AG(W)", "RS(dW)"):
            W = c.all_gather(self.params["W"].to(self.dtype), o)  # AG(W) over o; bwd: RS(dW)
        if root.wide:                                         # H·[W | Wr]
            W = torch.cat([W, self._root_weight(root, Wr, o)], 1)
        with c.labelled("AR(Z)"):
            Z = c.all_reduce(self._gemm(H, W), i)             # AR(Z) over i
        with c.labelled(backward="AR(dZ)"):
            Z = c.all_reduce_grad(Z, i)                       # bwd: AR(dZ) over i
        if root.wide:
            Z = torch.cat(Z.chunk(2, 1), 0)                   # [H·W; H·Wr]
        elif root.scaled:
            Z = torch.cat([Z, self._one_plus_eps(eps) * Z], 0)  # [Z; (1+ε)·Z]
        a, chunks = self._conv_block(root)
        summed, _ = self._exchanges(root)
        with c.labelled("AR(OUT)", sparse=None if root.stacked else "sum", rows=True):
            return aggregate(Z, a, c, o, chunks, self.engine.overlap, None,  # AR([Â | S]·Z)
                             summed)                  # over o, or SRS + AG(OUT) (sparse exchange)

    def _gemm(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return gemm(a, b, self.comm, self.tuner, f"layer{self.plan.index}")
