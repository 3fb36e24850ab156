"""The differentiable building blocks of the 3D stages (`plexus.engine.stage`) and of users' own
layers (`plexus.nn`): a timed GEMM, a ReLU that saves a one-byte mask (and the other
activations, `activate`), and the aggregation
AR(Â·X) (SpMM plus the all-reduce over the axis Â's columns are cut by, chunked and overlapped
as configured). The per-edge blocks of attention are in `plexus.engine.edges`.
"""

from __future__ import annotations

import torch

from plexus_partition.model.ops import ACTIVATION_MODULES

from .comm import Comm
from .exchange import RowExchange, sparse_sum
from .gemm import GemmTuner
from .masks import masked
from .spmm import SparseBlock


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


def activation_module(name: str) -> torch.nn.Module:
    """Activation ``name`` (`plexus_partition.model.ops.ACTIVATION_MODULES`: "relu", "elu",
    "leaky_relu", "gelu", "tanh", "none") as the ``torch.nn`` module of its name, PyG's."""
    return getattr(torch.nn, ACTIVATION_MODULES[name])()


def activate(name: str, x: torch.Tensor, inplace: bool = False) -> torch.Tensor:
    """Activation ``name`` of ``x``: ReLU as `relu` (``inplace`` as there), the others out of
    place, as torch's module of the name (`activation_module`)."""
    if name == "relu":
        return relu(x, inplace=inplace)
    return activation_module(name)(x)


class _Aggregate(torch.autograd.Function):
    """AR(Â·X) over ``axis``: the SpMM whose partial sums are all-reduced over the axis Â's
    columns are cut by. Â's rows are cut into chunks; with ``overlap`` each chunk's all-reduce
    runs asynchronously while the next chunk's SpMM computes. Backward: Âᵀ·dY (the all-reduce's
    backward is the identity), skipped when X needs no gradient."""

    @staticmethod
    def forward(ctx, x, a: SparseBlock, chunks: list[SparseBlock], comm: Comm, axis: str,
                overlap: bool, drop: tuple | None, exchange: RowExchange | None):  # noqa: D102
        ctx.a, ctx.comm, ctx.drop = a, comm, drop
        if drop is not None:  # dropout here: the dropped X lives only while it is multiplied
            # drop[-1] (consume): x is the caller's to overwrite (nothing reads it again)
            x = masked(x, *drop[:-1], inplace=drop[-1] and x.is_contiguous())
        if exchange is not None:  # the touched rows only, in one piece (the exchange's own)
            with comm.timers("spmm"):
                y = a.mm(x)
            return sparse_sum(comm, y, exchange)
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
            return (None,) * 8  # fixed input features: no Âᵀ·dAGG on layer 0
        with ctx.comm.timers("spmm"):
            dx = ctx.a.tmm(grad)
        if ctx.drop is not None:  # the dropout's backward, on the fresh product in place
            dx = masked(dx, *ctx.drop[:-1], inplace=True)
        return (dx,) + (None,) * 7


def gemm(a: torch.Tensor, b: torch.Tensor, comm: Comm, tuner: GemmTuner,
         site: str) -> torch.Tensor:
    """a @ b, timed as "gemm", by the formulation ``tuner`` picks for ``site``; its backward
    keeps only the operand each gradient needs."""
    return _Gemm.apply(a, b, comm, tuner, site)


def aggregate(x: torch.Tensor, a: SparseBlock, comm: Comm, axis: str,
              chunks: list[SparseBlock] | None = None, overlap: bool = False,
              drop: tuple | None = None, exchange: RowExchange | None = None) -> torch.Tensor:
    """AR(A·dropout(X)) over ``axis``: the block's SpMM, all-reduced over the axis its columns
    are cut by (backward: Aᵀ·dY). ``chunks``: A's row chunks, each all-reduced on its own
    (``overlap``: while the next multiplies); ``drop``: the dropout's arguments
    (`plexus.engine.masks.masked`) and whether X may be overwritten, applied inside;
    ``exchange``: the sum travels as a sparse exchange of A's touched rows instead
    (`plexus.engine.exchange.sparse_sum`, on the whole block: no chunks)."""
    return _Aggregate.apply(x, a, chunks or [a], comm, axis, overlap, drop, exchange)
