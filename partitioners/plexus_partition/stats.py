"""Load-balance statistics: non-zeros of Â in every block each layer multiplies by.

A layer's blocks are the |a_rows| × |a_cols| grid of contiguous blocks of Â_k (k = the layer's
adjacency, see `plexus_partition.model.layout.LayerPlan`). Counting is one chunked pass over Â's
rows with ``np.bincount`` over block ids, so it handles graphs with hundreds of millions of
non-zeros.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
import scipy.sparse as sp

from plexus_partition.model.grid import GridShape
from plexus_partition.model.layout import layer_plans, pad_to

from .permutations import PERMUTATIONS, Permutation, make_permutation
from .plan import block_key, col_order, row_order

#: rows per chunk are chosen so that a chunk holds about this many non-zeros
CHUNK_NNZ = 1 << 23


@dataclass(frozen=True)
class LayerBalance:
    """Non-zeros per block of one layer's Â_k and the imbalance figures derived from them."""

    layer: int
    adj: int
    a_rows: str
    a_cols: str
    counts: np.ndarray  # int64 (|a_rows|, |a_cols|)

    @property
    def nnz_max(self) -> int:
        return int(self.counts.max())

    @property
    def nnz_min(self) -> int:
        return int(self.counts.min())

    @property
    def nnz_mean(self) -> float:
        return float(self.counts.mean())

    @property
    def max_over_mean(self) -> float:
        mean = self.nnz_mean
        return self.nnz_max / mean if mean > 0 else 1.0

    @property
    def max_over_min(self) -> float:
        """inf when some block is empty (and the graph is not)."""
        if self.nnz_max == 0:
            return 1.0
        return self.nnz_max / self.nnz_min if self.nnz_min > 0 else math.inf

    def as_dict(self) -> dict:
        """The JSON form: an empty block's infinite max/min is written as null."""
        mom = self.max_over_min
        return {"layer": self.layer, "max_over_mean": self.max_over_mean,
                "max_over_min": None if math.isinf(mom) else mom,
                "nnz_max": self.nnz_max, "nnz_mean": self.nnz_mean}


def inverse(order: np.ndarray) -> np.ndarray:
    """Position of each node in ``order`` (the inverse permutation)."""
    inv = np.empty(len(order), dtype=np.int64)
    inv[order] = np.arange(len(order), dtype=np.int64)
    return inv


def layer_balance(adj_hat: sp.csr_matrix, perm: Permutation, shape: Mapping[str, int],
                  num_stages: int, orders: Sequence[str] | str = "agg",
                  chunk_nnz: int = CHUNK_NNZ) -> list[LayerBalance]:
    """Block non-zero counts of every layer of a grid ``shape`` under ``perm``.

    Layers sharing a block (same adjacency and cut axes) share the count; each distinct block
    layout costs one ``bincount`` per chunk of rows.
    """
    adj_hat = sp.csr_matrix(adj_hat)
    plans = layer_plans(num_stages, orders)
    n = adj_hat.shape[0]
    npad = pad_to(n, GridShape.of(shape).world_size)
    inv1 = inverse(perm.p1)
    inv2 = inv1 if perm.p2 is perm.p1 else inverse(perm.p2)

    def inv_of(order: np.ndarray) -> np.ndarray:
        return inv1 if order is perm.p1 else inv2

    layouts: dict[str, tuple[np.ndarray, np.ndarray, int, int]] = {}
    for plan in plans:
        key = block_key(plan)
        if key not in layouts:
            r, c = shape[plan.a_rows], shape[plan.a_cols]
            # block row of every original row, block column of every original column
            rb = inv_of(row_order(perm, plan.adj)) // (npad // r)
            cb = inv_of(col_order(perm, plan.adj)) // (npad // c)
            layouts[key] = (rb, cb, r, c)
    counts = {key: np.zeros(r * c, dtype=np.int64) for key, (_, _, r, c) in layouts.items()}
    indptr = adj_hat.indptr
    for lo, hi in row_chunks(indptr, chunk_nnz):
        row_len = np.diff(indptr[lo:hi + 1])
        cols = adj_hat.indices[indptr[lo]:indptr[hi]]
        for key, (rb, cb, r, c) in layouts.items():
            ids = np.repeat(rb[lo:hi] * c, row_len) + cb[cols]
            counts[key] += np.bincount(ids, minlength=r * c)
    return [LayerBalance(p.index, p.adj, p.a_rows, p.a_cols,
                         counts[block_key(p)].reshape(shape[p.a_rows], shape[p.a_cols]))
            for p in plans]


def row_chunks(indptr: np.ndarray, chunk_nnz: int) -> list[tuple[int, int]]:
    """Row ranges [lo, hi) holding about ``chunk_nnz`` non-zeros each (at least one row)."""
    n = len(indptr) - 1
    if n == 0:
        return []
    cuts = np.searchsorted(indptr, np.arange(chunk_nnz, int(indptr[-1]), chunk_nnz))
    cuts = np.unique(np.concatenate([[0], np.clip(cuts, 1, n), [n]]))
    return list(zip(cuts[:-1].tolist(), cuts[1:].tolist()))


def balance_report(adj_hat: sp.csr_matrix, shape: Mapping[str, int], num_stages: int,
                   orders: Sequence[str] | str = "agg", seed: int = 0,
                   kinds: Sequence[str] = PERMUTATIONS) -> dict:
    """Imbalance of every layer for every permutation kind, in the CLI's JSON form:
    ``{"permutations": {kind: {"layers": [{"layer", "max_over_mean", "max_over_min",
    "nnz_max", "nnz_mean"}, ...]}}}``."""
    world = GridShape.of(shape).world_size
    out = {}
    for kind in kinds:
        perm = make_permutation(adj_hat, kind, seed, world)
        stats = layer_balance(adj_hat, perm, shape, num_stages, orders)
        out[kind] = {"layers": [s.as_dict() for s in stats]}
    return {"permutations": out}


def format_report(report: dict) -> str:
    """A plain-text table of `balance_report`'s figures, one row per permutation and layer."""
    lines = [f"{'perm':<9} {'layer':>5} {'max/mean':>9} {'max/min':>9} {'nnz max':>12} "
             f"{'nnz mean':>14}"]
    for kind, entry in report["permutations"].items():
        for row in entry["layers"]:
            mom = row["max_over_min"]
            mom_s = "inf" if mom is None else f"{mom:.4f}"
            lines.append(f"{kind:<9} {row['layer']:>5} {row['max_over_mean']:>9.4f} {mom_s:>9} "
                         f"{row['nnz_max']:>12d} {row['nnz_mean']:>14.1f}")
    return "\n".join(lines)
