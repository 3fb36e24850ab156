"""Measured memory: the tracked-tensor high-water mark, and what the engine's autograd functions
keep for backward (dropout nothing, ReLU a bool mask, the GEMM only the operand backward reads)."""

from __future__ import annotations

import dataclasses

import torch

from plexus.engine.primitives import relu
from plexus.engine.seeding import dropout, dropout_keep
from plexus.perfmodel import ModelSpec, epoch_memory
from plexus.runtime.memstats import TensorTracker, peak_rss_bytes, resident_storages


def test_tracker_counts_the_high_water_mark_and_frees():
    x = torch.ones(1000, 100)
    resident = resident_storages([x])
    assert sum(resident.values()) == x.numel() * 4
    with TensorTracker(resident) as t:
        a = x * 2  # 400 kB
        b = a + 1  # 400 kB
        del a, b
        c = x.view(-1) + 0  # a view of a resident storage costs nothing; the sum does
        del c
    assert t.baseline == 400_000
    assert t.peak_live == 800_000 and t.live == 0
    assert t.peak_bytes == 1_200_000
    assert peak_rss_bytes() > t.peak_bytes


def saved_bytes(fn, x: torch.Tensor) -> int:
    """Bytes autograd keeps for backward of fn(x) (distinct storages other than x's)."""
    seen: dict[int, int] = {}

    def pack(t):
        st = t.untyped_storage()
        if st.data_ptr() != x.untyped_storage().data_ptr():
            seen[st.data_ptr()] = st.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = fn(x)
    y.sum().backward()
    return sum(seen.values())


def test_dropout_saves_nothing_and_equals_the_masked_product():
    x = torch.randn(300, 40, requires_grad=True)
    rows = torch.arange(300) * 7
    assert saved_bytes(lambda h: dropout(h, 1, 2, 3, rows, 5, 0.5), x) == 0
    keep = dropout_keep(1, 2, 3, rows, 5, 40, 0.5).float() * 2.0
    y = dropout(x, 1, 2, 3, rows, 5, 0.5)
    assert torch.equal(y, x.detach() * keep)
    x.grad = None
    (y * 3).sum().backward()
    assert torch.equal(x.grad, 3 * keep)


def test_relu_saves_a_bool_mask_and_matches_torch():
    x = torch.randn(200, 64, requires_grad=True)
    assert saved_bytes(lambda h: relu(h * 1), x) == 200 * 64  # one byte per element
    ref = x.detach().clone().requires_grad_()
    torch.relu(ref).pow(2).sum().backward()
    x.grad = None
    relu(x * 1, inplace=True).pow(2).sum().backward()
    assert torch.equal(x.grad, ref.grad)


def test_memory_model_shares_transposes_only_for_symmetric_graphs():
    spec = ModelSpec.of(1 << 16, 2_000_000, 64, 8, num_layers=3, hidden=128)
    sym = epoch_memory(spec, (1, 1, 1))
    directed = epoch_memory(dataclasses.replace(spec, symmetric=False), (1, 1, 1))
    csr = 2_000_000 * 8 + ((1 << 16) + 1) * 4  # float32 values, 32-bit indices
    assert sym.adjacency == 2 * csr  # Â1 and Â2 (double permutation), each the other's Âᵀ
    assert directed.adjacency == 4 * csr  # plus both transposes
    assert sym.total < directed.total
