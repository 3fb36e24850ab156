"""Degree-aware double permutation: deal nodes onto the grid's finest blocks by non-zero count.

A random double permutation balances blocks only on average; on skewed graphs a few hubs decide
which block is heaviest. Here rows (by row nnz of Â) and columns (by column nnz) are each dealt,
heaviest first, onto the least-loaded of the ``num_blocks`` equal fine blocks that still has room
(LPT with capacities), then shuffled inside their block. Every block a layer uses is a union of
consecutive fine blocks, so it is balanced when the fine blocks are. A fixed round-robin deal
(one node per block per round, or a serpentine) is not enough: the block holding the biggest hub
still takes a fairly heavy node from every early round and ends far above the mean.

Fine blocks cannot always be even: a hub may outweigh a block's share, and on small graphs the
padding can empty whole blocks. The deal therefore aims each fine block at a target chosen so
that every coarser group (halves, quarters, ... of the blocks) is even (`tree_targets`), and the
siblings of a block that cannot meet its target make up for it.

Rows and columns are balanced independently (independent random streams). Measured on R-MAT
scale 18 (benchmarks/partition_balance.py), the 2D blocks then come out within the sampling
noise of a random split (16x16 blocks: max/mean about 1.014), so no joint 2D fix-up is done.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from plexus_partition.model.layout import pad_to


def block_capacities(n: int, num_blocks: int) -> np.ndarray:
    """Real (non-padding) positions of each fine block: padding sits at the end of the order."""
    size = pad_to(n, num_blocks) // num_blocks
    return np.clip(n - np.arange(num_blocks, dtype=np.int64) * size, 0, size)


def spread_order(num_blocks: int) -> np.ndarray:
    """Tie-break rank of every block: mixed-radix digit reversal of the block index.

    With equal loads (at the start) the heaviest nodes go to blocks in rank order; reversing the
    digits sends consecutive ranks to different halves, thirds, quarters, ... of the blocks, so
    hubs heavier than a whole fine block do not pile up in one coarse block.
    """
    factors = prime_factors(num_blocks)
    blocks = np.zeros(num_blocks, dtype=np.int64)
    ranks = np.arange(num_blocks, dtype=np.int64)
    rest, stride = ranks.copy(), num_blocks
    for f in factors:
        stride //= f
        blocks += (rest % f) * stride
        rest //= f
    rank_of = np.empty(num_blocks, dtype=np.int64)
    rank_of[blocks] = ranks
    return rank_of


def water_fill(loads: np.ndarray, room: np.ndarray, rank: np.ndarray, count: int,
               weight: int) -> np.ndarray:
    """How many of ``count`` equal items of ``weight`` each block takes under LPT.

    Giving items one by one to the least-loaded block with room takes the ``count`` smallest
    "slot" values ``loads[b] + j * weight`` (j < room[b]); ties go to the lowest ``rank``. The
    level of the last slot taken is found by bisection instead of a per-item loop.
    """
    if weight == 0:  # loads never change: fill the lightest block (lowest rank) up, then the next
        take = np.zeros_like(room)
        order = np.lexsort((rank, loads))
        filled = np.minimum(np.cumsum(room[order]), count)
        take[order] = np.diff(filled, prepend=0)
        return take

    def slots_upto(level: int) -> np.ndarray:  # per block: slots with value <= level
        return np.clip((level - loads) // weight + 1, 0, room)

    open_ = room > 0
    lo, hi = int(loads[open_].min()), int(loads[open_].max()) + count * weight
    while lo < hi:  # smallest level with at least `count` slots at or below it
        mid = (lo + hi) // 2
        if int(slots_upto(mid).sum()) >= count:
            hi = mid
        else:
            lo = mid + 1
    take = slots_upto(lo - 1)
    extra = count - int(take.sum())
    if extra:  # blocks whose next slot sits exactly at the level, lowest rank first
        at_level = np.nonzero((take < room) & (loads + take * weight == lo))[0]
        take[at_level[np.argsort(rank[at_level])[:extra]]] += 1
    return take


def lpt_deal(w: np.ndarray, loads: np.ndarray, room: np.ndarray,
             rank: np.ndarray) -> np.ndarray:
    """Block of every node of ``w`` (sorted heaviest first) under LPT with capacities.

    Each node goes to the least-loaded block (lowest ``rank`` on ties) that still has ``room``;
    ``loads`` are the starting loads. Nodes of equal weight are dealt together by `water_fill`,
    so the Python loop runs once per distinct weight, not per node. ``loads`` and ``room`` are
    updated in place.
    """
    num_blocks = len(loads)
    if len(w) == 0:
        return np.zeros(0, dtype=np.int64)
    run_starts = np.concatenate([[0], np.flatnonzero(np.diff(w)) + 1, [len(w)]])
    big = np.iinfo(np.int64).max
    dealt_to, dealt = [], []  # per run: the blocks taking nodes and how many each
    for lo, hi in zip(run_starts[:-1].tolist(), run_starts[1:].tolist()):
        wt = int(w[lo])
        if hi - lo == 1:  # a single node: least-loaded open block, lowest rank on ties
            b = int(np.argmin(np.where(room > 0, loads * num_blocks + rank, big)))
            loads[b] += wt
            room[b] -= 1
            dealt_to.append(np.array([b]))
            dealt.append(np.array([1]))
        else:
            take = water_fill(loads, room, rank, hi - lo, wt)
            loads += take * wt
            room -= take
            nz = np.flatnonzero(take)
            dealt_to.append(nz)
            dealt.append(take[nz])
    # the nodes of each run go to its blocks in increasing block order
    return np.repeat(np.concatenate(dealt_to), np.concatenate(dealt))


def head_deal(w: np.ndarray, loads: np.ndarray, room: np.ndarray,
              rank: np.ndarray) -> np.ndarray:
    """Blocks of a few heavy nodes (sorted heaviest first), chosen down the block tree.

    At every level of the tree (`tree_targets`) the node goes to the child group with the
    lowest summed load that has room, then on inside it. A flat LPT would send the heaviest
    nodes to the blocks with the lowest loads even when these share one coarse group; going
    down the tree spreads them over the coarse groups first. ``loads``/``room`` are updated.
    """
    factors = prime_factors(len(loads))
    out = np.empty(len(w), dtype=np.int64)
    for i, wt in enumerate(w.tolist()):
        lo, hi = 0, len(loads)
        for f in factors:
            step = (hi - lo) // f
            sums = loads[lo:hi].reshape(f, step).sum(axis=1)
            has_room = room[lo:hi].reshape(f, step).any(axis=1)
            first = rank[lo:hi].reshape(f, step).min(axis=1)
            keys = np.where(has_room, sums, np.iinfo(np.int64).max)
            c = min(range(f), key=lambda j: (keys[j], first[j]))
            lo, hi = lo + c * step, lo + (c + 1) * step
        out[i] = lo
        loads[lo] += wt
        room[lo] -= 1
    return out


def prime_factors(n: int) -> list[int]:
    """Prime factors of n in increasing order, with multiplicity."""
    factors, p = [], 2
    while n > 1:
        while n % p == 0:
            factors.append(p)
            n //= p
        p += 1
    return factors


def tree_targets(total: float, fixed: np.ndarray) -> np.ndarray:
    """Target load of every fine block so that groups at every level of the block tree are even.

    The tree splits the blocks by the prime factors of their count (halves, then quarters, ...;
    these nest, and every grid axis of a power-of-two grid is one of the levels). ``fixed``
    holds a load for blocks that cannot follow a target (no capacity: 0; holding a hub heavier
    than their share: what they hold) and NaN for free blocks. Each group's amount is shared
    among its children evenly, except that a child never gets less than the fixed load inside
    it and a child without free blocks gets exactly that (water-filling).
    """
    num_blocks = len(fixed)
    free = np.isnan(fixed)
    fixed0 = np.where(free, 0.0, fixed)
    amounts = np.array([float(total)])
    groups = 1
    for f in prime_factors(num_blocks):
        shape = (groups, f, num_blocks // (groups * f))
        mins = fixed0.reshape(shape).sum(axis=2)
        has_free = free.reshape(shape).any(axis=2)
        out = mins.copy()
        for g in range(groups):
            sel = has_free[g]
            budget = amounts[g] - mins[g][~sel].sum()
            if sel.any() and budget > mins[g][sel].sum():
                out[g][sel] = np.maximum(water_level(mins[g][sel], budget), mins[g][sel])
        amounts, groups = out.ravel(), groups * f
    return amounts


def water_level(mins: np.ndarray, budget: float) -> float:
    """The level L with sum(max(L, mins)) == budget (budget above sum(mins))."""
    m = np.sort(mins)
    for k in range(len(m), 0, -1):  # the k lowest children sit at the level
        level = (budget - m[k:].sum()) / k
        if level >= m[k - 1]:
            return level
    return float(m[0])


def imbalance(loads: np.ndarray) -> float:
    """Sum over every divisor s > 1 of the block count of (max/mean - 1) of the s groups."""
    num_blocks, total = len(loads), float(loads.sum())
    if total == 0:
        return 0.0
    score = 0.0
    for s in range(2, num_blocks + 1):
        if num_blocks % s == 0:
            score += loads.reshape(s, -1).sum(axis=1).max() * s / total - 1.0
    return score


def deal_by_weight(weights: np.ndarray, num_blocks: int, rng: np.random.Generator,
                   passes: int = 3) -> np.ndarray:
    """An order (position -> node id) whose blocks, at every level, have near-even ``weights``.

    Nodes (non-negative integer weights, heaviest first, ties at random) are dealt by `lpt_deal`
    onto the fine blocks, each starting at minus its `tree_targets` target so that LPT evens
    out the distance to the target. Two refinements over plain LPT:

    - capacity: every block ends with exactly its capacity (`block_capacities`), so its final
      load is its shifted load plus ``capacity * w_min``; dealing ``w - w_min`` and counting that
      base up front lets LPT see that a short block (padding) needs heavier nodes;
    - blocks that cannot meet their target (a hub heavier than a block's share, no capacity)
      are fixed at what they got and the targets recomputed, so that their siblings in every
      coarser group make up for them. Up to ``passes`` passes; the most even one is kept.

    Each block is shuffled inside.
    """
    weights = np.asarray(weights).astype(np.int64)
    n = len(weights)
    if num_blocks <= 1 or n == 0:
        return rng.permutation(n).astype(np.int64)
    if (weights < 0).any():
        raise ValueError("weights must be non-negative")
    caps = block_capacities(n, num_blocks)
    rank = spread_order(num_blocks)
    tie = rng.permutation(n)
    by_weight = tie[np.argsort(-weights[tie], kind="stable")]
    w = weights[by_weight]
    w_min = int(w[-1])
    base = caps * w_min
    fixed = np.where(caps == 0, 0.0, np.nan)
    # nodes heavier than half a block's share are few (at most twice the block count)
    head = int(np.searchsorted(-w, -w.sum() / (2 * num_blocks), side="left"))
    best, best_score = None, np.inf
    for _ in range(max(passes, 1)):
        targets = np.rint(tree_targets(float(w.sum()), fixed)).astype(np.int64)
        loads, room = base - targets, caps.copy()
        block_of = np.concatenate([head_deal(w[:head] - w_min, loads, room, rank),
                                   lpt_deal(w[head:] - w_min, loads, room, rank)])
        loads = np.bincount(block_of, weights=w, minlength=num_blocks).astype(np.int64)
        score = imbalance(loads)
        if score < best_score:
            best, best_score = block_of, score
        # free blocks whose heaviest node alone (plus the lightest fill) overshoots the target
        top = np.zeros(num_blocks, dtype=np.int64)
        np.maximum.at(top, block_of, w)
        stuck = np.isnan(fixed) & (top + (caps - 1) * w_min > targets) & (loads > targets)
        if not stuck.any():
            break
        fixed[stuck] = loads[stuck]
    within = rng.permutation(n)  # random order inside each block
    return by_weight[np.lexsort((within, best))].astype(np.int64)


def balanced_orders(adj_hat: sp.csr_matrix, seed: int,
                    num_blocks: int) -> tuple[np.ndarray, np.ndarray]:
    """(p1, p2) of the ``balanced`` permutation of ``adj_hat``.

    p1 orders Â1's rows, so it is dealt by row nnz; p2 orders Â1's columns, dealt by column nnz.
    For a symmetric Â both counts are the degree + 1; for a directed graph they differ.
    """
    adj_hat = sp.csr_matrix(adj_hat)
    return balanced_orders_from_counts(np.diff(adj_hat.indptr),
                                       np.bincount(adj_hat.indices, minlength=adj_hat.shape[1]),
                                       seed, num_blocks)


def balanced_orders_from_counts(row_nnz: np.ndarray, col_nnz: np.ndarray, seed: int,
                                num_blocks: int) -> tuple[np.ndarray, np.ndarray]:
    """`balanced_orders` from the non-zeros of every row and every column of Â."""
    rng1, rng2 = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
    return deal_by_weight(row_nnz, num_blocks, rng1), deal_by_weight(col_nnz, num_blocks, rng2)
