"""Per-edge building blocks of attention on a block of Â: scores, the edge softmax across the
grid, the α-weighted aggregation and its chunked backward.

An `EdgeBlock` is the structure of this rank's block of Â (M + I: rows = destinations cut by one
axis, columns = sources cut by another) as edges, with its transpose and the original ids of its
rows and columns. Per-edge tensors are (edges, heads) float32; every pass runs over all the edges
at once (a constant number of kernels per step, whatever the block's size), in pieces only where
its temporaries would exceed the block's byte budget (`plexus.engine.pieces`). No edge × feature
tensor and no dense per-edge gradient ever exists (torch.sparse.mm's gradient for CSR values
would be dense): products with node features are CSR products per head.

- `attention_softmax`: α = softmax over each row's in-edges of LeakyReLU(s_dst[i] + s_src[j])
  (GAT's scores from node scores): the row's columns are cut by ``axis``, so its maximum and its
  sum are all-reduced over it (AR-MAX, AR-SUM); backward all-reduces Σ_j α_ij·dα_ij over it.
- `edge_softmax`: the same on any per-edge scores.
- `sddmm`: per-edge, per-head dot products of destination and source features whose columns are
  cut by ``axis`` (an all-reduce of the edge scores over it, forward and backward).
- `weighted_aggregate`: OUT_i = Σ_j α_ij·Z_j per head (one CSR SpMM per head with α as values),
  optionally all-reduced over the axis Â's columns are cut by; backward dZ = αᵀ·dOUT (the
  transpose's SpMM) and dα_ij = dOUT_i·Z_j (a sampled product per head). Attention dropout
  masks are a hash of (seed, step, layer, head, destination id, source id): the same on every
  grid and in the serial reference, recomputed in backward.
"""

from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn.functional as F

from plexus_partition.model.ops.base import EDGE_PASS_BYTES

from .comm import Comm
from .masks import edge_mask
from .pieces import spans
from .spmm import csr_mm, index_fits_int32


class EdgeBlock:
    """The edges of a block of Â (``m``: CSR, rows = destinations) on ``device``.

    ``row``/``col``: each edge's local row and column (CSR order); ``crow_t``/``col_t``/``perm``:
    the transpose's CSR structure and, for each of its entries, the edge it is; ``row_ids`` and
    ``col_ids``: the original node id of every local row and column (-1: padding), which key the
    dropout masks. 32-bit indices where the sizes fit. ``budget``: the bytes a pass's
    temporaries may take (None: no limit), read at set-up."""

    def __init__(self, m: sp.csr_matrix, row_ids: np.ndarray, col_ids: np.ndarray,
                 device: torch.device | str = "cpu", budget: float | None = None) -> None:
        self.budget = budget
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
        self._ones: dict[int, torch.Tensor] = {}
        self._data, self._values = m.data, None  # Â's values: a device copy made on first use

    def values(self) -> torch.Tensor:
        """Â's value on each edge (CSR order), edges × 1 float32, made once."""
        if self._values is None:
            self._values = torch.from_numpy(np.asarray(self._data, dtype=np.float32)).to(
                self.row.device)[:, None]
        return self._values

    def spans(self, heads: int) -> list[tuple[int, int]]:
        """(start, stop) of the edge pieces of a pass over per-edge tensors of ``heads`` columns:
        all the edges at once unless the temporaries exceed the budget."""
        return spans(self.nnz, EDGE_PASS_BYTES * max(heads, 1), self.budget)

    def csr(self, values: torch.Tensor) -> torch.Tensor:
        """The block with per-edge ``values`` (CSR order) as a torch CSR tensor."""
        with warnings.catch_warnings():  # "CSR support is in beta", as in spmm.to_backend
            warnings.simplefilter("ignore", UserWarning)
            return torch.sparse_csr_tensor(self.crow, self.col, values,
                                           (self.num_rows, self.num_cols))

    def csr_t(self, values: torch.Tensor) -> torch.Tensor:
        """The block's transpose with per-edge ``values`` (CSR order of the block)."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            return torch.sparse_csr_tensor(self.crow_t, self.col_t, values[self.perm],
                                           (self.num_cols, self.num_rows))

    def ones(self, n: int) -> torch.Tensor:
        """An n × 1 float32 column of ones on the block's device (made once per size)."""
        if n not in self._ones:
            self._ones[n] = torch.ones(n, 1, device=self.row.device)
        return self._ones[n]


def _gather(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """x[index], (edges × heads), of node values ``x`` (nodes × heads) at per-edge node
    ``index``. On CUDA one 1-D gather per head: its gather of narrow rows (a node's few heads)
    runs a block per row, 4.7 ms for 7.9M rows of 4 floats on an H200, where 1-D gathers of as
    many elements take 0.03 ms. On a CPU one gather of whole rows: the per-head gathers and
    their stack cost a GAT epoch 5% more there (R-MAT 17, 4 heads)."""
    if x.shape[1] == 1:
        return x.reshape(-1).index_select(0, index).unsqueeze(1)
    if not x.is_cuda:
        return x.index_select(0, index)
    return torch.stack([x[:, h].contiguous().index_select(0, index)
                        for h in range(x.shape[1])], 1)


def _scores(block: EdgeBlock, sd: torch.Tensor, ss: torch.Tensor, a: int, b: int,
            slope: float | None) -> torch.Tensor:
    """(b - a, heads): s_dst[row] + s_src[col] of edges a..b, LeakyReLU'd when ``slope``."""
    e = _gather(sd, block.row[a:b]).add_(_gather(ss, block.col[a:b]))
    return e if slope is None else F.leaky_relu(e, slope)


def _sums(csr, x: torch.Tensor, ones: torch.Tensor) -> torch.Tensor:
    """Per head h, the CSR matrix ``csr(values)`` with x[:, h] as values times a column of
    ones: the per-row sums of per-edge values, deterministic (an atomic scatter is not), one
    sparse product per head (a segment reduction took 1.6 ms per call on an H200 where this
    takes a tenth)."""
    return torch.cat([csr_mm(csr(x[:, h].contiguous()), ones) for h in range(x.shape[1])], 1)


def _row_sums(block: EdgeBlock, x: torch.Tensor, reduce: str = "sum") -> torch.Tensor:
    """(rows, heads): the sum (or max: -inf for a row without edges) of per-edge ``x`` over each
    row's edges (CSR order: rows are contiguous segments). On a CPU both are one segment
    reduction of all the heads (deterministic there, and a pass fewer than a product per head
    and their concatenation); on CUDA the sum is a product per head (`_sums`)."""
    if reduce == "max" or not x.is_cuda:
        return torch.segment_reduce(x, reduce, offsets=block.crow)
    return _sums(block.csr, x, block.ones(block.num_cols))


def _col_sums(block: EdgeBlock, x: torch.Tensor) -> torch.Tensor:
    """(cols, heads): the sum of per-edge ``x`` over each column's edges (the transpose's
    rows). On a CPU: the rows of ``x`` in the transpose's order (one gather of all the heads)
    reduced per segment; on CUDA a product per head with the transpose (`_sums`)."""
    if not x.is_cuda:
        return torch.segment_reduce(x.index_select(0, block.perm), "sum",
                                    offsets=block.crow_t)
    return _sums(block.csr_t, x, block.ones(block.num_rows))


def _per_edge(block: EdgeBlock, heads: int, values) -> torch.Tensor:
    """(edges, heads) float32: ``values(a, b)`` of the edges a..b, all at once unless the
    budget forces pieces."""
    parts = block.spans(heads)
    if len(parts) == 1:
        return values(0, block.nnz)
    out = torch.empty(block.nnz, heads, device=block.row.device)
    for a, b in parts:
        out[a:b] = values(a, b)
    return out


def _softmax(block: EdgeBlock, heads: int, comm: Comm, axis: str, edge_scores) -> torch.Tensor:
    """α (edges, heads): the softmax over every row's edges of ``edge_scores(a, b)``, the rows'
    maximum and sum all-reduced over ``axis`` (the axis that cuts a row's columns)."""
    alpha = _per_edge(block, heads, edge_scores)
    m = _row_sums(block, alpha, "max")
    with comm.exact(), comm.labelled("AR-MAX(e)"):  # statistics: float32 whatever the wire
        comm.raw_all_reduce(m, axis, "max")                   # AR-MAX(e) over the row's cut
    for a, b in block.spans(heads):
        alpha[a:b].sub_(_gather(m, block.row[a:b])).exp_()
    total = _row_sums(block, alpha)
    with comm.exact(), comm.labelled("AR-SUM(e)"):
        comm.raw_all_reduce(total, axis)                      # AR-SUM(e) over the row's cut
    for a, b in block.spans(heads):
        alpha[a:b].div_(_gather(total, block.row[a:b]))
    return alpha


def _softmax_backward(block: EdgeBlock, alpha: torch.Tensor, grad: torch.Tensor, comm: Comm,
                      axis: str) -> torch.Tensor:
    """de = α·(dα − Σ_j α·dα) per row, written over ``grad`` (dα; fresh, nobody else's); the row
    sums all-reduced over ``axis``."""
    de = grad.mul_(alpha)
    c = _row_sums(block, de)
    with comm.exact():
        comm.raw_all_reduce(c, axis)                          # AR(Σα·dα) over the row's cut
    for a, b in block.spans(alpha.shape[1]):
        de[a:b].sub_(alpha[a:b] * _gather(c, block.row[a:b]))
    return de


class _AttentionSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, s_dst, s_src, block: EdgeBlock, comm: Comm, axis: str,
                slope: float):  # noqa: D102
        sd, ss = s_dst.detach().contiguous(), s_src.detach().contiguous()
        with comm.timers("edges"):
            alpha = _softmax(block, sd.shape[1], comm, axis,
                             lambda a, b: _scores(block, sd, ss, a, b, slope))
        ctx.save_for_backward(alpha, s_dst, s_src)
        ctx.block, ctx.comm, ctx.axis, ctx.slope = block, comm, axis, slope
        ctx.tag = comm.tag()
        return alpha

    @staticmethod
    def backward(ctx, grad):  # noqa: D102
        alpha, s_dst, s_src = ctx.saved_tensors
        block, heads = ctx.block, alpha.shape[1]
        sd, ss = s_dst.contiguous(), s_src.contiguous()
        with ctx.comm.timers("edges"), ctx.comm.backward_of(ctx.tag):
            de = _softmax_backward(block, alpha, grad.contiguous(), ctx.comm, ctx.axis)
            for a, b in block.spans(heads):  # LeakyReLU's backward: its sign, recomputed
                negative = _scores(block, sd, ss, a, b, None) < 0
                de[a:b].mul_(negative.to(de.dtype).mul_(ctx.slope - 1.0).add_(1.0))
            d_dst, d_src = _row_sums(block, de), _col_sums(block, de)
        return d_dst, d_src, None, None, None, None


def attention_softmax(s_dst: torch.Tensor, s_src: torch.Tensor, block: EdgeBlock, comm: Comm,
                      axis: str, negative_slope: float = 0.2) -> torch.Tensor:
    """GAT's attention coefficients α (edges, heads), float32: the softmax over each row's
    in-edges of LeakyReLU(s_dst[row] + s_src[col]). ``s_dst`` (rows, heads) are in Â's row
    layout, ``s_src`` (cols, heads) in its column layout, both float32 and complete; ``axis``
    cuts the block's columns. Saves α and the node scores (LeakyReLU's sign is recomputed)."""
    return _AttentionSoftmax.apply(s_dst, s_src, block, comm, axis, negative_slope)


class _EdgeSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, e, block: EdgeBlock, comm: Comm, axis: str):  # noqa: D102
        e = e.detach().float()
        with comm.timers("edges"):
            alpha = _softmax(block, e.shape[1], comm, axis, lambda a, b: e[a:b].clone())
        ctx.save_for_backward(alpha)
        ctx.block, ctx.comm, ctx.axis, ctx.tag = block, comm, axis, comm.tag()
        return alpha

    @staticmethod
    def backward(ctx, grad):  # noqa: D102
        (alpha,) = ctx.saved_tensors
        with ctx.comm.timers("edges"), ctx.comm.backward_of(ctx.tag):
            de = _softmax_backward(ctx.block, alpha, grad.float().clone(), ctx.comm, ctx.axis)
        return de, None, None, None


def edge_softmax(e: torch.Tensor, block: EdgeBlock, comm: Comm, axis: str) -> torch.Tensor:
    """α = the softmax of per-edge scores ``e`` (edges, heads) over each row's edges, across
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


def _dot(block: EdgeBlock, q: torch.Tensor, k: torch.Tensor,
         ranges: list[tuple[int, int, int]], heads: int) -> torch.Tensor:
    """(edges, heads) float32: Σ_{c of head h} q[row, c]·k[col, c], this rank's columns only
    (``ranges``: `head_ranges`), one sampled product per head (torch.sparse.sampled_addmm) in
    float32 whatever the compute precision: the node-sized operands are cast, never an
    edge-sized one."""
    out = torch.zeros(block.nnz, heads, device=q.device)
    q, k = q.float(), k.float()
    empty = block.csr(torch.zeros(block.nnz, device=q.device))
    for h, lo, hi in ranges:
        out[:, h] = torch.sparse.sampled_addmm(empty, q[:, lo:hi], k[:, lo:hi].T,
                                               beta=0.0).values()
    return out


class _SDDMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, block: EdgeBlock, ranges: list[tuple[int, int, int]], heads: int,
                comm: Comm, axis: str):  # noqa: D102
        with comm.timers("edges"):
            out = _dot(block, q, k, ranges, heads)
        comm.raw_all_reduce(out, axis)                        # AR(e) over the features' cut
        ctx.save_for_backward(q, k)
        ctx.block, ctx.ranges, ctx.comm, ctx.axis = block, ranges, comm, axis
        ctx.tag = comm.tag()
        return out

    @staticmethod
    def backward(ctx, grad):  # noqa: D102
        q, k = ctx.saved_tensors
        block = ctx.block
        with ctx.comm.backward_of(ctx.tag):
            grad = ctx.comm.raw_all_reduce(grad.contiguous().clone(), ctx.axis)  # AR(de) over it
        dq, dk = torch.zeros_like(q), torch.zeros_like(k)
        with ctx.comm.timers("edges"):
            for h, lo, hi in ctx.ranges:  # dQ = de_h·K, dK = de_hᵀ·Q: CSR products per head
                values = grad[:, h].to(q.dtype).contiguous()
                dq[:, lo:hi] = csr_mm(block.csr(values), k[:, lo:hi])
                dk[:, lo:hi] = csr_mm(block.csr_t(values), q[:, lo:hi])
        return dq, dk, None, None, None, None, None


def sddmm(q: torch.Tensor, k: torch.Tensor, block: EdgeBlock,
          ranges: list[tuple[int, int, int]], heads: int, comm: Comm, axis: str) -> torch.Tensor:
    """Per-edge, per-head dot products e[(i, j), h] = Σ_{c of head h} q[i, c]·k[j, c] (float32,
    (edges, heads)), with ``q`` in the block's row layout and ``k`` in its column layout, their
    columns cut by ``axis`` (so the partial sums are all-reduced over it; backward all-reduces
    the gradient over it too: every rank of the axis used e on its own columns). ``ranges``:
    `head_ranges` of this rank's columns."""
    return _SDDMM.apply(q, k, block, ranges, heads, comm, axis)


class _WeightedAggregate(torch.autograd.Function):
    @staticmethod
    def forward(ctx, alpha, z, block: EdgeBlock, comm: Comm, axis: str | None,
                heads: list[tuple[int, int, int]], keep: torch.Tensor | None,
                scale: float):  # noqa: D102
        out = torch.zeros(block.num_rows, z.shape[1], dtype=z.dtype, device=z.device)
        with comm.timers("spmm"):
            for h, lo, hi in heads:
                out[:, lo:hi] = csr_mm(block.csr(_values(alpha, h, keep, scale, z.dtype)),
                                       z[:, lo:hi])
        if axis is not None:
            comm.raw_all_reduce(out, axis)                    # AR(OUT) over Â's column cut
        ctx.save_for_backward(alpha, z, keep)
        ctx.block, ctx.comm, ctx.heads, ctx.scale = block, comm, heads, scale
        return out

    @staticmethod
    def backward(ctx, grad):  # noqa: D102
        alpha, z, keep = ctx.saved_tensors
        block, heads, scale = ctx.block, ctx.heads, ctx.scale
        grad = grad.contiguous()
        dz = dalpha = None
        if ctx.needs_input_grad[1]:
            dz = torch.zeros_like(z)
            with ctx.comm.timers("spmm"):
                for h, lo, hi in heads:
                    values = _values(alpha, h, keep, scale, z.dtype)
                    dz[:, lo:hi] = csr_mm(block.csr_t(values), grad[:, lo:hi])
        if ctx.needs_input_grad[0]:
            with ctx.comm.timers("edges"):
                # the SDDMM: dα_ij = dOUT_i·Z_j per head
                dalpha = _dot(block, grad, z, heads, alpha.shape[1])
                if keep is not None:
                    dalpha.mul_(keep).mul_(scale)
        return dalpha, dz, None, None, None, None, None, None


def _values(alpha: torch.Tensor, h: int, keep: torch.Tensor | None, scale: float,
            dtype: torch.dtype) -> torch.Tensor:
    """Head h's coefficients (dropped and scaled where ``keep`` is given), contiguous in
    ``dtype``: a CSR's values."""
    values = alpha[:, h] if keep is None else alpha[:, h] * keep[:, h] * scale
    return values.to(dtype).contiguous()


def weighted_aggregate(alpha: torch.Tensor, z: torch.Tensor, block: EdgeBlock, comm: Comm,
                       axis: str | None, heads: list[tuple[int, int, int]],
                       drop: tuple | None = None) -> torch.Tensor:
    """OUT_i = Σ_j α_ij·Z_j per head (``heads``: `head_ranges` of this rank's columns of Z),
    all-reduced over ``axis`` (None: left as this rank's partial sum). ``drop``: (seed, step,
    layer, p) of attention dropout, None for none: its keep-mask (one byte per edge and head, a
    hash of global ids, `plexus.engine.masks.edge_mask`) is drawn once and kept for backward.
    Saves α (shared with the softmax's) and Z; backward's dα is a sampled product (SDDMM)."""
    keep, scale = None, 1.0
    if drop is not None:
        seed, step, layer, p = drop
        keep = edge_mask(seed, step, layer, alpha.shape[1], block.row_ids, block.col_ids,
                         block.row, block.col, p, block.budget)
        scale = 1.0 / (1.0 - p)
    return _WeightedAggregate.apply(alpha, z, block, comm, axis, heads, keep, scale)
