"""The Triton kernels behind `plexus.engine.kernels` (imported only where Triton is installed):
the feature-dropout and attention-dropout masks of `plexus.engine.masks`, hashed in registers.

The reference's arithmetic on 32-bit words: uint32 multiplies wrap (the reference's int32 wrap and
its ``& 0xFFFFFFFF`` on int64 alike), shifts of unsigned words are logical.
"""

import triton
import triton.language as tl

from plexus.core.maskhash import GOLDEN, M32, MUL

# The hash's constants from their one source (plexus.core.maskhash), as compile-time constants
# of the kernels: a kernel reads a module global only as a tl.constexpr.
MUL_C = tl.constexpr(MUL)
GOLDEN_C = tl.constexpr(GOLDEN)
M32_C = tl.constexpr(M32)


@triton.jit
def fmix(x):  # uint32 in, uint32 out: wrapping multiplies, logical shifts
    x = ((x >> 16) ^ x) * MUL_C
    x = ((x >> 16) ^ x) * MUL_C
    return (x >> 16) ^ x


@triton.jit
def low32(x):  # an int64 tensor's low 32 bits as uint32 (two's complement for -1)
    return (x & M32_C).to(tl.uint32)


# keys and thresholds are data, not shapes: never compiled in as constants
@triton.jit(do_not_specialize=["key_row", "key_col", "col_start", "threshold"])
def dropout_kernel(x_ptr, out_ptr, rows_ptr, n_rows, n_cols, stride_x, stride_out,
                   key_row, key_col, col_start, threshold, scale,
                   BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    r_ok, c_ok = r < n_rows, c < n_cols
    ids = tl.load(rows_ptr + r, mask=r_ok, other=0).to(tl.int64)
    row_h = fmix(low32(ids) ^ key_row.to(tl.uint32))
    g = col_start + c  # global column; its pair q = g // 2 holds two 16-bit uniforms
    col_h = fmix(((g // 2).to(tl.uint32) * GOLDEN_C) ^ key_col.to(tl.uint32))
    h = row_h[:, None] ^ col_h[None, :]
    h = h * MUL_C
    h = h ^ (h >> 16)
    h = h * MUL_C
    h = h ^ (h >> 16)
    half = tl.where((g & 1)[None, :] == 1, h >> 16, h & 0xFFFF)
    keep = (half ^ 0x8000) >= threshold
    ok = r_ok[:, None] & c_ok[None, :]
    rr = r.to(tl.int64)[:, None]
    x = tl.load(x_ptr + rr * stride_x + c[None, :], mask=ok, other=0.0)
    # round to nearest even, as torch rounds x·scale computed in float32
    y = tl.where(keep, x.to(tl.float32) * scale, 0.0).to(x.dtype, fp_downcast_rounding="rtne")
    tl.store(out_ptr + rr * stride_out + c[None, :], y, mask=ok)


@triton.jit(do_not_specialize=["key_dst", "key_src", "head_base", "threshold"])
def edge_kernel(out_ptr, row_ids_ptr, col_ids_ptr, row_ptr, col_ptr, n_edges, heads,
                key_dst, key_src, head_base, threshold,
                BLOCK_E: tl.constexpr, BLOCK_H: tl.constexpr):
    e = tl.program_id(0) * BLOCK_E + tl.arange(0, BLOCK_E)
    e_ok = e < n_edges
    dst = tl.load(row_ids_ptr + tl.load(row_ptr + e, mask=e_ok, other=0), mask=e_ok,
                  other=0).to(tl.int64)
    src = tl.load(col_ids_ptr + tl.load(col_ptr + e, mask=e_ok, other=0), mask=e_ok,
                  other=0).to(tl.int64)
    hd = fmix(low32(dst) ^ key_dst.to(tl.uint32))
    hs = fmix(low32(src * GOLDEN_C) ^ key_src.to(tl.uint32))
    h = fmix(hd ^ hs)
    k = tl.arange(0, BLOCK_H)
    hk = fmix(k.to(tl.uint32) * GOLDEN_C + head_base.to(tl.uint32))
    u = fmix(h[:, None] ^ hk[None, :]) >> 8
    keep = u >= threshold
    ok = e_ok[:, None] & (k < heads)[None, :]
    tl.store(out_ptr + e.to(tl.int64)[:, None] * heads + k[None, :], keep, mask=ok)
