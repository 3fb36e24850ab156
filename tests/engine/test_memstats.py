"""Measured memory: the tracked-tensor high-water mark, and what the engine's autograd functions
keep for backward (dropout nothing, ReLU a bool mask, the GEMM only the operand backward reads)."""

from __future__ import annotations

import dataclasses

import pytest

import torch

from plexus.engine.primitives import relu
from plexus.engine.masks import dropout, dropout_keep
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


@pytest.mark.parametrize("order", ["agg", "auto"])
@pytest.mark.parametrize("perm,layers", [("double", 2), ("double", 3), ("none", 2),
                                         ("balanced", 2)])
def test_memory_model_counts_each_ranks_blocks_as_the_engine_builds_them(perm, layers, order):
    """Per rank, the matrices the engine builds (Â blocks and the transposes it cannot take from
    another block) against the model's figure for that rank's coordinates: on 2x2x2 every block
    has the same size, so the model's adjacency bytes over one block's are the count. Ranks on
    the grid's diagonal hold fewer; the model without coordinates prices the rank that holds
    the most (agg's layout: with auto's a,c at 2 layers every rank holds two)."""
    from plexus.api.model import cut_shard
    from plexus_partition.model.grid import GridShape
    from plexus_datasets import load_dataset
    from plexus.engine.blocks import GraphBlocks
    from plexus.engine.config import EngineConfig, ModelConfig

    g = load_dataset("rmat:scale=8,edge_factor=4,features=8,classes=4,seed=0")
    shape, cfg = GridShape(2, 2, 2), ModelConfig(num_layers=layers, hidden=8, order=order)
    plans = cfg.plans(g.num_features, g.num_classes)
    spec = ModelSpec(g.num_nodes, 1_000_000, g.num_features, g.num_classes, cfg, perm=perm)
    worst = epoch_memory(spec, (2, 2, 2)).adjacency
    counts, model = [], []
    for rank in range(8):
        coords = shape.coords(rank)
        shard = cut_shard(g, shape, coords, cfg, perm)
        built = GraphBlocks(shard, plans, shape, coords, torch.device("cpu"), torch.float32,
                            EngineConfig())._built
        counts.append(len({id(m) for b in built.values() for m in (b._a, b._at)}))
        model.append(epoch_memory(spec, (2, 2, 2), coords=coords).adjacency)
    unit = worst / max(counts)
    assert [round(m / unit, 9) for m in model] == counts
    assert max(model) == worst
    if order == "agg":
        assert min(counts) < max(counts)  # the diagonal holds fewer


def test_a_rank_holds_each_block_once_as_the_model_prices_it():
    """The shard names Â's blocks by matrix and axes, so at 1x1x1 a 3-layer model's shard holds
    Â1 twice (layers 0 and 2 cut it over other axes, into the same whole matrix); the engine
    keeps one copy (8 bytes per non-zero were resident and unpriced: on a dense graph, a third
    of its adjacency). What the rank then holds of Â, the shard's arrays and the engine's
    matrices together, is the model's adjacency to the byte."""
    from plexus.api.model import cut_shard
    from plexus_partition.model.grid import GridShape
    from plexus_datasets import gcn_nnz, load_dataset
    from plexus.engine.blocks import GraphBlocks
    from plexus.engine.config import EngineConfig, ModelConfig

    g = load_dataset("rmat:scale=8,edge_factor=4,features=8,classes=4,seed=0")
    shape, cfg = GridShape(1, 1, 1), ModelConfig(num_layers=3, hidden=8)
    shard = cut_shard(g, shape, shape.coords(0), cfg, "double")
    assert len({id(b) for b in shard.blocks.values()}) == 3  # Â1 under two names, Â2
    built = GraphBlocks(shard, cfg.plans(g.num_features, g.num_classes), shape,
                        shape.coords(0), torch.device("cpu"), torch.float32, EngineConfig())
    assert len({id(b) for b in shard.blocks.values()}) == 2
    held = resident_storages(shard.blocks, built._built)
    spec = ModelSpec(g.num_nodes, gcn_nnz(g, exact=True), g.num_features, g.num_classes, cfg,
                     perm="double")
    assert sum(held.values()) == epoch_memory(spec, (1, 1, 1)).adjacency


class _OneRank:
    """A comm of one rank: every all-reduce leaves its operand as it is."""

    def raw_all_reduce(self, x: torch.Tensor, axis: str, op: str = "sum") -> torch.Tensor:
        return x


def test_loss_peak_is_priced_per_logit_and_per_row():
    from plexus.engine.loss import cross_entropy
    from plexus.perfmodel.memory import LOSS_BYTES, LOSS_ROW_BYTES

    rows, classes = 4096, 8  # few classes per row: the rows' vectors weigh as much as the logits
    z = torch.randn(rows, classes, requires_grad=True)
    labels = torch.randint(0, classes, (rows,))
    mask = torch.ones(rows, dtype=torch.bool)  # every row labelled: the model's upper bound
    with TensorTracker(resident_storages([z, labels, mask])) as t:
        cross_entropy(z, labels, mask, rows, 0, classes, _OneRank(), "x", "y")
    priced = rows * classes * LOSS_BYTES + rows * LOSS_ROW_BYTES
    assert 0.9 * priced <= t.peak_live <= priced, (t.peak_live, priced)
