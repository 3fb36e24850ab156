"""Collectives along one grid axis, differentiable, each recorded in the ledger and timed.

The replicated-gradient convention: a tensor replicated over an axis carries, on every replica,
the full gradient. Hence the pairs below (the f/g operators of tensor parallelism):
- ``all_reduce``: sums partial results over the axis; backward passes the gradient through.
- ``all_reduce_grad``: marks a replicated tensor that the ranks of the axis use differently;
  forward passes it through, backward sums the gradient over the axis.
- ``all_gather`` (rows): backward reduce-scatters the gradient over the axis.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from .grid import Grid
from .ledger import Ledger
from .pieces import piece_budget
from .timing import Timers


# torch >= 2.13 renames the single-tensor collectives; keep both spellings working.
_reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def staged(device: torch.device) -> bool:
    """Whether collectives of tensors on ``device`` go through host memory: CUDA tensors in a
    gloo group (several ranks sharing a GPU, where NCCL needs a GPU per rank)."""
    return (torch.device(device).type == "cuda" and dist.is_initialized()
            and dist.get_backend() == "gloo")


def all_reduce_staged(x: torch.Tensor, op=dist.ReduceOp.SUM, group=None) -> torch.Tensor:
    """In-place all-reduce of ``x`` (the default group, or ``group``), through host memory when
    `staged` says so; returns ``x``."""
    if not staged(x.device):
        dist.all_reduce(x, op=op, group=group)
        return x
    host = x.cpu()
    dist.all_reduce(host, op=op, group=group)
    return x.copy_(host)


def global_norm(tensors: list[torch.Tensor], device: torch.device) -> torch.Tensor:
    """The 2-norm of the concatenation of every rank's ``tensors`` (collective over the whole
    world: every rank gets it, as a tensor, without a host synchronisation). A replicated
    tensor must be passed by one replica only, or it counts several times."""
    local = (torch.nn.utils.get_total_norm(tensors, 2.0).to(device) if tensors
             else torch.zeros((), device=device))
    squares = (local.float() ** 2).reshape(1)
    if dist.is_initialized() and dist.get_world_size() > 1:
        all_reduce_staged(squares)
    return squares[0].sqrt()


class Comm:
    """The grid plus the ledger and timers that every collective reports to, and ``budget``:
    the bytes one pass's temporaries may take on this rank's device (`plexus.engine.pieces`;
    None: read from the device's free memory now, at set-up)."""

    def __init__(self, grid: Grid, ledger: Ledger | None = None, timers: Timers | None = None,
                 budget: float | None = None):
        self.grid = grid
        self.ledger = ledger or Ledger()
        self.timers = timers or Timers(grid.device, enabled=False)
        self.budget = piece_budget(grid.device) if budget is None else budget
        # several ranks sharing one GPU talk gloo, which reduces host memory: stage through it
        self.staged = staged(grid.device)

    # ---- raw (non-differentiable) collectives -------------------------------------------
    def raw_all_reduce(self, x: torch.Tensor, axis: str, op: str = "sum",
                       async_op: bool = False):
        """In-place all-reduce of ``x`` over ``axis`` with ``op`` in {"sum", "max", "min"}.
        Returns ``x``, or with ``async_op`` a work handle to pass to `wait` (None: nothing to do)."""
        p = self.grid.size(axis)
        if p == 1:
            return None if async_op else x
        if not x.is_contiguous():
            # Backends reduce the storage in memory order: replicas holding the same matrix in
            # different layouts (e.g. a tuned GEMM's transposed product) would add mismatched
            # elements. Reduce a contiguous copy and write it back.
            if async_op:
                raise ValueError("an asynchronous all-reduce needs a contiguous tensor")
            return x.copy_(self.raw_all_reduce(x.contiguous(), axis, op))
        self.ledger.record(axis, "all_reduce", x.numel(), p, x.element_size())
        reduce_op = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX,
                     "min": dist.ReduceOp.MIN}[op]
        if self.staged:  # through host memory, synchronously (nothing to overlap with)
            with self.timers(f"all_reduce:{axis}"):
                all_reduce_staged(x, reduce_op, self.grid.group(axis))
            return None if async_op else x
        if async_op:  # the caller times the wait: that is the part not hidden by compute
            return dist.all_reduce(x, op=reduce_op, group=self.grid.group(axis), async_op=True)
        with self.timers(f"all_reduce:{axis}"):
            dist.all_reduce(x, op=reduce_op, group=self.grid.group(axis))
        return x

    def wait(self, work, axis: str) -> None:
        """Wait for an asynchronous all-reduce over ``axis``."""
        if work is not None:
            with self.timers(f"all_reduce:{axis}"):
                work.wait()

    def raw_all_gather(self, x: torch.Tensor, axis: str) -> torch.Tensor:
        """Concatenate the ranks' ``x`` along dim 0, in coordinate order of ``axis``."""
        p = self.grid.size(axis)
        if p == 1:
            return x
        x = x.contiguous()
        out = x.new_empty((p * x.shape[0],) + tuple(x.shape[1:]))
        self.ledger.record(axis, "all_gather", out.numel(), p, x.element_size())
        with self.timers(f"all_gather:{axis}"):
            return self._into(out, x, _all_gather, axis)

    def raw_reduce_scatter(self, x: torch.Tensor, axis: str) -> torch.Tensor:
        """Sum ``x`` over ``axis`` and keep this rank's block of dim 0."""
        p = self.grid.size(axis)
        if p == 1:
            return x
        x = x.contiguous()
        out = x.new_empty((x.shape[0] // p,) + tuple(x.shape[1:]))
        self.ledger.record(axis, "reduce_scatter", x.numel(), p, x.element_size())
        with self.timers(f"reduce_scatter:{axis}"):
            return self._into(out, x, _reduce_scatter, axis)

    def _into(self, out: torch.Tensor, x: torch.Tensor, collective, axis: str) -> torch.Tensor:
        """``collective(out, x)`` over ``axis``'s group (a single-tensor all-gather or
        reduce-scatter), through host memory where `staged`; returns ``out``."""
        if not self.staged:
            collective(out, x, group=self.grid.group(axis))
            return out
        host = out.cpu()
        collective(host, x.cpu(), group=self.grid.group(axis))
        return out.copy_(host)

    # ---- differentiable ------------------------------------------------------------------
    def all_reduce(self, x: torch.Tensor, axis: str) -> torch.Tensor:
        """Sum partial results over ``axis`` (backward: identity)."""
        if self.grid.size(axis) == 1:  # nothing to sum: x itself (not a view, so it may be
            return x                   # updated in place, e.g. by the bias)
        return _AllReduce.apply(x, self, axis)

    def all_reduce_grad(self, x: torch.Tensor, axis: str) -> torch.Tensor:
        """Identity forward; backward all-reduces the gradient over ``axis``."""
        return _AllReduceGrad.apply(x, self, axis)

    def all_gather(self, x: torch.Tensor, axis: str) -> torch.Tensor:
        """Gather row blocks over ``axis`` (backward: reduce-scatter)."""
        return _RowBlocks.apply(x, self, axis, True)

    def reduce_scatter(self, x: torch.Tensor, axis: str) -> torch.Tensor:
        """Sum ``x`` over ``axis`` and keep this rank's block of rows (backward: all-gather)."""
        if self.grid.size(axis) == 1:  # nothing to sum: x itself
            return x
        return _RowBlocks.apply(x, self, axis, False)


class _AllReduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, comm: Comm, axis: str):  # noqa: D102
        if comm.grid.size(axis) == 1:  # nothing to sum: no copy
            return x.view_as(x)
        return comm.raw_all_reduce(x.clone(memory_format=torch.contiguous_format), axis)

    @staticmethod
    def backward(ctx, grad):  # noqa: D102
        return grad, None, None


class _AllReduceGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, comm: Comm, axis: str):  # noqa: D102
        ctx.comm, ctx.axis = comm, axis
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):  # noqa: D102
        if ctx.comm.grid.size(ctx.axis) == 1:
            return grad, None, None
        grad = grad.clone(memory_format=torch.contiguous_format)
        return ctx.comm.raw_all_reduce(grad, ctx.axis), None, None


class _RowBlocks(torch.autograd.Function):
    """All-gather of row blocks (``gather``) or reduce-scatter into them: each is the other's
    adjoint, so the backward of one is the other."""

    @staticmethod
    def forward(ctx, x, comm: Comm, axis: str, gather: bool):  # noqa: D102
        ctx.comm, ctx.axis, ctx.gather = comm, axis, gather
        return (comm.raw_all_gather if gather else comm.raw_reduce_scatter)(x, axis)

    @staticmethod
    def backward(ctx, grad):  # noqa: D102
        adjoint = ctx.comm.raw_reduce_scatter if ctx.gather else ctx.comm.raw_all_gather
        return adjoint(grad, ctx.axis), None, None, None
