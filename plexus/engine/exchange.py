"""Sparse exchanges: the aggregation's sums over an axis carrying only the rows Â's blocks touch.

A rank's partial Â_blk·X is zero on the rows its block has no non-zero in (its touched rows T,
`plexus_partition.rowsets`), and Â_blkᵀ·dY reads only T's rows of dY. Over an axis of p ranks
whose sum has R rows, rank q owning the q-th piece of R/p rows:

- ``sum`` (instead of the all-reduce of the partials): an all-to-all sends each rank r only this
  rank's rows of T inside r's piece; r adds what it receives to its own piece, in rank order,
  and the all-gather of the pieces gives every rank the whole sum (bit-equal on every rank).
- ``gather`` (instead of the all-reduce of a gradient that only T's rows are read of): the
  reduce-scatter gives each rank its piece of the sum, and an all-to-all hands each rank r the
  rows of this piece inside r's T (the other rows of the result are left zero: nothing reads
  them). It is the sum's adjoint and uses the same index lists the other way round.
- ``input``: the sum of a stage's input gradient over depth (AR(dH)), where the input meets
  only the block (`KindSpec.reads_input_by_aggregation`): each rank's Â_blkᵀ·dAGG is zero
  outside the block's touched columns, which play T's part (`InputSum`).

The row sets of the axis's ranks are exchanged once, when the stage first runs (an all-gather of
index lists, at set-up: not part of a step, not in the ledger); after that each step moves fixed
sizes with no host synchronisation. Where ``mode`` is "auto" an exchange is used only where the
most rows any rank of the axis sends is below (p-1)/p·R, the rule the performance model prices
(`plexus_partition.model.schedule.SparseExchange`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from plexus_partition.rowsets import by_piece, sent_rows

from .comm import Comm, GradCollective


@dataclass
class RowExchange:
    """The fixed index lists of one stage's exchange over ``axis`` (see the module docstring):
    ``out_rows`` this rank's rows of T outside its piece, grouped by the owning rank (a sum
    sends them, a gather receives into them); ``in_rows`` the others' rows of T inside this
    rank's piece, relative to the piece, grouped by rank (a sum adds into them, a gather sends
    them); the split sizes of both; and the counts every rank of the axis sends."""

    axis: str
    rows: int
    piece: slice
    out_rows: torch.Tensor
    out_splits: list[int]
    in_rows: torch.Tensor
    in_splits: list[int]
    summed: list[int]  # per rank of the axis: rows it sends in a sum
    gathered: list[int]  # ... in a gather

    @classmethod
    def build(cls, comm: Comm, axis: str, touched: np.ndarray, rows: int) -> "RowExchange":
        """This rank's lists from its touched rows (``touched``, ascending, of ``rows``); every
        rank of ``axis`` calls it together (it gathers their row sets once)."""
        grid = comm.grid
        p, me = grid.size(axis), grid.coords[axis]
        sets: list = [None] * p
        dist.all_gather_object(sets, np.asarray(touched, dtype=np.int64), group=grid.group(axis))
        mine = by_piece(sets[me], rows, p)
        theirs = [by_piece(s, rows, p)[me] for s in sets]
        size = rows // p
        start = me * size
        out = [mine[q] if q != me else mine[q][:0] for q in range(p)]
        inn = [theirs[q] - start if q != me else theirs[q][:0] for q in range(p)]
        summed, gathered = sent_rows(sets, rows)
        device = grid.device

        def index(parts: list[np.ndarray]) -> torch.Tensor:
            return torch.from_numpy(np.concatenate(parts)).to(device)

        return cls(axis, rows, slice(start, start + size), index(out), [len(a) for a in out],
                   index(inn), [len(a) for a in inn], summed, gathered)

    def use(self, kind: str, mode: str) -> bool:
        """Whether exchange ``kind`` ("sum" or "gather") replaces its all-reduce under ``mode``
        ("on", "auto"; the caller handles "off")."""
        if mode == "on":
            return True
        counts = self.summed if kind == "sum" else self.gathered
        p = len(counts)
        return max(counts) < (p - 1) / p * self.rows

    def sent(self, kind: str, rank: int) -> int:
        """Rows the rank at coordinate ``rank`` of the axis sends in exchange ``kind``."""
        return (self.summed if kind == "sum" else self.gathered)[rank]


def _all_to_all(comm: Comm, ex: RowExchange, send: torch.Tensor, recv_splits: list[int],
                send_splits: list[int]) -> torch.Tensor:
    """Rows of ``send`` (grouped by destination, ``send_splits``) to the axis's ranks; the rows
    received, grouped by source (``recv_splits``), in ``send``'s dtype. Recorded as what this
    rank sends; a float32 payload travels in the wire precision (`Comm.wire_of`) like the
    collective it replaces."""
    p, wire = comm.grid.size(ex.axis), comm.wire_of(send)
    out = send if wire is None else send.to(wire)
    recv = out.new_empty((sum(recv_splits),) + tuple(send.shape[1:]))
    comm.record(ex.axis, "all_to_all", send.numel(), p, out.element_size())
    group = comm.grid.group(ex.axis)
    with comm.timers(f"all_to_all:{ex.axis}"):
        if comm.staged:  # several ranks sharing a GPU over gloo: through host memory
            host = recv.cpu()
            dist.all_to_all_single(host, out.cpu(), recv_splits, send_splits, group=group)
            recv.copy_(host)
        else:
            dist.all_to_all_single(recv, out.contiguous(), recv_splits, send_splits,
                                   group=group)
    return recv if wire is None else recv.to(send.dtype)


def _rounded(comm: Comm, x: torch.Tensor) -> torch.Tensor:
    """``x`` rounded to the wire precision and back, as the others receive it (so that every
    rank holds the same values of a replicated sum); ``x`` itself without one."""
    wire = comm.wire_of(x)
    return x if wire is None else x.to(wire).to(x.dtype)


def sparse_sum(comm: Comm, y: torch.Tensor, ex: RowExchange) -> torch.Tensor:
    """The sum over ``ex.axis`` of partials ``y`` that are zero outside this rank's touched
    rows, on every rank (not differentiable: `SparseSum` is). Under a wire precision each
    partial is rounded once for the wire (this rank's own too), summed in ``y``'s precision,
    and the sums rounded for the all-gather: the dense all-reduce's two roundings."""
    with comm.exchanging("sum"):
        recv = _all_to_all(comm, ex, y.index_select(0, ex.out_rows), ex.in_splits,
                           ex.out_splits)
        own = _rounded(comm, y[ex.piece]).clone()
        own.index_add_(0, ex.in_rows, recv)
        return comm.raw_all_gather(own, ex.axis)


def sparse_gather(comm: Comm, y: torch.Tensor, ex: RowExchange) -> torch.Tensor:
    """The sum over ``ex.axis`` of ``y``, exact on this rank's touched rows and its own piece,
    zero elsewhere (not differentiable: `sum_then_gather`'s backward uses it). Under a wire
    precision the piece is rounded as the others receive it."""
    with comm.exchanging("gather"):
        own = _rounded(comm, comm.raw_reduce_scatter(y, ex.axis))
        recv = _all_to_all(comm, ex, own.index_select(0, ex.in_rows), ex.out_splits,
                           ex.in_splits)
    out = torch.zeros_like(y)
    out[ex.piece] = own
    out.index_copy_(0, ex.out_rows, recv)
    return out


class SparseSum(torch.autograd.Function):
    """`sparse_sum` of partial results; backward passes the gradient through (as the
    all-reduce it replaces: the result is replicated over the axis)."""

    @staticmethod
    def forward(ctx, y, comm: Comm, ex: RowExchange):  # noqa: D102
        return sparse_sum(comm, y, ex)

    @staticmethod
    def backward(ctx, grad):  # noqa: D102
        return grad, None, None


class InputSum(GradCollective):
    """Identity forward on a stage's input, replicated over the axis (depth), whose backward
    sums the gradient over it as a `sparse_sum`: each rank's part Â_blkᵀ·dAGG is zero outside
    its block's touched columns, the `RowExchange`'s rows (`Comm.all_reduce_grad` otherwise)."""

    @staticmethod
    def backward(ctx, grad):  # noqa: D102
        with ctx.comm.backward_of(ctx.tag):  # recorded under the forward's layer
            return sparse_sum(ctx.comm, grad.contiguous(), ctx.over), None, None


class GatherGrad(GradCollective):
    """Identity forward on a tensor replicated over the axis whose backward sums the gradient
    over it only where this rank reads it (`sparse_gather` over the `RowExchange`;
    `Comm.all_reduce_grad` otherwise)."""

    @staticmethod
    def backward(ctx, grad):  # noqa: D102
        with ctx.comm.backward_of(ctx.tag):  # recorded under the forward's layer
            return sparse_gather(ctx.comm, grad.contiguous(), ctx.over), None, None
