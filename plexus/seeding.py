"""Grid-independent randomness: weight initialization and dropout masks.

Every random number is a function of the seed and of *global* indices only (the original node id,
the global feature column), never of the rank or the grid, so a seeded run gives the same numbers
on every grid and on the serial reference.
"""

from __future__ import annotations

import math
import sys

import torch

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


def dropout_keep(seed: int, step: int, layer: int, rows: torch.Tensor, col_start: int,
                 num_cols: int, p: float) -> torch.Tensor:
    """Boolean keep-mask of shape (len(rows), num_cols) for global rows ``rows`` (original node
    ids) and global columns col_start .. col_start + num_cols - 1.

    Each 32-bit hash yields two 16-bit uniforms (columns 2q and 2q+1), so the per-element work is
    one xor, two multiply-xorshift rounds and a compare on half as many 64-bit words: dropout on
    wide features must not cost more than the layer's GEMM.
    """
    key = _key(seed, step, layer)
    row_h = _fmix((rows.to(torch.int64) & _M32) ^ key)
    q0, q1 = col_start // 2, (col_start + num_cols + 1) // 2
    q = torch.arange(q0, q1, dtype=torch.int64, device=rows.device)
    col_h = _fmix((q * _GOLDEN & _M32) ^ _key(key, 1))
    h = row_h[:, None] ^ col_h[None, :]
    for _ in range(2):  # one round leaves rows whose hashes share low bits correlated
        h.mul_(_MUL).bitwise_and_(_M32)
        h.bitwise_xor_(h >> 16)
    # the two low 16-bit halves of each 32-bit hash, in column order (little-endian words)
    halves = h.view(torch.int16).view(h.shape[0], h.shape[1], 4)
    halves = halves[:, :, :2] if sys.byteorder == "little" else halves[:, :, 3:1:-1]
    u = halves.reshape(h.shape[0], 2 * h.shape[1])[:, col_start - 2 * q0:][:, :num_cols]
    # a uniform 16-bit value read as signed is uniform on [-32768, 32767]
    return u >= round(p * 65536) - 32768


def dropout(h: torch.Tensor, seed: int, step: int, layer: int, rows: torch.Tensor,
            col_start: int, p: float) -> torch.Tensor:
    """Inverted dropout of ``h`` with the grid-independent mask of `dropout_keep`."""
    if p <= 0.0:
        return h
    keep = dropout_keep(seed, step, layer, rows, col_start, h.shape[1], p)
    return h * keep * (1.0 / (1.0 - p))


def glorot_weights(seed: int, widths: list[int]) -> list[torch.Tensor]:
    """Full (unpadded) weight matrices W_l of shape (D_l, D_l+1), Glorot-uniform as Kipf & Welling,
    drawn in layer order from one generator seeded with ``seed``."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for d_in, d_out in zip(widths[:-1], widths[1:]):
        bound = math.sqrt(6.0 / (d_in + d_out))
        out.append((torch.rand(d_in, d_out, generator=gen) * 2 - 1) * bound)
    return out
