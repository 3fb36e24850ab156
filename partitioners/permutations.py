"""Node permutations that balance the non-zeros of Â over the blocks of the grid.

A permutation is stored as two orders: ``p1[k]`` (``p2[k]``) is the original id of the node at
position k. Layers alternate Â1 = P1 Â P2ᵀ (rows in p1 order, columns in p2 order) and
Â2 = P2 Â P1ᵀ; input features are in p2 order. ``none`` and ``single`` have p1 == p2.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

PERMUTATIONS = ("none", "single", "double", "balanced")


@dataclass(frozen=True)
class Permutation:
    """The row/column orders of Â1 and Â2 (see module docstring)."""

    kind: str
    seed: int
    p1: np.ndarray
    p2: np.ndarray

    def order(self, k: int) -> np.ndarray:
        """p1 for k == 1, p2 for k == 2."""
        return self.p1 if k == 1 else self.p2

    def output_order(self, num_layers: int) -> np.ndarray:
        """Order of the last layer's output rows: p1 when the layer count is odd, else p2."""
        return self.p1 if num_layers % 2 == 1 else self.p2


def make_permutation(adj: sp.csr_matrix, kind: str = "none", seed: int = 0,
                     num_blocks: int = 1) -> Permutation:
    """Build the permutation ``kind`` for the (normalized) adjacency ``adj``.

    ``num_blocks`` is the finest number of contiguous row/column blocks the grid uses (X·Y·Z):
    degree-aware permutations balance those, and so every coarser block too.
    """
    n = adj.shape[0]
    rng = np.random.default_rng(seed)
    if kind == "none":
        ident = np.arange(n, dtype=np.int64)
        return Permutation(kind, seed, ident, ident)
    if kind == "single":
        p = rng.permutation(n).astype(np.int64)
        return Permutation(kind, seed, p, p)
    if kind == "double":
        p1 = rng.permutation(n).astype(np.int64)
        p2 = rng.permutation(n).astype(np.int64)
        return Permutation(kind, seed, p1, p2)
    if kind == "balanced":
        from .balance import balanced_orders  # noqa: PLC0415 (kept separate: the heavier algorithm)

        p1, p2 = balanced_orders(adj, seed, num_blocks)
        return Permutation(kind, seed, p1, p2)
    raise ValueError(f"unknown permutation {kind!r}; use one of {', '.join(PERMUTATIONS)}")
