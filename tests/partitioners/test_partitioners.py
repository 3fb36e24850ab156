"""Permutations, the degree-aware balanced order, shard blocks and load-balance statistics."""

from __future__ import annotations

import heapq

import numpy as np
import pytest
import scipy.sparse as sp

from plexus_datasets.graph import Graph, gcn_normalize
from plexus_partition import (PERMUTATIONS, layer_balance, make_permutation, shard_graph)
from plexus_partition.balance import (balanced_orders, block_capacities, deal_by_weight,
                                         lpt_deal, spread_order, tree_targets, water_fill)
from plexus_partition.plan import block_key, col_order, padded_ids, row_order
from plexus_partition.stats import balance_report
from plexus_partition.model.layout import layer_plans, pad_to


def rmat_adj(scale: int, edge_factor: int, seed: int = 0) -> sp.csr_matrix:
    """A skewed R-MAT adjacency; hubs keep low ids (no relabelling), so blocks are unbalanced."""
    rng = np.random.default_rng(seed)
    m = edge_factor << scale
    src = np.zeros(m, dtype=np.int64)
    dst = np.zeros(m, dtype=np.int64)
    for _ in range(scale):
        q = np.searchsorted([0.57, 0.76, 0.95], rng.random(m), side="right")
        src = (src << 1) | (q >> 1)
        dst = (dst << 1) | (q & 1)
    n = 1 << scale
    adj = sp.csr_matrix((np.ones(m, np.float32), (src, dst)), shape=(n, n))
    adj.data[:] = 1.0
    return adj


def skewed_graph(scale: int = 8, edge_factor: int = 6, drop: int = 3, seed: int = 0,
                 directed: bool = False, features: int = 5, classes: int = 3) -> Graph:
    """A small trainable `Graph` on an R-MAT adjacency with ``drop`` nodes cut off, so N is not a
    multiple of the usual grid sizes."""
    adj = rmat_adj(scale, edge_factor, seed)
    n = adj.shape[0] - drop
    adj = adj[:n, :n].tocsr()
    rng = np.random.default_rng(seed + 1)
    labels = rng.integers(0, classes, n).astype(np.int64)
    labels[::11] = -1
    train = (rng.random(n) < 0.5) & (labels >= 0)
    val = ~train & (labels >= 0) & (rng.random(n) < 0.5)
    test = ~train & ~val & (labels >= 0)
    x = rng.standard_normal((n, features)).astype(np.float32)
    return Graph(f"rmat{scale}", adj, x, labels, train, val, test, classes,
                 directed=directed).validate()


def shape_of(grid: tuple[int, int, int]) -> dict[str, int]:
    return dict(zip("xyz", grid))


def coords_of(shape: dict[str, int]) -> list[dict[str, int]]:
    return [{"x": x, "y": y, "z": z} for x in range(shape["x"]) for y in range(shape["y"])
            for z in range(shape["z"])]


# --------------------------------------------------------------------------- permutations


@pytest.mark.parametrize("kind", ["single", "double", "balanced"])
@pytest.mark.parametrize("blocks", [1, 4, 6, 7])
def test_locality_sorts_inside_fine_blocks_only(kind, blocks):
    """The locality order keeps every fine block's nodes (so the balance) and sorts each by
    degree, heaviest first; the random order stays the tie-break."""
    adj_hat = gcn_normalize(skewed_graph().adj)
    n = adj_hat.shape[0]
    degree = np.diff(adj_hat.indptr) + np.bincount(adj_hat.indices, minlength=n)
    plain = make_permutation(adj_hat, kind, 5, blocks, locality=False)
    local = make_permutation(adj_hat, kind, 5, blocks)
    assert local.locality and not plain.locality
    size = -(-n // blocks)
    for p, q in ((plain.p1, local.p1), (plain.p2, local.p2)):
        assert not np.array_equal(p, q)
        for start in range(0, n, size):
            before, after = p[start:start + size], q[start:start + size]
            assert np.array_equal(np.sort(before), np.sort(after))
            assert (np.diff(degree[after]) <= 0).all()
            ties = after[degree[after] == degree[after][-1]]  # equal degrees: random order kept
            assert np.array_equal(ties, before[np.isin(before, ties)])
    if kind == "single":
        assert local.p2 is local.p1


@pytest.mark.parametrize("kind", PERMUTATIONS)
@pytest.mark.parametrize("blocks", [1, 4, 6, 7])
def test_permutations_are_seeded_permutations(kind, blocks):
    adj_hat = gcn_normalize(skewed_graph().adj)
    n = adj_hat.shape[0]
    a = make_permutation(adj_hat, kind, 3, blocks)
    b = make_permutation(adj_hat, kind, 3, blocks)
    c = make_permutation(adj_hat, kind, 4, blocks)
    for p in (a.p1, a.p2):
        assert p.dtype == np.int64 and np.array_equal(np.sort(p), np.arange(n))
    assert np.array_equal(a.p1, b.p1) and np.array_equal(a.p2, b.p2)
    if kind == "none":
        assert np.array_equal(a.p1, np.arange(n)) and a.p2 is a.p1
    else:
        assert not np.array_equal(a.p1, c.p1)
    if kind in ("none", "single"):
        assert np.array_equal(a.p1, a.p2)
    else:
        assert not np.array_equal(a.p1, a.p2)


def test_spread_order_is_a_digit_reversal():
    assert spread_order(8).tolist() == [0, 4, 2, 6, 1, 5, 3, 7]
    for b in (1, 6, 12, 7):
        assert sorted(spread_order(b).tolist()) == list(range(b))
    # the first two ranks land in different halves, the first four in different quarters
    rank_of = spread_order(16)
    block_of = np.argsort(rank_of)
    assert len({int(b) // 8 for b in block_of[:2]}) == 2
    assert len({int(b) // 4 for b in block_of[:4]}) == 4


def sequential_fill(loads, room, rank, count, weight):
    """Reference for `water_fill`: hand the items one by one to the least-loaded open block."""
    loads, room, take = loads.copy(), room.copy(), np.zeros_like(room)
    for _ in range(count):
        b = min((int(loads[i]), int(rank[i]), i) for i in range(len(loads)) if room[i] > 0)[2]
        loads[b] += weight
        room[b] -= 1
        take[b] += 1
    return take


@pytest.mark.parametrize("trial", range(30))
def test_water_fill_matches_item_by_item_lpt(trial):
    rng = np.random.default_rng(trial)
    b = int(rng.integers(1, 9))
    loads = rng.integers(0, 30, b).astype(np.int64)
    room = rng.integers(0, 6, b).astype(np.int64)
    room[0] = max(room[0], 1)
    count = int(rng.integers(1, room.sum() + 1))
    weight = int(rng.integers(0, 7))
    rank = rng.permutation(b)
    assert np.array_equal(water_fill(loads, room, rank, count, weight),
                          sequential_fill(loads, room, rank, count, weight))


def reference_lpt(w, loads, room, rank):
    """Plain LPT with capacities, one node at a time (a heap): the block of every node."""
    heap = [(int(loads[b]), int(rank[b]), b) for b in range(len(loads)) if room[b] > 0]
    heapq.heapify(heap)
    room, out = room.copy(), []
    for wt in w.tolist():
        load, r, b = heapq.heappop(heap)
        out.append(b)
        room[b] -= 1
        if room[b]:
            heapq.heappush(heap, (load + wt, r, b))
    return np.array(out)


@pytest.mark.parametrize("trial", range(12))
def test_lpt_deal_is_plain_lpt_with_capacities(trial):
    rng = np.random.default_rng(trial)
    blocks = int(rng.integers(1, 12))
    room = rng.integers(0, 15, blocks).astype(np.int64)
    room[0] += 1
    w = np.sort(np.minimum(rng.zipf(1.6, int(room.sum())), 300))[::-1].astype(np.int64)
    loads = rng.integers(-50, 50, blocks).astype(np.int64)
    rank = rng.permutation(blocks)
    got = lpt_deal(w, loads.copy(), room.copy(), rank)
    want = reference_lpt(w, loads, room, rank)
    # equal-weight nodes are interchangeable: compare what each block receives per weight
    for wt in np.unique(w):
        assert np.array_equal(np.bincount(got[w == wt], minlength=blocks),
                              np.bincount(want[w == wt], minlength=blocks)), wt


def test_tree_targets_even_out_every_level():
    # 8 blocks, the last three without capacity: the halves stay even, so block 4 carries its
    # whole quarter (the last quarter has no capacity at all)
    t = tree_targets(800.0, np.array([np.nan] * 5 + [0.0] * 3))
    assert np.allclose(t, [100, 100, 100, 100, 400, 0, 0, 0])
    # a hub fixed at 300 in block 0: its sibling takes less, the other half stays at 400
    t = tree_targets(800.0, np.array([300.0] + [np.nan] * 7))
    assert np.allclose(t.reshape(2, -1).sum(1), 400) and t[1] == pytest.approx(0.0)
    assert np.allclose(t.reshape(4, -1).sum(1), [300, 100, 200, 200])


def level_loads(order, weights, num_blocks, groups):
    size = pad_to(len(weights), num_blocks) // num_blocks
    padded = np.append(weights, 0)[padded_ids(order, size * num_blocks)]
    return padded.reshape(groups, -1).sum(axis=1)


@pytest.mark.parametrize("n,blocks", [(100, 4), (103, 4), (250, 7), (37, 6), (5, 4), (64, 1),
                                      (300, 64), (1000, 16)])
def test_deal_respects_capacities_and_balances_levels(n, blocks):
    rng = np.random.default_rng(n)
    weights = np.minimum(rng.zipf(1.7, n), 500).astype(np.int64)
    order = deal_by_weight(weights, blocks, np.random.default_rng(1))
    assert np.array_equal(np.sort(order), np.arange(n))  # padding only at the end
    assert np.array_equal(order, deal_by_weight(weights, blocks, np.random.default_rng(1)))
    fine = level_loads(order, weights, blocks, blocks)
    # LPT bound: no block exceeds the lightest by more than the heaviest node, unless it has
    # less room (padding) or holds a node heavier than a block's share
    full = block_capacities(n, blocks) == pad_to(n, blocks) // blocks
    if full.sum() > 1 and weights.max() < weights.sum() / blocks:
        assert fine[full].max() - fine[full].min() <= weights.max()


def test_padding_and_hubs_are_made_up_by_siblings():
    # 300 nodes on 64 blocks: 5 per block, 20 padding positions (4 whole blocks empty); a few
    # hubs heavier than a block's share. Plain LPT leaves the padded quarter light and the hub
    # blocks' quarters heavy; the targeted deal evens the quarters out.
    rng = np.random.default_rng(0)
    weights = rng.integers(1, 20, 300).astype(np.int64)
    weights[:3] = [400, 300, 250]
    order = deal_by_weight(weights, 64, np.random.default_rng(0))
    quarters = level_loads(order, weights, 64, 4)
    assert quarters.max() / quarters.mean() < 1.01
    plain = level_loads(deal_by_weight(weights, 64, np.random.default_rng(0), passes=0), weights,
                        64, 4)
    assert plain.max() / plain.mean() > quarters.max() / quarters.mean()


def test_balanced_orders_use_row_and_column_counts():
    # directed: row nnz and column nnz differ; p1 balances rows, p2 balances columns
    adj = rmat_adj(9, 8, seed=2)
    adj_hat = gcn_normalize(adj, directed=True)
    p1, p2 = balanced_orders(adj_hat, 0, 8)
    row_nnz = np.diff(adj_hat.indptr)
    col_nnz = np.bincount(adj_hat.indices, minlength=adj_hat.shape[0])
    for order, w in ((p1, row_nnz), (p2, col_nnz)):
        loads = w[order].reshape(8, -1).sum(axis=1)
        assert loads.max() - loads.min() <= w.max()
        assert loads.max() / loads.mean() < 1.01


def worst(stats) -> float:
    return max(s.max_over_mean for s in stats)


def test_balanced_beats_double_on_a_skewed_graph():
    adj_hat = gcn_normalize(rmat_adj(12, 8, seed=1))
    shape = shape_of((4, 4, 1))
    figures = {kind: worst(layer_balance(adj_hat, make_permutation(adj_hat, kind, 0, 16), shape, 3))
               for kind in PERMUTATIONS}
    assert figures["none"] > 2.0  # hubs sit at low ids: the identity order is badly skewed
    assert figures["balanced"] < figures["double"] < figures["none"]
    assert figures["balanced"] < 1.03


# --------------------------------------------------------------------------- shards


def permuted_dense(adj_hat, perm, k, npad) -> np.ndarray:
    """Â_k (rows and columns in the permutation's orders), zero-padded to npad."""
    rows, cols = row_order(perm, k), col_order(perm, k)
    n = adj_hat.shape[0]
    out = np.zeros((npad, npad), dtype=np.float32)
    out[:n, :n] = adj_hat.toarray()[np.ix_(rows, cols)]
    return out


@pytest.mark.parametrize("grid", [(2, 1, 2), (3, 1, 2), (1, 1, 1), (2, 3, 1), (1, 2, 3)])
@pytest.mark.parametrize("kind", ["double", "balanced", "single"])
def test_shard_blocks_reassemble_the_permuted_adjacency(grid, kind):
    graph = skewed_graph(scale=6, edge_factor=4, drop=5)
    adj_hat = gcn_normalize(graph.adj)
    shape = shape_of(grid)
    world = grid[0] * grid[1] * grid[2]
    perm = make_permutation(adj_hat, kind, 7, world)
    npad = pad_to(graph.num_nodes, world)
    orders = ["agg", "combine", "agg"]
    plans = layer_plans(3, orders)
    full = {k: permuted_dense(adj_hat, perm, k, npad) for k in (1, 2)}
    if kind != "single":  # Â2 = P2 Â P1ᵀ really is the other product
        assert not np.array_equal(full[1], full[2])
    assembled = {block_key(p): np.full((npad, npad), np.nan, np.float32) for p in plans}
    for coords in coords_of(shape):
        shard = shard_graph(graph, shape, coords, 3, orders, perm, adj_hat=adj_hat)
        for plan in plans:
            blk = shard.adj_block(plan.index).toarray()
            rs, cs = npad // shape[plan.a_rows], npad // shape[plan.a_cols]
            r0, c0 = coords[plan.a_rows] * rs, coords[plan.a_cols] * cs
            target = assembled[block_key(plan)][r0:r0 + rs, c0:c0 + cs]
            # replicas of a block on other ranks must be identical
            assert np.isnan(target).all() or np.array_equal(target, blk)
            target[...] = blk
    for plan in plans:
        assert np.array_equal(assembled[block_key(plan)], full[plan.adj])


# --------------------------------------------------------------------------- statistics


@pytest.mark.parametrize("grid", [(2, 1, 2), (3, 1, 2), (4, 4, 1), (2, 3, 4)])
@pytest.mark.parametrize("kind", PERMUTATIONS)
def test_stats_match_brute_force_block_counts(grid, kind):
    graph = skewed_graph(scale=7, edge_factor=4, drop=3, directed=True)
    adj_hat = gcn_normalize(graph.adj, directed=True)
    shape = shape_of(grid)
    world = grid[0] * grid[1] * grid[2]
    perm = make_permutation(adj_hat, kind, 1, world)
    npad = pad_to(graph.num_nodes, world)
    orders = ["agg", "agg", "combine", "agg"]
    stats = layer_balance(adj_hat, perm, shape, 4, orders, chunk_nnz=100)  # many chunks
    for s, plan in zip(stats, layer_plans(4, orders)):
        dense = permuted_dense(adj_hat, perm, plan.adj, npad) != 0
        nr, nc = shape[plan.a_rows], shape[plan.a_cols]
        rs, cs = npad // nr, npad // nc
        brute = np.array([[dense[i * rs:(i + 1) * rs, j * cs:(j + 1) * cs].sum()
                           for j in range(nc)] for i in range(nr)])
        assert (s.a_rows, s.a_cols, s.adj) == (plan.a_rows, plan.a_cols, plan.adj)
        assert np.array_equal(s.counts, brute)
        assert s.nnz_max == brute.max() and s.nnz_mean == pytest.approx(brute.mean())
        assert s.max_over_mean == pytest.approx(brute.max() / brute.mean())
        if brute.min() > 0:
            assert s.max_over_min == pytest.approx(brute.max() / brute.min())


def test_report_shape_and_empty_blocks():
    adj_hat = gcn_normalize(skewed_graph(scale=5, edge_factor=2).adj)
    report = balance_report(adj_hat, shape_of((2, 2, 1)), 2)
    assert set(report) == {"permutations"}
    assert list(report["permutations"]) == list(PERMUTATIONS)
    for entry in report["permutations"].values():
        assert [row["layer"] for row in entry["layers"]] == [0, 1]
        for row in entry["layers"]:
            assert set(row) == {"layer", "max_over_mean", "max_over_min", "nnz_max", "nnz_mean"}
    # a graph with more blocks than nodes has empty blocks: max/min is infinite -> null in JSON
    tiny = gcn_normalize(sp.csr_matrix((3, 3), dtype=np.float32))
    s = layer_balance(tiny, make_permutation(tiny, "none"), shape_of((4, 1, 1)), 3)[2]
    assert s.nnz_min == 0 and s.as_dict()["max_over_min"] is None
