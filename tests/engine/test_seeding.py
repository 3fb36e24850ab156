"""Grid-independent dropout masks: their statistics, their independence of how the matrix is cut,
and the int32 fast path against the plain 64-bit statement of the hash."""

from __future__ import annotations

import pytest
import torch

from plexus.engine.masks import GOLDEN as _GOLDEN, M32 as _M32, MUL as _MUL, dropout, dropout_keep
from plexus.engine.masks import fmix as _fmix, key as _key


def reference_keep(seed, step, layer, rows, col_start, num_cols, p):
    """The hash in 64-bit arithmetic on 32-bit values, one column at a time: the uniform of
    column c is the low (c even) or high (c odd) 16 bits of the hash of (row, c // 2)."""
    key = _key(seed, step, layer)
    row_h = _fmix((rows.to(torch.int64) & _M32) ^ key)
    cols = torch.arange(col_start, col_start + num_cols, dtype=torch.int64)
    col_h = _fmix(((cols // 2) * _GOLDEN & _M32) ^ _key(key, 1))
    h = row_h[:, None] ^ col_h[None, :]
    for _ in range(2):
        h = h * _MUL & _M32
        h = (h >> 16) ^ h
    u = torch.where(cols % 2 == 0, h & 0xFFFF, h >> 16)  # unsigned 16-bit
    signed = torch.where(u >= 32768, u - 65536, u)  # read as int16: uniform on [-32768, 32767]
    return signed >= round(p * 65536) - 32768


@pytest.mark.parametrize("col_start,num_cols", [(0, 64), (1, 17), (6, 1), (7, 2), (100, 31)])
@pytest.mark.parametrize("p", [0.5, 0.3, 0.9])
def test_the_fast_path_equals_the_64_bit_hash(col_start, num_cols, p):
    rows = torch.randperm(5000)[:300] * 977  # ids beyond 2**16 and 2**22 too
    got = dropout_keep(3, 11, 2, rows, col_start, num_cols, p)
    assert got.shape == (300, num_cols) and got.dtype == torch.bool
    assert torch.equal(got, reference_keep(3, 11, 2, rows, col_start, num_cols, p))


def test_a_block_of_the_mask_is_the_block_of_the_whole_mask():
    rows = torch.arange(1000)
    whole = dropout_keep(0, 4, 1, rows, 0, 48, 0.5)
    sub = torch.tensor([999, 3, 500, 4])
    assert torch.equal(dropout_keep(0, 4, 1, sub, 13, 20, 0.5), whole[sub][:, 13:33])


def test_the_keep_rate_is_one_minus_p_and_masks_differ_by_seed_step_and_layer():
    rows = torch.arange(20000)
    for p in (0.1, 0.5, 0.8):
        rate = dropout_keep(0, 0, 0, rows, 0, 64, p).float().mean().item()
        assert rate == pytest.approx(1 - p, abs=0.005)
    base = dropout_keep(0, 0, 0, rows, 0, 64, 0.5)
    for other in ((1, 0, 0), (0, 1, 0), (0, 0, 1)):
        agree = (dropout_keep(*other, rows, 0, 64, 0.5) == base).float().mean().item()
        assert agree == pytest.approx(0.5, abs=0.01)  # independent masks agree half the time
    # neighbouring columns (the two halves of one hash) and rows are uncorrelated
    m = base.float()
    assert abs(torch.corrcoef(torch.stack([m[:, 0], m[:, 1]]))[0, 1].item()) < 0.03
    assert abs(torch.corrcoef(torch.stack([m[:-1].flatten(), m[1:].flatten()]))[0, 1]) < 0.03


def test_dropout_scales_kept_values_and_its_gradient():
    rows = torch.arange(50)
    h = torch.randn(50, 10, requires_grad=True)
    out = dropout(h, 0, 2, 1, rows, 4, 0.3)
    keep = dropout_keep(0, 2, 1, rows, 4, 10, 0.3)
    assert torch.equal(out, torch.where(keep, h * (1 / 0.7), torch.zeros(())))
    out.sum().backward()
    assert torch.equal(h.grad, keep.float() * (1 / 0.7))
    assert dropout(h, 0, 2, 1, rows, 4, 0.0) is h

