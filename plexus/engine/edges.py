"""Per-edge building blocks of attention on a block of Â: scores, the edge softmax across the
grid, the α-weighted aggregation and its chunked backward.

An `EdgeBlock` is the structure of this rank's block of Â (M + I: rows = destinations cut by one
axis, columns = sources cut by another) as edges, with its transpose and the original ids of its
rows and columns. Per-edge tensors are (heads, edges) float32; every pass over the edges runs in
chunks, so no temporary is larger than a chunk times the width, and no edge × feature tensor or
dense per-edge gradient ever exists (torch.sparse.mm's gradient for CSR values would be dense).

- `attention_softmax`: α = softmax over each row's in-edges of LeakyReLU(s_dst[i] + s_src[j])
  (GAT's scores from node scores): the row's columns are cut by ``axis``, so its maximum and its
  sum are all-reduced over it (AR-MAX, AR-SUM); backward all-reduces Σ_j α_ij·dα_ij over it.
- `edge_softmax`: the same on any per-edge scores.
- `sddmm`: per-edge, per-head dot products of destination and source features whose columns are
  cut by ``axis`` (an all-reduce of the edge scores over it, forward and backward).
- `weighted_aggregate`: OUT_i = Σ_j α_ij·Z_j per head (one CSR SpMM per head with α as values),
  optionally all-reduced over the axis Â's columns are cut by; backward dZ = αᵀ·dOUT (the
  transpose's SpMM) and dα_ij = dOUT_i·Z_j (an SDDMM over chunks of edges). Attention dropout
  masks are a hash of (seed, step, layer, head, destination id, source id): the same on every
  grid and in the serial reference, recomputed in backward.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn.functional as F

from .comm import Comm
from .seeding import edge_keep
from .spmm import csr_mm, index_fits_int32

# Elements of (heads × edges) per chunk: a few MiB of float32 per temporary.
CHUNK = 1 << 21


class EdgeBlock:
    """The edges of a block of Â (``m``: CSR, rows = destinations) on ``device``.

    ``row``/``col``: each edge's local row and column (CSR order); ``crow_t``/``col_t``/``perm``:
    the transpose's CSR structure and, for each of its entries, the edge it is; ``row_ids`` and
    ``col_ids``: the original node id of every local row and column (-1: padding), which key the
    dropout masks. 32-bit indices where the sizes fit."""

    def __init__(self, m: sp.csr_matrix, row_ids: np.ndarray, col_ids: np.ndarray,
                 device: torch.device | str = "cpu") -> None:
        m = sp.csr_matrix(m)
        m.sort_indices()
        self.num_rows, self.num_cols = m.shape
        self.nnz = int(m.nnz)
        index = np.int32 if index_fits_int32(m.shape, m.nnz) else np.int64

        def t(a: np.ndarray) -> torch.Tensor:
            return torch.from_numpy(np.ascontiguousarray(a, dtype=index)).to(device)

        self.crow = t(m.indptr)
        self.col = t(m.indices)
        self.row = t(np.repeat(np.arange(self.num_rows, dtype=index), np.diff(m.indptr)))
        order = sp.csr_matrix((np.arange(self.nnz, dtype=np.float64), m.indices, m.indptr),
                              shape=m.shape).T.tocsr()
        order.sort_indices()
        self.crow_t, self.col_t = t(order.indptr), t(order.indices)
        self.perm = t(order.data.astype(np.int64))
        self.row_ids = torch.from_numpy(np.asarray(row_ids, dtype=np.int64)).to(device)
        self.col_ids = torch.from_numpy(np.asarray(col_ids, dtype=np.int64)).to(device)

    def chunks(self, heads: int):
        """(start, stop) of the edge chunks for per-edge tensors of ``heads`` rows."""
        step = max(1024, CHUNK // max(heads, 1))
        return [(a, min(a + step, self.nnz)) for a in range(0, self.nnz, step)] or [(0, 0)]

    def csr(self, values: torch.Tensor) -> torch.Tensor:
        """The block with per-edge ``values`` (CSR order) as a torch CSR tensor."""
        return torch.sparse_csr_tensor(self.crow, self.col, values,
                                       (self.num_rows, self.num_cols))

    def csr_t(self, values: torch.Tensor) -> torch.Tensor:
        """The block's transpose with per-edge ``values`` (CSR order of the block)."""
        return torch.sparse_csr_tensor(self.crow_t, self.col_t, values[self.perm],
                                       (self.num_cols, self.num_rows))


def _scores(block: EdgeBlock, sd: torch.Tensor, ss: torch.Tensor, a: int, b: int,
            slope: float | None) -> torch.Tensor:
    """(heads, b - a): s_dst[row] + s_src[col] of edges a..b, LeakyReLU'd when ``slope``."""
    e = sd.index_select(1, block.row[a:b]).add_(ss.index_select(1, block.col[a:b]))
    return e if slope is None else F.leaky_relu(e, slope)


def _softmax(block: EdgeBlock, heads: int, comm: Comm, axis: str, edge_scores) -> torch.Tensor:
    """α (heads, edges): the softmax over every row's edges of ``edge_scores(a, b)``, the rows'
    maximum and sum all-reduced over ``axis`` (the axis that cuts a row's columns)."""
    m = torch.full((heads, block.num_rows), float("-inf"), device=block.row.device)
    for a, b in block.chunks(heads):
        rows = block.row[a:b].to(torch.int64).expand(heads, -1)
        m.scatter_reduce_(1, rows, edge_scores(a, b), "amax")
    comm.raw_all_reduce(m, axis, "max")                       # AR-MAX(e) over the row's cut
    alpha = torch.empty(heads, block.nnz, device=m.device)
    total = torch.zeros_like(m)
    for a, b in block.chunks(heads):
        p = edge_scores(a, b).sub_(m.index_select(1, block.row[a:b])).exp_()
        alpha[:, a:b] = p
        total.index_add_(1, block.row[a:b], p)
    comm.raw_all_reduce(total, axis)                          # AR-SUM(e) over the row's cut
    for a, b in block.chunks(heads):
        alpha[:, a:b].div_(total.index_select(1, block.row[a:b]))
    return alpha


def _softmax_backward(block: EdgeBlock, alpha: torch.Tensor, grad: torch.Tensor, comm: Comm,
                      axis: str) -> torch.Tensor:
    """de = α·(dα − Σ_j α·dα) per row, written over ``grad`` (dα; fresh, nobody else's); the row
    sums all-reduced over ``axis``."""
    heads = alpha.shape[0]
    de = grad.mul_(alpha)
    c = torch.zeros(heads, block.num_rows, device=alpha.device)
    for a, b in block.chunks(heads):
        c.index_add_(1, block.row[a:b], de[:, a:b])
    comm.raw_all_reduce(c, axis)                              # AR(Σα·dα) over the row's cut
    for a, b in block.chunks(heads):
        de[:, a:b].sub_(alpha[:, a:b] * c.index_select(1, block.row[a:b]))
    return de


class _AttentionSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, s_dst, s_src, block: EdgeBlock, comm: Comm, axis: str,
                slope: float):  # noqa: D102
        sd, ss = s_dst.detach().T.contiguous(), s_src.detach().T.contiguous()
        heads = sd.shape[0]
        with comm.timers("edges"):
            alpha = _softmax(block, heads, comm, axis,
                             lambda a, b: _scores(block, sd, ss, a, b, slope))
        ctx.save_for_backward(alpha, s_dst, s_src)
        ctx.block, ctx.comm, ctx.axis, ctx.slope = block, comm, axis, slope
        return alpha

    @staticmethod
    def backward(ctx, grad):  # noqa: D102
        alpha, s_dst, s_src = ctx.saved_tensors
        block, heads = ctx.block, alpha.shape[0]
        sd, ss = s_dst.T.contiguous(), s_src.T.contiguous()
        with ctx.comm.timers("edges"):
            de = _softmax_backward(block, alpha, grad.contiguous(), ctx.comm, ctx.axis)
            d_dst = torch.zeros(heads, block.num_rows, device=alpha.device)
            d_src = torch.zeros(heads, block.num_cols, device=alpha.device)
            for a, b in block.chunks(heads):
                raw = _scores(block, sd, ss, a, b, None)
                g = de[:, a:b]
                g.mul_(torch.where(raw > 0, 1.0, ctx.slope))  # LeakyReLU's backward
                d_dst.index_add_(1, block.row[a:b], g)
                d_src.index_add_(1, block.col[a:b], g)
        return d_dst.T, d_src.T, None, None, None, None


def attention_softmax(s_dst: torch.Tensor, s_src: torch.Tensor, block: EdgeBlock, comm: Comm,
                      axis: str, negative_slope: float = 0.2) -> torch.Tensor:
    """GAT's attention coefficients α (heads, edges), float32: the softmax over each row's
    in-edges of LeakyReLU(s_dst[row] + s_src[col]). ``s_dst`` (rows, heads) are in Â's row
    layout, ``s_src`` (cols, heads) in its column layout, both float32 and complete; ``axis``
    cuts the block's columns. Saves α and the node scores (LeakyReLU's sign is recomputed)."""
    return _AttentionSoftmax.apply(s_dst, s_src, block, comm, axis, negative_slope)


class _EdgeSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, e, block: EdgeBlock, comm: Comm, axis: str):  # noqa: D102
        e = e.detach().float()
        with comm.timers("edges"):
            alpha = _softmax(block, e.shape[0], comm, axis, lambda a, b: e[:, a:b].clone())
        ctx.save_for_backward(alpha)
        ctx.block, ctx.comm, ctx.axis = block, comm, axis
        return alpha

    @staticmethod
    def backward(ctx, grad):  # noqa: D102
        (alpha,) = ctx.saved_tensors
        with ctx.comm.timers("edges"):
            de = _softmax_backward(ctx.block, alpha, grad.float().clone(), ctx.comm, ctx.axis)
        return de, None, None, None


def edge_softmax(e: torch.Tensor, block: EdgeBlock, comm: Comm, axis: str) -> torch.Tensor:
    """α = the softmax of per-edge scores ``e`` (heads, edges) over each row's edges, across
    the grid (``axis`` cuts the block's columns); float32."""
    return _EdgeSoftmax.apply(e, block, comm, axis)


def head_matrix(col_start: int, width: int, head_width: int, heads: int,
                device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32
                ) -> torch.Tensor:
    """P (width × heads): P[c, h] = 1 where this rank's column ``col_start + c`` of the inner
    width belongs to head h (heads of ``head_width`` columns each; columns beyond the last head
    are padding and belong to none)."""
    cols = torch.arange(col_start, col_start + width, device=device)
    head = torch.div(cols, head_width, rounding_mode="floor")
    return (head[:, None] == torch.arange(heads, device=device)[None, :]).to(dtype)


def head_ranges(col_start: int, width: int, head_width: int, heads: int
                ) -> list[tuple[int, int, int]]:
    """(head, first, last + 1) local columns of every head with columns in this rank's block."""
    out = []
    for h in range(heads):
        lo, hi = max(h * head_width, col_start), min((h + 1) * head_width, col_start + width)
        if hi > lo:
            out.append((h, lo - col_start, hi - col_start))
    return out


class _SDDMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, block: EdgeBlock, P: torch.Tensor, comm: Comm,
                axis: str):  # noqa: D102
        heads = P.shape[1]
        out = torch.empty(heads, block.nnz, device=q.device)
        with comm.timers("edges"):
            for a, b in block.chunks(max(heads, q.shape[1])):
                g = q.index_select(0, block.row[a:b]).mul_(k.index_select(0, block.col[a:b]))
                out[:, a:b] = (g @ P.to(g.dtype)).T
        comm.raw_all_reduce(out, axis)                        # AR(e) over the features' cut
        ctx.save_for_backward(q, k, P)
        ctx.block, ctx.comm, ctx.axis = block, comm, axis
        return out

    @staticmethod
    def backward(ctx, grad):  # noqa: D102
        q, k, P = ctx.saved_tensors
        block = ctx.block
        grad = ctx.comm.raw_all_reduce(grad.contiguous().clone(), ctx.axis)  # AR(de) over it
        dq, dk = torch.zeros_like(q), torch.zeros_like(k)
        with ctx.comm.timers("edges"):
            for a, b in block.chunks(max(P.shape[1], q.shape[1])):
                w = (grad[:, a:b].T.to(q.dtype) @ P.T.to(q.dtype))  # (edges, width)
                dq.index_add_(0, block.row[a:b], w * k.index_select(0, block.col[a:b]))
                dk.index_add_(0, block.col[a:b], w * q.index_select(0, block.row[a:b]))
        return dq, dk, None, None, None, None


def sddmm(q: torch.Tensor, k: torch.Tensor, block: EdgeBlock, P: torch.Tensor, comm: Comm,
          axis: str) -> torch.Tensor:
    """Per-edge, per-head dot products e[h, (i, j)] = Σ_{c of head h} q[i, c]·k[j, c] (float32,
    (heads, edges)), with ``q`` in the block's row layout and ``k`` in its column layout, their
    columns cut by ``axis`` (so the partial sums are all-reduced over it; backward all-reduces
    the gradient over it too: every rank of the axis used e on its own columns). ``P``:
    `head_matrix` of this rank's columns."""
    return _SDDMM.apply(q, k, block, P, comm, axis)


class _WeightedAggregate(torch.autograd.Function):
    @staticmethod
    def forward(ctx, alpha, z, block: EdgeBlock, comm: Comm, axis: str | None,
                heads: list[tuple[int, int, int]], P: torch.Tensor,
                drop: tuple | None):  # noqa: D102
        out = torch.zeros(block.num_rows, z.shape[1], dtype=z.dtype, device=z.device)
        with comm.timers("spmm"):
            for h, lo, hi in heads:
                values = _dropped(alpha, h, block, drop).to(z.dtype)
                out[:, lo:hi] = csr_mm(block.csr(values), z[:, lo:hi])
        if axis is not None:
            comm.raw_all_reduce(out, axis)                    # AR(OUT) over Â's column cut
        ctx.save_for_backward(alpha, z, P)
        ctx.block, ctx.comm, ctx.heads, ctx.drop = block, comm, heads, drop
        return out

    @staticmethod
    def backward(ctx, grad):  # noqa: D102
        alpha, z, P = ctx.saved_tensors
        block, heads, drop = ctx.block, ctx.heads, ctx.drop
        grad = grad.contiguous()
        dz = dalpha = None
        if ctx.needs_input_grad[1]:
            dz = torch.zeros_like(z)
            with ctx.comm.timers("spmm"):
                for h, lo, hi in heads:
                    values = _dropped(alpha, h, block, drop).to(z.dtype)
                    dz[:, lo:hi] = csr_mm(block.csr_t(values), grad[:, lo:hi])
        if ctx.needs_input_grad[0]:
            dalpha = torch.zeros_like(alpha)
            with ctx.comm.timers("edges"):
                for a, b in block.chunks(max(alpha.shape[0], z.shape[1])):  # the SDDMM
                    g = grad.index_select(0, block.row[a:b])
                    g.mul_(z.index_select(0, block.col[a:b]))
                    dalpha[:, a:b] = (g @ P.to(g.dtype)).T
                if drop is not None:
                    for h in range(alpha.shape[0]):
                        dalpha[h] = _dropped(dalpha, h, block, drop)
        return dalpha, dz, None, None, None, None, None, None


def _dropped(alpha: torch.Tensor, h: int, block: EdgeBlock, drop: tuple | None) -> torch.Tensor:
    """Head h's row of ``alpha`` with attention dropout applied (scaled by 1/(1-p))."""
    if drop is None:
        return alpha[h]
    seed, step, layer, p = drop
    out, zero = torch.empty_like(alpha[h]), alpha.new_zeros(())
    for a, b in block.chunks(1):
        keep = edge_keep(seed, step, layer, h, block.row_ids.index_select(0, block.row[a:b]),
                         block.col_ids.index_select(0, block.col[a:b]), p)
        torch.where(keep, alpha[h, a:b], zero, out=out[a:b])
    return out.mul_(1.0 / (1.0 - p))


def weighted_aggregate(alpha: torch.Tensor, z: torch.Tensor, block: EdgeBlock, comm: Comm,
                       axis: str | None, heads: list[tuple[int, int, int]], P: torch.Tensor,
                       drop: tuple | None = None) -> torch.Tensor:
    """OUT_i = Σ_j α_ij·Z_j per head (``heads``: `head_ranges` of this rank's columns of Z,
    ``P`` its `head_matrix`), all-reduced over ``axis`` (None: left as this rank's partial sum).
    ``drop``: (seed, step, layer, p) of attention dropout, None for none. Saves α (shared with
    the softmax's) and Z; backward's dα is an SDDMM over chunks of edges."""
    return _WeightedAggregate.apply(alpha, z, block, comm, axis, heads, P, drop)
