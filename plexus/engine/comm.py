"""Collectives along one grid axis, differentiable, each recorded in the ledger and timed.

The replicated-gradient convention: a tensor replicated over an axis carries, on every replica,
the full gradient. Hence the pairs below (the f/g operators of tensor parallelism):
- ``all_reduce``: sums partial results over the axis; backward passes the gradient through.
- ``all_reduce_grad``: marks a replicated tensor that the ranks of the axis use differently;
  forward passes it through, backward sums the gradient over the axis.
- ``all_gather`` (rows): backward reduce-scatters the gradient over the axis.

Payload precision (``wire``, `plexus.engine.config.EngineConfig.comm_dtype`): a float32 tensor
is sent in bf16/fp16 unless an `exact` block issues it (statistics: the loss, the metric,
BatchNorm's sums, the attention's scores and softmax). Sums never accumulate in the low
precision: an all-reduce is an all-to-all of the low-precision blocks, each rank's block summed
in float32 in rank order, then an all-gather of the rounded sums (the ring's volume, two
roundings per element, the same result on every replica); a reduce-scatter is the first half.

Placement (`Comm.place`): with ranks on nodes (`EngineConfig.gpus_per_node`), the sums and
gathers over an axis whose groups span several nodes with several ranks on each run in two
levels where `plexus_partition.model.topology.choose_form` says so (`EngineConfig.collectives`;
`plexus.engine.twolevel`), and the ledger counts every collective's bytes per link class, each
part on its own ("intra": a group inside one node, "inter": across nodes).

Every collective is recorded in the ledger under the layer and phase the model is in (`at`);
a backward records under the layer of the forward that created it (`tag`, `backward_of`).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Mapping, NamedTuple

import torch
import torch.distributed as dist

from plexus_partition.model.grid import AXES
from plexus_partition.model.schedule import exchange_names
from plexus_partition.model.topology import (COLLECTIVES, axis_span, check_gpus_per_node,
                                             choose_form, group_link, group_ranks, node_text,
                                             parts, placed_ranks, ring_class)

from .grid import Grid
from .ledger import Ledger
from .pieces import piece_budget
from .timing import Timers
from .twolevel import (Levels, all_gather_single as _all_gather, into, low_scatter, low_sum,
                       reduce_in_place, reduce_scatter_single as _reduce_scatter)


class Label(NamedTuple):
    """What the collective issued within `Comm.labelled` is, read by a dry run's recording
    (`plexus.engine.dryrun`; a real run only carries it): its name in the forward
    (``forward``) and in the backward of what the forward issued (``backward``); ``rows``: it
    sums a sparse product (or its gradient) whose rows the engine may cut into pieces
    (`plexus.engine.config.EngineConfig.agg_chunks`), and ``sparse`` "sum" (partials zero
    outside the rows the block touches) or "gather" (the gradient read there only): the
    schedule may send it as a sparse exchange of those rows."""

    forward: str = ""
    backward: str = ""
    sparse: str | None = None
    rows: bool = False


class Tag(NamedTuple):
    """Where a collective comes from: the GNN layer (None: the loss or the metric), whether
    it is a statistic sent exactly (float32, never in the wire precision) and its `Label`."""

    layer: int | None
    exact: bool
    label: Label | None = None


def staged(device: torch.device) -> bool:
    """Whether collectives of tensors on ``device`` go through host memory: CUDA tensors in a
    gloo group (several ranks sharing a GPU, where NCCL needs a GPU per rank)."""
    return (torch.device(device).type == "cuda" and dist.is_initialized()
            and dist.get_backend() == "gloo")


def all_reduce_staged(x: torch.Tensor, op=dist.ReduceOp.SUM, group=None) -> torch.Tensor:
    """In-place all-reduce of ``x`` (the default group, or ``group``), through host memory when
    `staged` says so; returns ``x``."""
    return reduce_in_place(x, group, staged(x.device), op)


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
                 budget: float | None = None, wire: torch.dtype | None = None):
        self.grid = grid
        self.wire = wire  # None: payloads sent as they are
        self._layer: int | None = None
        self._phase = "forward"
        self._exact = False
        self._label: Label | None = None
        self._exchange: str | None = None  # inside a sparse exchange of this kind
        self.ledger = ledger or Ledger()
        self.timers = timers or Timers(grid.device, enabled=False)
        self.budget = piece_budget(grid.device) if budget is None else budget
        # several ranks sharing one GPU talk gloo, which reduces host memory: stage through it
        self.staged = staged(grid.device)
        self.collectives, self.gpus_per_node, self.rates = "flat", None, None
        self.spans = {a: axis_span(grid.shape, a, None) for a in AXES}
        self.links = dict.fromkeys(AXES, "intra")
        self.levels: dict[str, Levels] = {}

    def place(self, collectives: str = "auto", gpus_per_node: int | None = None,
              rates: Mapping[str, tuple[float, float]] | None = None,
              node: tuple[int, int, int] | None = None) -> None:
        """Ranks on nodes of ``gpus_per_node`` (None: one node), each holding the grid block
        ``node`` (None: the launcher's numbering; both None: the grid's own placement; any
        other than the grid's is refused, ValueError), collectives in the form
        ``collectives`` (`plexus_partition.model.topology.COLLECTIVES`) picks, "auto" priced
        with the link classes' ``rates`` ({class: (α, β)}) where given, as the performance
        model prices it (`topology.choose_form`). Collective: the sub-groups of every axis that
        may run in two levels are made here (`Grid.levels`), on every rank alike."""
        if collectives not in COLLECTIVES:
            raise ValueError(f"unknown collectives {collectives!r}; use one of "
                             f"{', '.join(COLLECTIVES)}")
        self.collectives, self.rates = collectives, dict(rates) if rates else None
        if gpus_per_node is None and node is None:  # nothing said: where the grid put them
            gpus_per_node, node = self.grid.gpus_per_node, self.grid.node
        self.gpus_per_node = k = check_gpus_per_node(gpus_per_node)
        if placed_ranks(self.grid.shape, k, node) != self.grid.ranks:
            raise ValueError(f"the grid's ranks sit as {self.grid.placement()}, the engine's "
                             f"as {node_text(k, node)}: create the grid with the engine's "
                             "gpus_per_node and node_block (Grid.create)")
        self.spans = {a: axis_span(self.grid.shape, a, k, self.grid.node) for a in AXES}
        # a group's link class from where its processes sit (grid ranks map onto processes)
        self.links = {a: group_link([self.grid.process_rank(r) for r in
                                     group_ranks(self.grid.shape, a, self.grid.rank)], k)
                      for a in AXES}
        self.levels = {a: self.grid.levels(a, span.per_node, self.staged)
                       for a, span in self.spans.items()
                       if collectives != "flat" and span.split}

    def _two_level(self, axis: str, op: str, numel: int, itemsize: int) -> Levels | None:
        """The sub-groups ``op`` of full size ``numel`` over ``axis`` runs on in two levels, or
        None: flat (arithmetic on sizes: no host synchronisation)."""
        levels, span = self.levels.get(axis), self.spans[axis]
        if levels is None or choose_form(self.collectives, span, op, numel, itemsize,
                                         self.rates, ring_class(span)) == "flat":
            return None
        return levels

    # ---- where collectives come from (the ledger's keys) and their precision ---------------
    @contextmanager
    def at(self, layer: int | None, phase: str) -> Iterator[None]:
        """Within: collectives are recorded as issued by ``layer`` in ``phase``."""
        saved = self._layer, self._phase
        self._layer, self._phase = layer, phase
        try:
            yield
        finally:
            self._layer, self._phase = saved

    @contextmanager
    def exact(self, on: bool = True) -> Iterator[None]:
        """Within (``on``): float32 tensors are sent as float32 whatever the wire precision
        (statistics the schedule declares with their own item size)."""
        saved, self._exact = self._exact, on
        try:
            yield
        finally:
            self._exact = saved

    @contextmanager
    def labelled(self, forward: str = "", backward: str = "", sparse: str | None = None,
                 rows: bool = False) -> Iterator[None]:
        """Within: the collective issued (forward) and the one its backward issues are named
        ``forward`` and ``backward``, with ``sparse`` and ``rows`` as `Label` says (for a dry
        run's recording, and the ledger keeps the names: `name`)."""
        saved, self._label = self._label, Label(forward, backward, sparse, rows)
        try:
            yield
        finally:
            self._label = saved

    @contextmanager
    def exchanging(self, kind: str) -> Iterator[None]:
        """Within: the collectives carry the labelled all-reduce as a sparse exchange ``kind``
        ("sum" or "gather"), named as the schedule names them
        (`plexus_partition.model.schedule.exchange_names`)."""
        saved, self._exchange = self._exchange, kind
        try:
            yield
        finally:
            self._exchange = saved

    def name(self, op: str) -> str:
        """The name of collective ``op`` issued now: the label's forward name, or in a backward
        its backward name (`labelled`), as a sparse exchange's part within `exchanging`; ""
        where no code labelled it."""
        label = self._label
        base = "" if label is None else (
            label.backward if self._phase == "backward" else label.forward)
        if base and self._exchange is not None:
            return exchange_names(base, self._exchange).get(op, base)
        return base

    def tag(self) -> Tag:
        """The layer, exactness and label now: what an autograd function keeps for its
        backward."""
        return Tag(self._layer, self._exact, self._label)

    @contextmanager
    def backward_of(self, tag: Tag) -> Iterator[None]:
        """Within: the backward of a forward issued under ``tag``."""
        saved, self._label = self._label, tag.label
        try:
            with self.at(tag.layer, "backward"), self.exact(tag.exact):
                yield
        finally:
            self._label = saved

    def wire_of(self, x: torch.Tensor) -> torch.dtype | None:
        """The low precision ``x`` travels in (None: as it is)."""
        return self.wire if (self.wire is not None and not self._exact
                             and x.dtype == torch.float32) else None

    def record(self, axis: str, op: str, numel: int, p: int, itemsize: int,
               form: str = "flat") -> None:
        """Record a collective this rank issues (``numel`` as the ledger counts it) under the
        layer and phase now (`at`), run in ``form`` (its parts on their link classes)."""
        pieces = None if form == "flat" else parts(op, form, numel, self.spans[axis])
        self.ledger.record(axis, op, numel, p, itemsize, self._layer, self._phase, pieces,
                           self.links[axis], self.name(op))

    # ---- raw (non-differentiable) collectives -------------------------------------------
    def raw_all_reduce(self, x: torch.Tensor, axis: str, op: str = "sum",
                       async_op: bool = False):
        """In-place all-reduce of ``x`` over ``axis`` with ``op`` in {"sum", "max", "min"}.
        Returns ``x``, or with ``async_op`` a work handle to pass to `wait` (None: nothing to
        do)."""
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
        wire = self.wire_of(x) if op == "sum" else None
        reduce_op = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX,
                     "min": dist.ReduceOp.MIN}[op]
        levels = self._two_level(axis, "all_reduce", x.numel(),
                                 x.element_size() if wire is None else wire.itemsize)
        if levels is not None:  # three collectives in a row: synchronously
            self.record(axis, "all_reduce", x.numel(), p,
                        x.element_size() if wire is None else wire.itemsize, "hierarchical")
            with self.timers(f"all_reduce:{axis}"):
                levels.all_reduce(x, wire, reduce_op)
            return None if async_op else x
        if wire is not None:  # two-shot, float32 sums: nothing to overlap with
            self.record(axis, "all_reduce", x.numel(), p, wire.itemsize)
            with self.timers(f"all_reduce:{axis}"):
                self._low_all_reduce(x, axis, p, wire)
            return None if async_op else x
        self.record(axis, "all_reduce", x.numel(), p, x.element_size())
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
        x, wire = x.contiguous(), self.wire_of(x)
        send = x if wire is None else x.to(wire)
        levels = self._two_level(axis, "all_gather", p * x.numel(), send.element_size())
        self.record(axis, "all_gather", p * x.numel(), p, send.element_size(),
                    "flat" if levels is None else "hierarchical")
        with self.timers(f"all_gather:{axis}"):
            if levels is not None:
                out = levels.all_gather(send)
            else:
                out = send.new_empty((p * x.shape[0],) + tuple(x.shape[1:]))
                out = self._into(out, send, _all_gather, axis)
        return out if wire is None else out.to(x.dtype)

    def raw_reduce_scatter(self, x: torch.Tensor, axis: str) -> torch.Tensor:
        """Sum ``x`` over ``axis`` and keep this rank's block of dim 0."""
        p = self.grid.size(axis)
        if p == 1:
            return x
        x, wire = x.contiguous(), self.wire_of(x)
        levels = self._two_level(axis, "reduce_scatter", x.numel(),
                                 x.element_size() if wire is None else wire.itemsize)
        self.record(axis, "reduce_scatter", x.numel(), p,
                    x.element_size() if wire is None else wire.itemsize,
                    "flat" if levels is None else "hierarchical")
        with self.timers(f"reduce_scatter:{axis}"):
            if levels is not None:
                return levels.reduce_scatter(x, wire)
            if wire is not None:  # the blocks in the low precision, summed in float32
                return low_scatter(x, self.grid.group(axis), p, wire, self.staged)
            out = x.new_empty((x.shape[0] // p,) + tuple(x.shape[1:]))
            return self._into(out, x, _reduce_scatter, axis)

    def _low_all_reduce(self, x: torch.Tensor, axis: str, p: int, wire: torch.dtype) -> None:
        """x (contiguous) summed over ``axis`` in place, sent in ``wire``: the flat buffer
        padded to a multiple of p (at most p - 1 zeros, not counted), its p blocks exchanged
        (all-to-all), this rank's block summed in x's precision in rank order, the rounded sums
        all-gathered: every replica gets the same values."""
        flat = x.view(-1)
        flat.copy_(low_sum(flat, self.grid.group(axis), p, wire, self.staged))

    def _into(self, out: torch.Tensor, x: torch.Tensor, collective, axis: str) -> torch.Tensor:
        """``collective(out, x)`` over ``axis``'s group (a single-tensor all-gather or
        reduce-scatter), through host memory where `staged`; returns ``out``."""
        return into(out, x, collective, self.grid.group(axis), self.staged)

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


class GradCollective(torch.autograd.Function):
    """Identity forward, ``apply(x, comm, over)``; a subclass's backward runs a collective on
    the gradient over ``ctx.over`` (an axis, a row exchange), recorded under the forward's
    layer (``ctx.tag``)."""

    @staticmethod
    def forward(ctx, x, comm: Comm, over):  # noqa: D102
        ctx.comm, ctx.over, ctx.tag = comm, over, comm.tag()
        return x.view_as(x)


class _AllReduceGrad(GradCollective):
    @staticmethod
    def backward(ctx, grad):  # noqa: D102
        if ctx.comm.grid.size(ctx.over) == 1:
            return grad, None, None
        grad = grad.clone(memory_format=torch.contiguous_format)
        with ctx.comm.backward_of(ctx.tag):
            return ctx.comm.raw_all_reduce(grad, ctx.over), None, None


class _RowBlocks(torch.autograd.Function):
    """All-gather of row blocks (``gather``) or reduce-scatter into them: each is the other's
    adjoint, so the backward of one is the other."""

    @staticmethod
    def forward(ctx, x, comm: Comm, axis: str, gather: bool):  # noqa: D102
        ctx.comm, ctx.axis, ctx.gather, ctx.tag = comm, axis, gather, comm.tag()
        return (comm.raw_all_gather if gather else comm.raw_reduce_scatter)(x, axis)

    @staticmethod
    def backward(ctx, grad):  # noqa: D102
        adjoint = ctx.comm.raw_reduce_scatter if ctx.gather else ctx.comm.raw_all_gather
        with ctx.comm.backward_of(ctx.tag):
            return adjoint(grad, ctx.axis), None, None, None
