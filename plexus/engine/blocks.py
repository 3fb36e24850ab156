"""A rank's sparse operators, built once from its shard for the stages that need them.

Plain blocks of Â are identified by (matrix, row range, column range): stages of the none/single
permutations use one matrix (Â1 = Â2), so equal blocks are stored once. When Â is symmetric, the
transpose of a block is the block at the swapped ranges of the other matrix (Â1ᵀ = Â2); if this
rank holds it anyway, the backward reuses it. A stage with a root term gets its own stacked block
[Â; S] or [Â | S] (`stacked_block`); GAT gets the block's structure as edges
(`plexus.engine.edges.EdgeBlock`) and S alone. Which a stage needs, its operator's declaration
says (`plexus_partition.model.ops.KindSpec.uses_plain_block`) and its torch code asks for.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import scipy.sparse as sp
import torch

from plexus_partition.model.layout import LayerPlan, block_identity, transpose_identity
from plexus_partition.model.ops import OPERATORS
from plexus_partition.plan import RankShard, block_key

from .spmm import SparseBlock, build_blocks


def stage_output_ids(shard: RankShard) -> list[np.ndarray]:
    """Per stage, the original node id of each of its output rows on this rank (-1: padding):
    the next stage's input rows, and the logits rows after the last."""
    return list(shard.input_ids[1:]) + [shard.output_ids]


def identity_block(out_ids: np.ndarray, in_ids: np.ndarray,
                   shape: tuple[int, int]) -> sp.csr_matrix:
    """S, the identity's block laid out like Â's: S[i, j] = 1 where output row i and input row
    j are the same real node."""
    size = int(max(in_ids.max(initial=-1), out_ids.max(initial=-1))) + 1
    position = np.full(size + 1, -1, dtype=np.int64)  # slot ``size`` answers the -1 padding
    real_in = in_ids >= 0
    position[in_ids[real_in]] = np.nonzero(real_in)[0]
    cols = position[np.where(out_ids >= 0, out_ids, size)]
    rows = np.nonzero(cols >= 0)[0]
    cols = cols[rows]
    return sp.csr_matrix((np.ones(len(rows), dtype=np.float32), (rows, cols)), shape=shape)


def stacked_block(a: sp.csr_matrix, out_ids: np.ndarray, in_ids: np.ndarray,
                  order: str) -> sp.csr_matrix:
    """Â's block with S stacked as [Â; S] for aggregate-first stages (one SpMM gives Â·H and H
    in the output's rows) or [Â | S] for combine-first ones (Â·Z + S·Zr)."""
    S = identity_block(out_ids, in_ids, a.shape)
    out = sp.vstack([a, S]) if order == "agg" else sp.hstack([a, S])
    out = out.tocsr().astype(np.float32)
    out.sort_indices()
    return out


class GraphBlocks:
    """The sparse operators of every stage of this rank (`plain`, `stacked`, `identity`,
    `edges`), built from ``shard`` for ``plans``: values in ``dtype`` on ``device``, with the
    engine config's SpMM backend and row chunks."""

    def __init__(self, shard: RankShard, plans: Sequence[LayerPlan], shape, coords,
                 device: torch.device, dtype: torch.dtype, engine) -> None:
        self.shard, self.device, self.dtype, self.engine = shard, device, dtype, engine
        self.shape, self.coords = shape, coords
        self.out_ids = stage_output_ids(shard)

        def ident(plan: LayerPlan) -> tuple:
            return block_identity(plan, shard.nodes_padded, shape, coords, shard.perm)

        # The shard names a block by its matrix and axes; stages whose axes differ but whose node
        # ranges coincide (every stage of one matrix at 1x1x1, ranks on the grid's diagonal)
        # hold equal blocks under two names: keep one, so the other copy is freed.
        kept: dict[tuple, sp.csr_matrix] = {}
        for p in plans:
            if OPERATORS[p.op].graph and block_key(p) in shard.blocks:
                shard.blocks[block_key(p)] = kept.setdefault(ident(p), shard.blocks[block_key(p)])
        plain = [p for p in plans if OPERATORS[p.op].uses_plain_block(p)]
        mats, self._key = {}, {}
        for p in plain:
            self._key[p.index] = ident(p)
            mats.setdefault(ident(p), shard.blocks[block_key(p)])
        transposes = {}
        if shard.meta.get("symmetric", False):
            for key in mats:
                t = transpose_identity(key, shard.perm)
                if t in mats:
                    transposes[key] = t
        self._mats = mats
        self._extra: dict[str, SparseBlock] = {}
        self._built = build_blocks(mats, transposes, device, engine.spmm_backend, dtype)

    def plain_block(self, plan: LayerPlan) -> SparseBlock:
        """Â's block for ``plan``: the shared one of the stages declared to use it, else built
        now (with its transpose) and kept for the stages at the same place."""
        if plan.index in self._key:
            return self._built[self._key[plan.index]]
        key = block_key(plan)
        if key not in self._extra:
            self._extra[key] = SparseBlock.build(self.matrix(plan), self.device,
                                                 self.engine.spmm_backend, dtype=self.dtype)
        return self._extra[key]

    def matrix(self, plan: LayerPlan) -> sp.csr_matrix:
        """The shard's block of Â for ``plan``."""
        return self.shard.blocks[block_key(plan)]

    def _chunks(self, m: sp.csr_matrix, whole: SparseBlock) -> list[SparseBlock]:
        if self.engine.agg_chunks <= 1:
            return [whole]
        bounds = np.linspace(0, m.shape[0], self.engine.agg_chunks + 1).astype(int)
        return [SparseBlock.build(m[a:b], self.device, self.engine.spmm_backend, False,
                                  self.dtype) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]

    def plain(self, plan: LayerPlan) -> tuple[SparseBlock, list[SparseBlock]]:
        """Â's block (shared between stages, transpose reused where Â is symmetric) and its
        forward row chunks."""
        key = self._key[plan.index]
        return self._built[key], self._chunks(self._mats[key], self._built[key])

    def stacked(self, plan: LayerPlan) -> tuple[SparseBlock, list[SparseBlock]]:
        """The stage's own [Â; S] or [Â | S] and its forward row chunks."""
        m = stacked_block(self.matrix(plan), self.out_ids[plan.index],
                          self.shard.input_ids[plan.index], plan.order)
        whole = SparseBlock.build(m, self.device, self.engine.spmm_backend, dtype=self.dtype)
        return whole, self._chunks(m, whole)

    def identity(self, plan: LayerPlan, dtype: torch.dtype = torch.float32,
                 transpose: bool = False) -> SparseBlock:
        """S alone (on the torch backend, values in ``dtype``): moves a node tensor from the
        stage's input rows to Â's rows; ``transpose``: Sᵀ, from Â's rows back to the input's."""
        S = identity_block(self.out_ids[plan.index], self.shard.input_ids[plan.index],
                           self.matrix(plan).shape)
        if transpose:
            S = S.T.tocsr()
        return SparseBlock.build(S, self.device, "torch", dtype=dtype)
