"""The 3D tensor-parallel stages of a model, as in docs/design.md: a graph convolution and a
dense layer.

Symbols follow the design doc: Â (this rank's block of the adjacency), H (input block), AGG = Â·H,
W (weight block, stored cut over one more axis and gathered before use), OUT = AGG·W. A root term
(SAGE's H·Wr, GIN's (1+ε)·H, a residual H) needs H in the output's row layout: S, the block of the
(permuted) identity laid out like Â, brings it there, stacked with Â so that one SpMM and one
all-reduce serve both. Each collective is one line naming its axis; its backward counterpart is in
the comment. The same collectives, with their sizes, are listed in `plexus.core.schedule` (the
performance model and the tests read that list; the ledger test checks that this code issues
exactly it).

Parameters are float32 (the master weights); each stage casts them to its compute precision
``dtype`` at use, before their collective, so W, Wr, b and ε travel in that precision and their
gradients come back into the float32 parameters through the cast. With float32 the casts are
no-ops.
"""

from __future__ import annotations

import torch
from torch import nn

from plexus.core.layout import LayerPlan, block

from .comm import Comm
from .gemm import GemmTuner
from .seeding import dropout, masked
from .spmm import SparseBlock


def weight_block(plan: LayerPlan, shape: dict[str, int], coords: dict[str, int], d_in: int,
                 d_out: int) -> tuple[slice, slice]:
    """Rows and columns of the padded full W (d_in × d_out) that this rank stores: rows cut by
    inner then again by W's flat axis, columns by ``plan.w_cols``."""
    rows = block(d_in, shape[plan.inner], coords[plan.inner])
    rows = block(rows.stop - rows.start, shape[plan.w_flat], coords[plan.w_flat])
    offset = block(d_in, shape[plan.inner], coords[plan.inner]).start
    return (slice(offset + rows.start, offset + rows.stop),
            block(d_out, shape[plan.w_cols], coords[plan.w_cols]))


class _Gemm(torch.autograd.Function):
    """a @ b with a timed, tunable backward (dA = dY·bᵀ, dB = aᵀ·dY)."""

    @staticmethod
    def forward(ctx, a, b, comm: Comm, tuner: GemmTuner, site: str):  # noqa: D102
        # keep only what backward reads: dA needs b, dB needs a (layer 0: no dA, so no W)
        ctx.save_for_backward(a if ctx.needs_input_grad[1] else None,
                              b if ctx.needs_input_grad[0] else None)
        ctx.comm, ctx.tuner, ctx.site = comm, tuner, site
        with comm.timers("gemm"):
            return tuner.mm(site, a, b)

    @staticmethod
    def backward(ctx, grad):  # noqa: D102
        a, b = ctx.saved_tensors
        da = db = None
        with ctx.comm.timers("gemm"):
            if ctx.needs_input_grad[0]:
                da = ctx.tuner.mm(ctx.site + ":dA", grad, b.T)
            if ctx.needs_input_grad[1]:
                db = ctx.tuner.mm(ctx.site + ":dB", a.T, grad)
        return da, db, None, None, None


class _ReLU(torch.autograd.Function):
    """max(x, 0) saving a one-byte mask for backward instead of the float output."""

    @staticmethod
    def forward(ctx, x, inplace: bool):  # noqa: D102
        if inplace:
            ctx.mark_dirty(x)
            out = x.clamp_min_(0.0)
        else:
            out = torch.relu(x)
        ctx.save_for_backward(out > 0)  # where threshold_backward passes the gradient
        return out

    @staticmethod
    def backward(ctx, grad):  # noqa: D102
        (positive,) = ctx.saved_tensors
        return torch.where(positive, grad, 0.0), None


def relu(x: torch.Tensor, inplace: bool = False) -> torch.Tensor:
    """ReLU whose backward keeps a bool mask (a quarter of the float output's bytes).
    ``inplace``: overwrite ``x`` (the caller holds no other use of it; autograd refuses it
    where a backward needs ``x``)."""
    if torch.is_grad_enabled() and x.requires_grad:
        return _ReLU.apply(x, inplace)
    return x.clamp_min_(0.0) if inplace else torch.relu(x)


class _Aggregate(torch.autograd.Function):
    """AR(Â·X) over ``axis``: the SpMM whose partial sums are all-reduced over the axis Â's
    columns are cut by. Â's rows are cut into chunks; with ``overlap`` each chunk's all-reduce
    runs asynchronously while the next chunk's SpMM computes. Backward: Âᵀ·dY (the all-reduce's
    backward is the identity), skipped when X needs no gradient."""

    @staticmethod
    def forward(ctx, x, a: SparseBlock, chunks: list[SparseBlock], comm: Comm, axis: str,
                overlap: bool, drop: tuple | None):  # noqa: D102
        ctx.a, ctx.comm, ctx.drop = a, comm, drop
        if drop is not None:  # dropout here: the dropped X lives only while it is multiplied
            # drop[-1] (consume): x is the caller's to overwrite (nothing reads it again)
            x = masked(x, *drop[:-1], inplace=drop[-1] and x.is_contiguous())
        parts, pending = [], []
        for chunk in chunks:
            with comm.timers("spmm"):
                y = chunk.mm(x)
            if overlap:
                pending.append(comm.raw_all_reduce(y, axis, async_op=True))
            else:
                comm.raw_all_reduce(y, axis)
            parts.append(y)
        for work in pending:
            comm.wait(work, axis)
        return parts[0] if len(parts) == 1 else torch.cat(parts)

    @staticmethod
    def backward(ctx, grad):  # noqa: D102
        if not ctx.needs_input_grad[0]:
            return (None,) * 7  # fixed input features: no Âᵀ·dAGG on layer 0
        with ctx.comm.timers("spmm"):
            dx = ctx.a.tmm(grad)
        if ctx.drop is not None:  # the dropout's backward, on the fresh product in place
            dx = masked(dx, *ctx.drop[:-1], inplace=True)
        return (dx,) + (None,) * 6


class Stage3D(nn.Module):
    """What every stage shares: its weight blocks, receiving H, dropout, the bias.

    ``params`` holds the stage's full padded tensors ("W", and where they exist "Wr", "b",
    "eps"); ``input_ids`` are the original node ids of the rows of H as this stage sees them
    (after stage 0's all-gather; -1 for padding): dropout masks are keyed by them, the seed, the
    step and the GNN layer, never by the rank, so every grid drops the same elements as the
    serial model. ``dtype`` is the compute precision of H, OUT and the messages.
    """

    def __init__(self, plan: LayerPlan, comm: Comm, params: dict[str, torch.Tensor],
                 input_ids: torch.Tensor, dropout: float = 0.0, seed: int = 0,
                 tuner: GemmTuner | None = None, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.plan, self.comm, self.dtype = plan, comm, dtype
        self.tuner = tuner or GemmTuner()
        self.p, self.seed, self.input_ids = dropout, seed, input_ids
        # Set by a model that passes H to this stage and never reads it again (e.g. a fresh
        # ReLU output): aggregate-first dropout then overwrites H instead of copying it.
        self.consume_input = False
        shape, coords, device = comm.grid.shape, comm.grid.coords, comm.grid.device
        w_full = params["W"]
        self.in_col_start = block(w_full.shape[0], shape[plan.in_cols], coords[plan.in_cols]).start
        rows, cols = weight_block(plan, shape, coords, *w_full.shape)
        self.W = nn.Parameter(w_full[rows, cols].clone().to(device))
        self.Wr = nn.Parameter(params["Wr"][rows, cols].clone().to(device)) \
            if "Wr" in params else None
        self.b = nn.Parameter(params["b"][cols].clone().to(device)) if "b" in params else None
        self.eps = nn.Parameter(params["eps"].clone().to(device)) if "eps" in params else None

    def receive(self, H: torch.Tensor) -> torch.Tensor:
        """H as the stage multiplies it: gathered over depth (stage 0)."""
        d, c = self.plan.depth, self.comm
        if self.plan.index == 0:
            return c.all_gather(H, d)                         # AG(H) over d; bwd: RS(dH) over d
        return c.all_reduce_grad(H, d)                        # bwd: AR(dH) over d

    def dropout_args(self, step: int | None) -> tuple | None:
        """The arguments of this step's dropout of H (`plexus.engine.seeding.masked`), None
        without dropout."""
        if not (self.training and self.p > 0):
            return None
        return (self.seed, step or 0, self.plan.layer, self.input_ids, self.in_col_start, self.p)

    def add_bias(self, OUT: torch.Tensor) -> torch.Tensor:
        if self.b is None:
            return OUT
        b = self.comm.all_reduce_grad(self.b.to(self.dtype), self.plan.out_rows)  # bwd: AR(db)
        # in place: OUT is fresh and saved by nobody (a copy would double the stage's output)
        return OUT.add_(b)

    def _gemm(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return _Gemm.apply(a, b, self.comm, self.tuner, f"layer{self.plan.index}")


class DenseLayer3D(Stage3D):
    """OUT = dropout(H)·W (+ b): no aggregation; the rows stay where they are (an MLP layer)."""

    def forward(self, H: torch.Tensor, step: int | None = None) -> torch.Tensor:
        """H: rows cut by outer, columns by inner; OUT: rows by outer, columns by depth."""
        o, i, c = self.plan.outer, self.plan.inner, self.comm
        H = self.receive(H)
        drop = self.dropout_args(step)
        H = H if drop is None else dropout(H, *drop)
        W = c.all_gather(self.W.to(self.dtype), o)            # AG(W) over o; bwd: RS(dW) over o
        return self.add_bias(c.all_reduce(self._gemm(H, W), i))  # AR(OUT) over i


class ConvLayer3D(Stage3D):
    """H' = Â·dropout(H)·W (+ root term) (+ b), aggregate-first or combine-first per
    ``plan.order``. ``a`` is Â's block, or with a root term the stacked block [Â; S]
    (aggregate-first) or [Â | S] (combine-first); a residual stage's Wr is the fixed block ``I``
    of the identity."""

    def __init__(self, plan: LayerPlan, comm: Comm, params: dict[str, torch.Tensor],
                 input_ids: torch.Tensor, a: SparseBlock, dropout: float = 0.0, seed: int = 0,
                 chunks: list[SparseBlock] | None = None, overlap: bool = False,
                 tuner: GemmTuner | None = None, dtype: torch.dtype = torch.float32) -> None:
        super().__init__(plan, comm, params, input_ids, dropout, seed, tuner, dtype)
        self.a, self.chunks, self.overlap = a, chunks or [a], overlap
        if plan.root == "res":  # H = H·I: the identity's block, a constant, gathered already
            shape, coords = comm.grid.shape, comm.grid.coords
            eye = torch.eye(*params["W"].shape)
            rows = block(eye.shape[0], shape[plan.inner], coords[plan.inner])
            cols = block(eye.shape[1], shape[plan.w_cols], coords[plan.w_cols])
            self.register_buffer("I", eye[rows, cols].clone().to(comm.grid.device, dtype),
                                 persistent=False)

    def forward(self, H: torch.Tensor, step: int | None = None) -> torch.Tensor:
        """H: rows cut by outer, columns by inner (stage 0: rows cut by depth too, as stored;
        later stages: replicated over depth, as the previous stage left it)."""
        H = self.receive(H)
        drop = self.dropout_args(step)
        if self.plan.order == "agg":  # dropout inside the SpMM's autograd function
            OUT = self._aggregate_first(H, None if drop is None else drop + (self.consume_input,))
        else:
            OUT = self._combine_first(H if drop is None else dropout(H, *drop))
        return self.add_bias(OUT)

    def _root_weight(self, axis: str) -> torch.Tensor:
        if self.plan.root == "res":
            return self.I
        return self.comm.all_gather(self.Wr.to(self.dtype), axis)  # AG(Wr) over W's flat axis; bwd: RS(dWr)

    def _one_plus_eps(self) -> torch.Tensor | float:
        if self.eps is None:
            return 1.0
        eps = self.eps.to(self.dtype)
        for axis in self.comm.grid.shape:  # dε sums every rank's block
            eps = self.comm.all_reduce_grad(eps, axis)        # bwd: AR(dε) over each axis
        return 1 + eps

    def _aggregate_first(self, H: torch.Tensor, drop: tuple | None = None) -> torch.Tensor:
        o, i, d, c = self.plan.outer, self.plan.inner, self.plan.depth, self.comm
        X = self._aggregate(H, o, drop)                       # AR([Â;S]·H) over o
        X = c.all_reduce_grad(X, o)                           # bwd: AR(d[AGG;R]) over o
        W = c.all_gather(self.W.to(self.dtype), d)            # AG(W) over d; bwd: RS(dW) over d
        if self.plan.root != "none":
            AGG, R = X.chunk(2)                               # Â·H and S·H = H in OUT's rows
            if self.plan.root == "gin":
                X = AGG + self._one_plus_eps() * R
            else:                                             # [AGG | R]·[W; Wr]
                X, W = torch.cat([AGG, R], 1), torch.cat([W, self._root_weight(d)], 0)
        return c.all_reduce(self._gemm(X, W), i)              # AR(OUT) over i

    def _combine_first(self, H: torch.Tensor) -> torch.Tensor:
        o, i, c = self.plan.outer, self.plan.inner, self.comm
        W = c.all_gather(self.W.to(self.dtype), o)            # AG(W) over o; bwd: RS(dW) over o
        root = self.plan.root
        if root in ("sage", "res"):                           # H·[W | Wr]
            W = torch.cat([W, self._root_weight(o)], 1)
        Z = c.all_reduce(self._gemm(H, W), i)                 # AR(Z) over i
        Z = c.all_reduce_grad(Z, i)                           # bwd: AR(dZ) over i
        if root in ("sage", "res"):
            Z = torch.cat(Z.chunk(2, 1), 0)                   # [H·W; H·Wr]
        elif root == "gin":
            Z = torch.cat([Z, self._one_plus_eps() * Z], 0)   # [Z; (1+ε)·Z]
        return self._aggregate(Z, o)                          # AR([Â | S]·Z) over o

    def _aggregate(self, X: torch.Tensor, axis: str, drop: tuple | None = None) -> torch.Tensor:
        """AR(Â·dropout(X)) over ``axis``, chunked and overlapped as configured; ``drop``: the
        dropout's arguments (`plexus.engine.seeding.masked`) and whether X may be overwritten,
        None for no dropout."""
        return _Aggregate.apply(X, self.a, self.chunks, self.comm, axis, self.overlap, drop)
