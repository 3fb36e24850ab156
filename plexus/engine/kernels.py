"""Fused CUDA kernels (Triton) of the step's dropout masks: one launch hashes, selects and scales a
whole activation, or draws a whole block's attention-dropout mask, with the bits of the torch
reference (`plexus.engine.masks.dropout_keep`, `edge_keep`).

The hash is the reference's arithmetic on 32-bit words: a multiply keeps the low 32 bits (the
reference's int32 wrap and its ``& 0xFFFFFFFF`` on int64 alike), shifts are logical. Triton is
optional: without it (a CPU build of torch) `fused` is False and the torch path runs.
"""

from __future__ import annotations

import functools
from types import SimpleNamespace

import torch


@functools.lru_cache(maxsize=None)
def _compiled() -> SimpleNamespace | None:
    """The jitted kernels, or None where Triton cannot be imported."""
    try:
        import triton  # noqa: PLC0415

        from . import triton_masks  # noqa: PLC0415
    except ImportError:
        return None
    return SimpleNamespace(triton=triton, dropout=triton_masks.dropout_kernel,
                           edges=triton_masks.edge_kernel)


def _i32(key: int) -> int:
    """A 32-bit key as the signed int32 with its bits: every key then passes as one type, so
    Triton compiles each kernel once, not once per key range."""
    return key - (1 << 32) if key >= 1 << 31 else key


def available() -> bool:
    """Whether the fused kernels can run here (Triton imports)."""
    return _compiled() is not None


def fused(t: torch.Tensor) -> bool:
    """Whether the step's masks for ``t`` use the fused kernels: a CUDA tensor and Triton."""
    return t.is_cuda and available()


def dropout(x: torch.Tensor, out: torch.Tensor, rows: torch.Tensor, key_row: int, key_col: int,
            col_start: int, threshold: int, scale: float) -> torch.Tensor:
    """out = where(keep, x·scale, 0) for a 2-D ``x`` (its rows ``rows``: original node ids), the
    keep-mask `plexus.engine.masks.dropout_keep`'s; ``out`` may be ``x``. One launch."""
    k = _compiled()
    if x.stride(-1) != 1:
        x = x.contiguous()
    n, m = x.shape
    if n and m:
        block_r, block_c = 16, min(128, k.triton.next_power_of_2(m))
        grid = (k.triton.cdiv(n, block_r), k.triton.cdiv(m, block_c))
        k.dropout[grid](x, out, rows, n, m, x.stride(0), out.stride(0), _i32(key_row),
                        _i32(key_col), col_start, threshold, scale, BLOCK_R=block_r,
                        BLOCK_C=block_c)
    return out


def edge_dropout(out: torch.Tensor, row_ids: torch.Tensor, col_ids: torch.Tensor,
                 row: torch.Tensor, col: torch.Tensor, key_dst: int, key_src: int,
                 head_base: int, threshold: int) -> torch.Tensor:
    """The attention-dropout keep-mask (edges × heads, bool, contiguous ``out``) of the edges
    ``col_ids[col[e]] -> row_ids[row[e]]`` (`plexus.engine.masks.edge_keep`'s bits). One
    launch."""
    k = _compiled()
    n, heads = out.shape
    if n and heads:
        block_h = k.triton.next_power_of_2(heads)
        block_e = max(16, 1024 // block_h)
        k.edges[(k.triton.cdiv(n, block_e),)](out, row_ids, col_ids, row, col, n, heads,
                                              _i32(key_dst), _i32(key_src), _i32(head_base),
                                              threshold, BLOCK_E=block_e, BLOCK_H=block_h)
    return out
