"""Grid-independent randomness: weight initialization and dropout masks.

Every random number is a function of the seed and of *global* indices only (the original node id,
the global feature column), never of the rank or the grid, so a seeded run gives the same numbers
on every grid and on the serial reference.
"""

from __future__ import annotations

import math
import sys
from typing import Sequence

import torch

from plexus.core.layout import LayerPlan
from plexus.core.ops import NORM_OP, OPERATORS, Param, split_name

_M32 = 0xFFFFFFFF
# Multipliers below 2**31 keep every product of a 32-bit value below 2**63: int64 arithmetic then
# never overflows, on CPU and CUDA alike.
_MUL = 0x45D9F3B
_GOLDEN = 0x61C88647


def _fmix(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer finalizer (xor-shift-multiply), on int64 tensors holding 32-bit values."""
    x = ((x >> 16) ^ x) * _MUL & _M32
    x = ((x >> 16) ^ x) * _MUL & _M32
    return (x >> 16) ^ x


def _key(*parts: int) -> int:
    """Mix small integers (seed, step, layer) into one 32-bit key."""
    k = torch.tensor(0x2545F491, dtype=torch.int64)
    for p in parts:
        k = _fmix((k + (p & _M32) * _GOLDEN) & _M32)
    return int(k)


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
    complement) and ``(x >> 16) & 0xFFFF`` is the logical shift of the unsigned value: the
    same bits as 64-bit arithmetic on half the memory, and the int32 words then read as int16
    pairs in column order without a copy. Dropout on wide features must not cost more than the
    layer's GEMM.
    """
    key = _key(seed, step, layer)
    row_h = _fmix((rows.to(torch.int64) & _M32) ^ key)
    q0, q1 = col_start // 2, (col_start + num_cols + 1) // 2
    q = torch.arange(q0, q1, dtype=torch.int64, device=rows.device)
    col_h = _fmix((q * _GOLDEN & _M32) ^ _key(key, 1))
    h = _as_int32(row_h)[:, None] ^ _as_int32(col_h)[None, :]
    shifted = torch.empty_like(h)
    for _ in range(2):  # one round leaves rows whose hashes share low bits correlated
        h.mul_(_MUL)
        torch.bitwise_right_shift(h, 16, out=shifted).bitwise_and_(0xFFFF)
        h.bitwise_xor_(shifted)
    halves = h.view(torch.int16)  # (rows, 2·pairs): each word's two 16-bit halves
    if sys.byteorder != "little":  # the high half comes first in memory: swap to low, high
        halves = halves.view(h.shape[0], h.shape[1], 2).flip(-1).reshape(h.shape[0], -1)
    u = halves[:, col_start - 2 * q0:col_start - 2 * q0 + num_cols]
    # a uniform 16-bit value read as signed is uniform on [-32768, 32767]
    return u >= round(p * 65536) - 32768


def edge_keep(seed: int, step: int, layer: int, heads: int, dst: torch.Tensor,
              src: torch.Tensor, p: float) -> torch.Tensor:
    """Boolean keep-mask (edges × heads) of attention dropout for the edges ``src[k] -> dst[k]``
    (original node ids): a hash of (seed, step, layer, head, destination, source), so every grid
    and the serial reference drop the same edges. Its stream differs from `dropout_keep`'s; the
    edge's hash is computed once and mixed once more per head."""
    key = _key(seed, step, layer, 0xA77E)
    h = _fmix((dst.to(torch.int64) & _M32) ^ key)
    h = _fmix(h ^ _fmix((src.to(torch.int64) * _GOLDEN & _M32) ^ _key(key, 1)))
    head_keys = torch.tensor([_key(key, 2, k) for k in range(heads)], device=h.device)
    u = _fmix(h[:, None] ^ head_keys[None, :]) >> 8  # the top 24 bits: uniform on [0, 2**24)
    return u >= round(p * (1 << 24))


class _Dropout(torch.autograd.Function):
    """Inverted dropout that saves nothing for backward: the mask is a hash of global indices,
    so backward recomputes it instead of holding a mask as large as the activation."""

    @staticmethod
    def forward(ctx, h, seed: int, step: int, layer: int, rows: torch.Tensor, col_start: int,
                p: float):  # noqa: D102
        ctx.args = (seed, step, layer, rows, col_start, p)
        return masked(h, *ctx.args)

    @staticmethod
    def backward(ctx, grad):  # noqa: D102
        return (masked(grad, *ctx.args),) + (None,) * 6


# Rows per piece of the mask: its hash words and bool mask then take a few MiB, not several
# bytes per element of the whole activation.
_MASK_ROWS = 8192


def masked(x: torch.Tensor, seed: int, step: int, layer: int, rows: torch.Tensor,
           col_start: int, p: float, inplace: bool = False) -> torch.Tensor:
    """x·keep/(1-p) with the mask of `dropout_keep` (no autograd): kept elements scaled, dropped
    ones zero, the mask built row piece by row piece (no float mask and no whole-size hash
    buffers). ``inplace`` overwrites x (a contiguous tensor nobody else reads)."""
    out = x if inplace else torch.empty_like(x, memory_format=torch.contiguous_format)
    zero = torch.zeros((), dtype=x.dtype, device=x.device)
    for r0 in range(0, x.shape[0], _MASK_ROWS):
        r1 = min(r0 + _MASK_ROWS, x.shape[0])
        keep = dropout_keep(seed, step, layer, rows[r0:r1], col_start, x.shape[1], p)
        torch.where(keep, x[r0:r1], zero, out=out[r0:r1])
    return out.mul_(1.0 / (1.0 - p))


def dropout(h: torch.Tensor, seed: int, step: int, layer: int, rows: torch.Tensor,
            col_start: int, p: float) -> torch.Tensor:
    """Inverted dropout of ``h`` with the grid-independent mask of `dropout_keep`, scaled by
    1/(1-p), forward and backward; nothing is saved for backward (the mask is recomputed)."""
    if p <= 0.0:
        return h
    return _Dropout.apply(h, seed, step, layer, rows, col_start, p)


def _glorot(d_in: int, d_out: int, gen: torch.Generator) -> torch.Tensor:
    """One d_in × d_out Glorot-uniform matrix drawn from ``gen``."""
    bound = math.sqrt(6.0 / (d_in + d_out))
    return (torch.rand(d_in, d_out, generator=gen) * 2 - 1) * bound


def stage_params(plans: Sequence[LayerPlan], widths: Sequence[int]) -> list[tuple[LayerPlan, Param]]:
    """Every declared parameter and running statistic of a model, stage by stage
    (`plexus.core.ops`: the stage's operator, then its BatchNorm)."""
    out = []
    for p in plans:
        d_in, d_out = widths[p.index], widths[p.index + 1]
        decls = OPERATORS[p.op].params(p, d_in, d_out)
        if p.norm:
            decls = decls + OPERATORS[NORM_OP].params(p, d_in, d_out)
        out += [(p, decl) for decl in decls]
    return out


def _initial(decl: Param, gens: list[torch.Generator]) -> torch.Tensor:
    if decl.init == "glorot":
        return _glorot(*decl.shape, gens[decl.stream])
    if decl.init == "glorot_heads":  # PyG's attention vectors: the bound of (heads, width)
        per = decl.shape[0] // decl.heads
        bound = math.sqrt(6.0 / (decl.heads + per))
        return (torch.rand(decl.shape, generator=gens[decl.stream]) * 2 - 1) * bound
    return (torch.ones if decl.init == "ones" else torch.zeros)(decl.shape)


def initial_parameters(seed: int, plans: Sequence[LayerPlan], widths: Sequence[int]
                       ) -> dict[str, torch.Tensor]:
    """Every trainable parameter of a model at initialization, full and unpadded, by
    grid-independent name ("W0", "b0", "att_src1", ...), as each operator declares it: the
    weights W Glorot-uniform from one generator seeded with ``seed`` in stage order, the other
    random ones (SAGE's Wr, GAT's attention vectors) from a second one seeded ``seed + 1``,
    biases and ε zero, BatchNorm's γ one and β zero. The serial and the distributed model both
    start from this."""
    gens = [torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed + 1)]
    return {decl.name(p.index): _initial(decl, gens)
            for p, decl in stage_params(plans, widths) if not decl.buffer}


def initial_stats(plans: Sequence[LayerPlan], widths: Sequence[int]) -> dict[str, torch.Tensor]:
    """Running statistics at initialization (BatchNorm: mean{s} zeros, var{s} ones)."""
    return {decl.name(p.index): _initial(decl, [])
            for p, decl in stage_params(plans, widths) if decl.buffer}


def parameter_layer(plans: Sequence[LayerPlan], name: str) -> int | None:
    """The GNN layer a parameter belongs to (None for the learnable input features)."""
    return None if name == "features" else plans[split_name(name)[1]].layer


class StepCounter:
    """The step that keys dropout masks: the one given, else (training) the next of an internal
    count, so calling a model again without ``step`` never reuses a mask. An explicit step moves
    the count past it; evaluation (no dropout) takes step 0 and leaves the count alone."""

    def __init__(self) -> None:
        self.next = 0

    def __call__(self, step: int | None, training: bool) -> int:
        if step is not None:
            self.next = int(step) + 1
            return int(step)
        if not training:
            return 0
        step, self.next = self.next, self.next + 1
        return step
