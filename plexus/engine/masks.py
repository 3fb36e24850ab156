"""Grid-independent dropout masks: a hash of (seed, step, layer, global ids), drawn in a constant
number of device passes.

Every keep/drop decision is a function of the seed, the step, the GNN layer and *global* indices
only (the original node id, the global feature column; for attention dropout the head and the
edge's two node ids), never of the rank, the grid or the device, so a seeded run drops the same
elements on every grid, on the serial reference, on the CPU and on a GPU.

Two statements of each mask, with the same bits:
- the reference (`dropout_keep`, `edge_keep`): whole-tensor torch operations, used by the serial
  models and as the oracle of the tests;
- the step's path (`masked`, `edge_mask`): on CUDA with Triton, one fused kernel that hashes,
  selects and scales (`plexus.engine.kernels`); elsewhere the reference's operations over the
  whole tensor, cut into pieces only when their temporaries would not fit the byte budget the
  caller gives (`plexus.engine.pieces`). Either way the number of kernels does not grow with the
  rows or the edges.
"""

from __future__ import annotations

import sys

import torch

from plexus.core.maskhash import GOLDEN, KEY0, M32, MUL
from plexus_partition.model.ops.base import MASK_TEMP_BYTES, edge_mask_temp_bytes

from . import kernels
from .pieces import spans

EDGE_STREAM = 0xA77E  # the attention-dropout stream's extra key part


def fmix(x):
    """A 32-bit integer finalizer (xor-shift-multiply) of 32-bit values: int64 tensors, or
    plain Python integers (the keys: no tensor, no device)."""
    x = ((x >> 16) ^ x) * MUL & M32
    x = ((x >> 16) ^ x) * MUL & M32
    return (x >> 16) ^ x


def key(*parts: int) -> int:
    """Mix small integers (seed, step, layer, ...) into one 32-bit key, in plain Python: no tensor
    operation and no host-device transfer per mask."""
    k = KEY0
    for p in parts:
        k = fmix((k + (p & M32) * GOLDEN) & M32)
    return k


def feature_keys(seed: int, step: int, layer: int) -> tuple[int, int]:
    """The row key and the column key of a feature mask."""
    k = key(seed, step, layer)
    return k, key(k, 1)


def threshold16(p: float) -> int:
    """Column c is kept when its unsigned 16-bit uniform, with its top bit flipped, is at least
    this (the int16 reading of the uniform is then >= threshold16 - 32768)."""
    return round(p * 65536)


def _as_int32(x: torch.Tensor) -> torch.Tensor:
    """int64 tensor of 32-bit values -> int32 tensor with the same 32 bits."""
    return (x - ((x >> 31) << 32)).to(torch.int32)


def dropout_keep(seed: int, step: int, layer: int, rows: torch.Tensor, col_start: int,
                 num_cols: int, p: float) -> torch.Tensor:
    """Boolean keep-mask of shape (len(rows), num_cols) for global rows ``rows`` (original node
    ids) and global columns col_start .. col_start + num_cols - 1.

    The hash of (row, column pair q) is ``fmix(row_h ^ col_h)``'s first two rounds on 32-bit
    values; its low and high 16 bits are the uniforms of columns 2q and 2q+1. The per-element
    rounds run on int32, where a multiply keeps exactly the low 32 bits of the product (two's
    complement), and ``x ^= x >> 16`` (logical) is an xor of the word's high 16 bits into its
    low 16 bits: the same bits as 64-bit arithmetic on half the memory, and the int32 words
    then read as int16 pairs in column order without a copy.
    """
    k_row, k_col = feature_keys(seed, step, layer)
    row_h = fmix((rows.to(torch.int64) & M32) ^ k_row)
    q0, q1 = col_start // 2, (col_start + num_cols + 1) // 2
    q = torch.arange(q0, q1, dtype=torch.int64, device=rows.device)
    col_h = fmix((q * GOLDEN & M32) ^ k_col)
    h = _as_int32(row_h)[:, None] ^ _as_int32(col_h)[None, :]
    halves = h.view(torch.int16)  # (rows, 2·pairs): each word's two 16-bit halves
    lo, hi = (0, 1) if sys.byteorder == "little" else (1, 0)
    for _ in range(2):  # one round leaves rows whose hashes share low bits correlated
        h.mul_(MUL)
        # h ^= h >> 16 (logical): the high half unchanged, the low half xor-ed with it; in place
        # on the two halves' views, so no second buffer of hash words
        halves[:, lo::2].bitwise_xor_(halves[:, hi::2])
    if lo:  # the high half comes first in memory: swap to low, high
        halves = halves.view(h.shape[0], h.shape[1], 2).flip(-1).reshape(h.shape[0], -1)
    u = halves[:, col_start - 2 * q0:col_start - 2 * q0 + num_cols]
    # a uniform 16-bit value read as signed is uniform on [-32768, 32767]
    return u >= threshold16(p) - 32768


def edge_keys(seed: int, step: int, layer: int) -> tuple[int, int, int]:
    """The destination key, the source key and the base of the head keys of an attention mask:
    head k's key is ``fmix((base + k·GOLDEN) & M32)`` (= ``key(k_dst, 2, k)``)."""
    k = key(seed, step, layer, EDGE_STREAM)
    return k, key(k, 1), fmix((fmix((KEY0 + k * GOLDEN) & M32) + 2 * GOLDEN) & M32)


def threshold24(p: float) -> int:
    """An edge is kept for a head when the top 24 bits of its hash are at least this."""
    return round(p * (1 << 24))


def edge_keep(seed: int, step: int, layer: int, heads: int, dst: torch.Tensor,
              src: torch.Tensor, p: float) -> torch.Tensor:
    """Boolean keep-mask (edges × heads) of attention dropout for the edges ``src[k] -> dst[k]``
    (original node ids): a hash of (seed, step, layer, head, destination, source), so every grid
    and the serial reference drop the same edges. Its stream differs from `dropout_keep`'s; the
    edge's hash is computed once and mixed once more per head."""
    k_dst, k_src, base = edge_keys(seed, step, layer)
    h = fmix((dst.to(torch.int64) & M32) ^ k_dst)
    h = fmix(h ^ fmix((src.to(torch.int64) * GOLDEN & M32) ^ k_src))
    heads_k = torch.arange(heads, dtype=torch.int64, device=h.device)
    head_keys = fmix((heads_k * GOLDEN + base) & M32)
    u = fmix(h[:, None] ^ head_keys[None, :]) >> 8  # the top 24 bits: uniform on [0, 2**24)
    return u >= threshold24(p)


def masked(x: torch.Tensor, seed: int, step: int, layer: int, rows: torch.Tensor,
           col_start: int, p: float, budget: float | None = None,
           inplace: bool = False) -> torch.Tensor:
    """x·keep/(1-p) with the mask of `dropout_keep` (no autograd): kept elements scaled, dropped
    ones zero. On CUDA with Triton one fused kernel; elsewhere the reference's passes over the
    whole tensor, in row pieces only where their temporaries (`MASK_TEMP_BYTES` per element)
    would exceed ``budget`` bytes (None: one piece). ``inplace`` overwrites x (a contiguous
    tensor nobody else reads)."""
    out = x if inplace else torch.empty_like(x, memory_format=torch.contiguous_format)
    if kernels.fused(x):
        k_row, k_col = feature_keys(seed, step, layer)
        return kernels.dropout(x, out, rows, k_row, k_col, col_start, threshold16(p),
                               1.0 / (1.0 - p))
    zero = torch.zeros((), dtype=x.dtype, device=x.device)
    for r0, r1 in spans(x.shape[0], MASK_TEMP_BYTES * max(x.shape[1], 1), budget):
        keep = dropout_keep(seed, step, layer, rows[r0:r1], col_start, x.shape[1], p)
        torch.where(keep, x[r0:r1], zero, out=out[r0:r1])
    return out.mul_(1.0 / (1.0 - p))


def edge_mask(seed: int, step: int, layer: int, heads: int, row_ids: torch.Tensor,
              col_ids: torch.Tensor, row: torch.Tensor, col: torch.Tensor, p: float,
              budget: float | None = None) -> torch.Tensor:
    """`edge_keep` of the edges ``col_ids[col[e]] -> row_ids[row[e]]`` of a block (local row and
    column of every edge; the original ids of the block's rows and columns): one fused kernel on
    CUDA with Triton, else the reference in edge pieces only where its temporaries
    (`edge_mask_temp_bytes` per edge) would exceed ``budget`` bytes."""
    out = torch.empty(row.shape[0], heads, dtype=torch.bool, device=row.device)
    if kernels.fused(out):
        k_dst, k_src, base = edge_keys(seed, step, layer)
        return kernels.edge_dropout(out, row_ids, col_ids, row, col, k_dst, k_src, base,
                                    threshold24(p))
    for a, b in spans(row.shape[0], edge_mask_temp_bytes(heads) + heads, budget):
        out[a:b] = _edge_keep_words(seed, step, layer, heads,
                                    row_ids.index_select(0, row[a:b]),
                                    col_ids.index_select(0, col[a:b]), p)
    return out


def _edge_keep_words(seed: int, step: int, layer: int, heads: int, dst: torch.Tensor,
                     src: torch.Tensor, p: float) -> torch.Tensor:
    """`edge_keep`'s bits with its per-head rounds on one int32 word per edge and head, in
    place: the reference's whole-tensor int64 rounds make a dozen edges × heads temporaries
    of 8 bytes, each a fresh allocation the host faults in (on a CPU that was 20% of a GAT
    epoch at R-MAT 17). A multiply on int32 keeps the low 32 bits, and ``x ^= x >> 16``
    (logical) is an xor of the word's high 16 bits into its low 16 bits, as in
    `dropout_keep`."""
    k_dst, k_src, base = edge_keys(seed, step, layer)
    h = fmix((dst.to(torch.int64) & M32) ^ k_dst)
    h = fmix(h ^ fmix((src.to(torch.int64) * GOLDEN & M32) ^ k_src))  # per edge: int64
    heads_k = torch.arange(heads, dtype=torch.int64, device=h.device)
    head_keys = _as_int32(fmix((heads_k * GOLDEN + base) & M32))
    u = _as_int32(h)[:, None] ^ head_keys[None, :]            # (edges, heads) int32
    halves = u.view(torch.int16)  # (edges, 2·heads): each word's two 16-bit halves
    lo, hi = (0, 1) if sys.byteorder == "little" else (1, 0)
    for _ in range(2):  # fmix's two multiply rounds, then its last xor-shift
        halves[:, lo::2].bitwise_xor_(halves[:, hi::2])
        u.mul_(MUL)
    halves[:, lo::2].bitwise_xor_(halves[:, hi::2])
    # the top 24 bits, unsigned, >= t: the word with its sign bit flipped, read as signed,
    # >= (t << 8) - 2**31
    return u.bitwise_xor_(-(1 << 31)) >= (threshold24(p) << 8) - (1 << 31)


class _Dropout(torch.autograd.Function):
    """Inverted dropout that saves nothing for backward: the mask is a hash of global indices,
    so backward recomputes it instead of holding a mask as large as the activation."""

    @staticmethod
    def forward(ctx, h, seed: int, step: int, layer: int, rows: torch.Tensor, col_start: int,
                p: float, budget: float | None):  # noqa: D102
        ctx.args = (seed, step, layer, rows, col_start, p)
        ctx.budget = budget
        return masked(h, *ctx.args, budget=budget)

    @staticmethod
    def backward(ctx, grad):  # noqa: D102
        return (masked(grad, *ctx.args, budget=ctx.budget),) + (None,) * 7


def dropout(h: torch.Tensor, seed: int, step: int, layer: int, rows: torch.Tensor,
            col_start: int, p: float, budget: float | None = None) -> torch.Tensor:
    """Inverted dropout of ``h`` with the grid-independent mask of `dropout_keep`, scaled by
    1/(1-p), forward and backward; nothing is saved for backward (the mask is recomputed).
    ``budget``: bytes the torch path's temporaries may take (`masked`)."""
    if p <= 0.0:
        return h
    return _Dropout.apply(h, seed, step, layer, rows, col_start, p, budget)
