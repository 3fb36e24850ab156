"""Collectives in two levels over a split axis (`plexus_partition.model.topology`): a node's part on
the sub-group of the axis group's k ranks on this node (``intra``), the network's on the m ranks
of the group that share this rank's local index l (``inter``); position j = i·k + l along the
axis is rank l of node i. Every part is a torch.distributed collective of a sub-group built once
at set-up (`plexus.engine.grid.Grid.levels`); tensors on a GPU in a gloo group go through host
memory (`into`, `reduce_in_place`), as every collective of `plexus.engine.comm` does.

- `all_reduce`: reduce-scatter within the node (the flat buffer padded to a multiple of k), an
  all-reduce of this rank's 1/k across the nodes, an all-gather within the node.
- `all_gather`: across the nodes (the blocks of positions l, k + l, ...), then within the node;
  the result's blocks put back in position order: the flat all-gather's, bit for bit.
- `reduce_scatter`: the blocks reordered so that the node's reduce-scatter leaves rank l those
  of positions l, k + l, ...; then across the nodes: this rank keeps position j's block.

Sums change order against the flat ring (the node's partial sums first, then the nodes'), so
all-reduces and reduce-scatters agree with the flat ones to rounding, not bit for bit (sums of
exactly representable values are equal); every replica of an all-reduce gets the same values.
With a low-precision ``wire`` (float32 sums, `plexus.engine.comm`'s rule) each level sends its
blocks in the wire precision and sums them in float32 in rank order: an all-reduce rounds each
element three times (the sender's cast, the node's partial sum's, the final sum's; flat: twice),
a reduce-scatter twice (flat: once); an all-gather sends the rounded blocks once, as flat.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.distributed as dist

# torch >= 2.13 renames the single-tensor collectives; keep both spellings working.
reduce_scatter_single = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def into(out: torch.Tensor, x: torch.Tensor, collective: Callable, group, staged: bool
         ) -> torch.Tensor:
    """``collective(out, x)`` over ``group`` (a single-tensor all-gather, reduce-scatter or
    all-to-all), through host memory when ``staged``; returns ``out``."""
    if not staged:
        collective(out, x, group=group)
        return out
    host = out.cpu()
    collective(host, x.cpu(), group=group)
    return out.copy_(host)


def reduce_in_place(x: torch.Tensor, group, staged: bool, op=dist.ReduceOp.SUM) -> torch.Tensor:
    """In-place all-reduce of ``x`` over ``group``, through host memory when ``staged``."""
    if not staged:
        dist.all_reduce(x, op=op, group=group)
        return x
    host = x.cpu()
    dist.all_reduce(host, op=op, group=group)
    return x.copy_(host)


def low_sum(flat: torch.Tensor, group, p: int, wire: torch.dtype, staged: bool) -> torch.Tensor:
    """The sum over ``group`` (p ranks) of the 1-D ``flat``, sent in ``wire``: the buffer padded
    to a multiple of p (at most p − 1 zeros), its p blocks exchanged (all-to-all), this rank's
    block summed in ``flat``'s precision in rank order, the sums rounded to ``wire`` and
    all-gathered. Returns the n rounded sums (in ``wire``), the same on every rank."""
    n = flat.numel()
    m = -(-n // p)
    send = torch.zeros(p * m, dtype=wire, device=flat.device)
    send[:n].copy_(flat)
    got = into(torch.empty_like(send), send, dist.all_to_all_single, group, staged)
    mine = got.view(p, m).to(flat.dtype).sum(0).to(wire)
    return into(torch.empty_like(send), mine, all_gather_single, group, staged)[:n]


def low_scatter(x: torch.Tensor, group, p: int, wire: torch.dtype, staged: bool) -> torch.Tensor:
    """The reduce-scatter over ``group`` (p ranks) of ``x`` (dim 0 a multiple of p), sent in
    ``wire``, summed in ``x``'s precision in rank order: this rank's block."""
    send = x.to(wire)
    got = into(torch.empty_like(send), send, dist.all_to_all_single, group, staged)
    return got.view((p, x.shape[0] // p) + tuple(x.shape[1:])).to(x.dtype).sum(0)


@dataclass(frozen=True)
class Levels:
    """This rank's two sub-groups of a split axis: ``intra`` (its group's k ranks on its node)
    and ``inter`` (its group's m ranks with its local index), and ``staged``: tensors go
    through host memory (CUDA tensors in a gloo group)."""

    intra: object
    inter: object
    k: int
    m: int
    staged: bool = False

    def all_reduce(self, x: torch.Tensor, wire: torch.dtype | None = None,
                   op=dist.ReduceOp.SUM) -> torch.Tensor:
        """Reduce the contiguous ``x`` over the axis in place with ``op`` (a sum where ``wire``
        is given: sent in that precision, summed in ``x``'s); returns ``x``."""
        flat, k, staged = x.view(-1), self.k, self.staged
        n = flat.numel()
        c = -(-n // k)
        if wire is not None:
            send = torch.zeros(k * c, dtype=wire, device=x.device)
            send[:n].copy_(flat)
            got = into(torch.empty_like(send), send, dist.all_to_all_single, self.intra, staged)
            part = got.view(k, c).to(x.dtype).sum(0)
            mine = low_sum(part, self.inter, self.m, wire, staged)
            out = into(torch.empty_like(send), mine, all_gather_single, self.intra, staged)
            flat.copy_(out[:n])
            return x
        whole = flat if n == k * c else torch.cat([flat, flat.new_zeros(k * c - n)])
        part = into(flat.new_empty(c), whole,
                    lambda out, t, group: reduce_scatter_single(out, t, op=op, group=group),
                    self.intra, staged)
        reduce_in_place(part, self.inter, staged, op)
        if whole is flat:
            into(flat, part, all_gather_single, self.intra, staged)
        else:
            flat.copy_(into(whole, part, all_gather_single, self.intra, staged)[:n])
        return x

    def all_gather(self, x: torch.Tensor) -> torch.Tensor:
        """The blocks (dim 0) of every rank of the axis in position order: across the nodes,
        then within the node, then reordered."""
        rest, b = tuple(x.shape[1:]), x.shape[0]
        across = into(x.new_empty((self.m * b,) + rest), x, all_gather_single, self.inter,
                      self.staged)
        both = into(x.new_empty((self.k * self.m * b,) + rest), across, all_gather_single,
                    self.intra, self.staged)
        return both.view((self.k, self.m, b) + rest).transpose(0, 1).reshape(
            (self.k * self.m * b,) + rest)

    def reduce_scatter(self, x: torch.Tensor, wire: torch.dtype | None = None) -> torch.Tensor:
        """This rank's block (dim 0, position j = i·k + l) of the sum of ``x`` over the axis:
        the blocks reordered (l-major), within the node, then across the nodes (``wire``: each
        level sent in that precision, summed in ``x``'s)."""
        k, m, staged = self.k, self.m, self.staged
        rest, b = tuple(x.shape[1:]), x.shape[0] // (k * m)
        ordered = x.view((m, k, b) + rest).transpose(0, 1).reshape((k * m * b,) + rest)
        if wire is not None:
            part = low_scatter(ordered, self.intra, k, wire, staged)
            return low_scatter(part, self.inter, m, wire, staged)
        part = into(x.new_empty((m * b,) + rest), ordered, reduce_scatter_single, self.intra,
                    staged)
        return into(x.new_empty((b,) + rest), part, reduce_scatter_single, self.inter, staged)
