"""Which rows of a block of Â a rank touches, and what a sparse exchange of them sends.

A rank's product Â_blk·X is zero on the rows where its block has no non-zero, and Â_blkᵀ·dY reads
only those rows of dY: the aggregation's sums over the axis Â's columns are cut by can carry just
those rows (docs/design.md, "Sparse exchanges"). Likewise Â_blkᵀ·dY is zero outside the block's
touched columns, so the input gradient's sum over the axis Â's rows are cut by can carry just
those. The row sets are fixed by the partition; they
are read off each stored block's row pointers (one pass over its rows, never over its edges), so
every shard store, older ones included, carries them. The counts here are what one rank sends in
each exchange, the numbers the engine's ledger records and the performance model prices with
data (`plexus_partition.model.schedule.exact_rows`).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import scipy.sparse as sp


def touched_rows(block: sp.csr_matrix) -> np.ndarray:
    """The rows of ``block`` holding at least one stored non-zero, ascending (int64)."""
    return np.flatnonzero(np.diff(block.indptr)).astype(np.int64)


def touched_columns(block: sp.csr_matrix) -> np.ndarray:
    """The columns of ``block`` holding at least one stored non-zero, ascending (int64): the
    rows of the stage's input whose gradient Â_blkᵀ·dY is not structurally zero (one pass over
    the block's own non-zeros, no sort: a shard's, never the graph's)."""
    hit = np.zeros(block.shape[1], dtype=bool)
    hit[block.indices] = True
    return np.flatnonzero(hit).astype(np.int64)


def by_piece(rows: np.ndarray, total: int, parts: int) -> list[np.ndarray]:
    """``rows`` (ascending, in [0, total)) split by which of ``parts`` equal contiguous pieces of
    range(total) holds each one."""
    bounds = np.searchsorted(rows, np.arange(parts + 1) * (total // parts))
    return [rows[a:b] for a, b in zip(bounds[:-1], bounds[1:])]


def sent_rows(sets: Sequence[np.ndarray], total: int) -> tuple[list[int], list[int]]:
    """Per rank of an axis whose ranks touch ``sets`` of ``total`` rows (piece q of the rows
    belonging to rank q): the rows it sends in the sum's exchange (its touched rows in the
    others' pieces) and in the gather's (the others' touched rows in its own piece)."""
    p = len(sets)
    pieces = [by_piece(rows, total, p) for rows in sets]
    summed = [sum(len(pieces[r][q]) for q in range(p) if q != r) for r in range(p)]
    gathered = [sum(len(pieces[q][r]) for q in range(p) if q != r) for r in range(p)]
    return summed, gathered
