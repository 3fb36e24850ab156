"""The step's dropout masks: the whole-tensor path and the fused CUDA kernels give the reference
function's bits on random global ids, whatever the pieces; pieces only where the budget forces
them."""

from __future__ import annotations

import os

import pytest
import torch

from plexus.engine import kernels, masks
from plexus.engine.pieces import spans


def random_ids(n: int, gen: torch.Generator) -> torch.Tensor:
    """Original node ids as the engine holds them: large, unordered, -1 for padding."""
    ids = torch.randint(0, 2**40, (n,), generator=gen)
    ids[torch.randint(0, n, (max(1, n // 10),), generator=gen)] = -1
    return ids


def test_spans_cut_only_where_the_budget_forces_and_cover_everything():
    assert spans(1000, 8, None) == [(0, 1000)]
    assert spans(1000, 8, 8000) == [(0, 1000)]
    cut = spans(1000, 8, 3000)
    assert len(cut) == 3 and cut[0][0] == 0 and cut[-1][1] == 1000
    assert all(a == b for (_, a), (b, _) in zip(cut, cut[1:]))
    assert all((b - a) * 8 <= 3000 for a, b in cut)
    assert spans(0, 8, 10) == [(0, 0)]


@pytest.mark.parametrize("budget", [None, 4000.0])  # one piece, and many
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_masked_equals_the_reference_on_random_global_ids(budget, dtype):
    gen = torch.Generator().manual_seed(7)
    for trial in range(5):
        n = int(torch.randint(1, 300, (1,), generator=gen))
        cols = int(torch.randint(1, 70, (1,), generator=gen))
        col_start = int(torch.randint(0, 9, (1,), generator=gen))
        seed, step, layer = trial - 2, 1000 + trial, trial % 3
        p = (0.1, 0.5, 0.77)[trial % 3]
        rows = random_ids(n, gen)
        x = torch.randn(n, cols, generator=gen).to(dtype)
        keep = masks.dropout_keep(seed, step, layer, rows, col_start, cols, p)
        want = torch.where(keep, x, torch.zeros((), dtype=dtype)) * (1.0 / (1.0 - p))
        got = masks.masked(x, seed, step, layer, rows, col_start, p, budget)
        assert torch.equal(got, want)
        inplace = x.clone()
        assert masks.masked(inplace, seed, step, layer, rows, col_start, p, budget,
                            inplace=True) is inplace
        assert torch.equal(inplace, want)


@pytest.mark.parametrize("budget", [None, 2000.0])
def test_edge_mask_equals_the_reference_on_random_global_ids(budget):
    gen = torch.Generator().manual_seed(3)
    row_ids, col_ids = random_ids(60, gen), random_ids(80, gen)
    row = torch.randint(0, 60, (500,), generator=gen, dtype=torch.int32)
    col = torch.randint(0, 80, (500,), generator=gen, dtype=torch.int32)
    for heads in (1, 3, 4):
        want = masks.edge_keep(4, 9, 1, heads, row_ids[row.long()], col_ids[col.long()], 0.3)
        got = masks.edge_mask(4, 9, 1, heads, row_ids, col_ids, row, col, 0.3, budget)
        assert torch.equal(got, want)
        assert 0.6 < want.float().mean() < 0.8


@pytest.mark.parametrize("p", [0.01, 0.5, 0.77, 0.99])
def test_edge_mask_int32_words_equal_the_int64_reference_at_every_rate(p):
    """The CPU path's in-place int32 rounds keep the reference's bits at any threshold (the
    sign-flipped comparison of the top 24 bits)."""
    gen = torch.Generator().manual_seed(5)
    row_ids, col_ids = random_ids(300, gen), random_ids(400, gen)
    row = torch.randint(0, 300, (4000,), generator=gen, dtype=torch.int64)
    col = torch.randint(0, 400, (4000,), generator=gen, dtype=torch.int64)
    for heads in (1, 2, 8):
        want = masks.edge_keep(11, 2, 0, heads, row_ids[row], col_ids[col], p)
        got = masks.edge_mask(11, 2, 0, heads, row_ids, col_ids, row, col, p)
        assert torch.equal(got, want)
        assert abs(want.float().mean().item() - (1 - p)) < 0.05


def test_the_keys_are_plain_integers_equal_to_the_tensor_hash():
    """The per-mask keys are mixed in Python (no tensor, no host-device copy) with the same
    finalizer as the tensors'."""
    for x in (0, 1, 0x2545F491, 0xFFFFFFFF, 123456789):
        assert masks.fmix(x) == int(masks.fmix(torch.tensor(x, dtype=torch.int64)))
    base = masks.edge_keys(1, 2, 3)[2]
    k = masks.key(1, 2, 3, masks.EDGE_STREAM)
    assert [masks.fmix((base + h * masks.GOLDEN) & masks.M32) for h in range(4)] == \
        [masks.key(k, 2, h) for h in range(4)]


def _kernel_device() -> str | None:
    """Where the fused kernels can run here: CUDA, or Triton's interpreter on the CPU."""
    if not kernels.available():
        return None
    if torch.cuda.is_available():
        return "cuda"
    return "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else None


@pytest.mark.skipif(_kernel_device() is None, reason="needs Triton on CUDA (or its interpreter)")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_the_fused_kernels_give_the_reference_bits(dtype):
    """The CUDA path's one-launch kernels against the torch reference computed on the CPU: the
    same masks (and the same scaled values) on random global ids, odd column starts and widths,
    ids past 2**32 and padding."""
    device = _kernel_device()
    if device == "cpu" and dtype == torch.bfloat16:
        pytest.skip("Triton's interpreter truncates to bfloat16; the GPU rounds to nearest")
    gen = torch.Generator().manual_seed(11)
    for trial in range(6):
        n = int(torch.randint(1, 3000, (1,), generator=gen))
        cols = int(torch.randint(1, 300, (1,), generator=gen))
        col_start = int(torch.randint(0, 17, (1,), generator=gen))
        seed, step, layer, p = 2**33 + trial, trial * 7919, trial % 4, (0.2, 0.5, 0.9)[trial % 3]
        rows = random_ids(n, gen)
        x = torch.randn(n, cols, generator=gen).to(dtype)
        want = masks.masked(x, seed, step, layer, rows, col_start, p)  # the CPU's torch path
        k_row, k_col = masks.feature_keys(seed, step, layer)
        out = torch.full((n, cols), float("nan"), dtype=dtype, device=device)
        got = kernels.dropout(x.to(device), out, rows.to(device), k_row, k_col, col_start,
                              masks.threshold16(p), 1.0 / (1.0 - p))
        assert torch.equal(got.cpu(), want), (trial, n, cols, col_start)
        edges, heads = int(torch.randint(1, 5000, (1,), generator=gen)), trial % 4 + 1
        row_ids, col_ids = random_ids(n, gen), random_ids(n + 5, gen)
        row = torch.randint(0, n, (edges,), generator=gen, dtype=torch.int32)
        col = torch.randint(0, n + 5, (edges,), generator=gen, dtype=torch.int32)
        want = masks.edge_keep(seed, step, layer, heads, row_ids[row.long()],
                               col_ids[col.long()], p)
        keys = masks.edge_keys(seed, step, layer)
        got = kernels.edge_dropout(torch.zeros(edges, heads, dtype=torch.bool, device=device),
                                   row_ids.to(device), col_ids.to(device), row.to(device),
                                   col.to(device), *keys, masks.threshold24(p))
        assert torch.equal(got.cpu(), want), (trial, edges, heads)
