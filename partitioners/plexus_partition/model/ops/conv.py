"""The graph convolution Â·H·W (aggregate first (Â·H)·W or combine first Â·(H·W)), with an
optional root term for each node's own features, as GCN, GraphSAGE and GIN declare it.

A root term needs H in the output's row layout: the engine stacks S (the identity's block laid
out like Â's) with Â, so one SpMM and one all-reduce give [Â·H; S·H] (aggregate first) or
Â·Z + S·Zr (combine first); SAGE and a residual multiply [AGG | S·H] by [W; Wr] in one GEMM,
GIN adds (1+ε)·S·H before it. See docs/design.md, "Models".
"""

from __future__ import annotations

import enum

from .base import (Flops, KindSpec, MASTER_BYTES, ModelKind, Param, StageMemory,
                   StageSizes, dropout_work, param_memory)


class RootTerm(enum.Enum):
    """A convolution stage's root term (each node's own features beside the aggregation), as
    its kind declares it (`ConvOperator.root`). The declaration and the stage toolkit
    (`plexus.engine.graph3d.StageGraph.conv`) read what it does from its properties, never
    from a kind's name."""

    NONE = "none"          # Â·H·W alone (GCN)
    WEIGHT = "weight"      # + H·Wr, a learned root weight (SAGE, GraphConv)
    RESIDUAL = "residual"  # + H, the identity as Wr (GCN's residual)
    SCALED = "scaled"      # (1+ε)·H added to Â·H before the GEMM (GIN)

    @property
    def stacked(self) -> bool:
        """The SpMM carries S·H beside Â·H (any root term)."""
        return self is not RootTerm.NONE

    @property
    def wide(self) -> bool:
        """The GEMM multiplies [AGG | S·H] by [W; Wr] (a root weight, learned or the identity)."""
        return self in (RootTerm.WEIGHT, RootTerm.RESIDUAL)

    @property
    def learned(self) -> bool:
        """Wr is a parameter, gathered and reduced like W."""
        return self is RootTerm.WEIGHT

    @property
    def scaled(self) -> bool:
        """S·H is scaled by (1+ε) and added to Â·H."""
        return self is RootTerm.SCALED


class ConvOperator(KindSpec):
    """A graph convolution stage; subclasses say which root term it has."""

    def root(self, plan) -> RootTerm:
        """The stage's root term (`RootTerm`); none by default."""
        return RootTerm.NONE

    def stacked(self, plan) -> int:
        """2 when the SpMM carries S·H beside Â·H (any root term)."""
        return 2 if self.root(plan).stacked else 1

    def wide(self, plan) -> int:
        """2 when the GEMM multiplies by [W; Wr] (SAGE, residual)."""
        return 2 if self.root(plan).wide else 1

    def gathers_wr(self, plan) -> bool:
        return self.root(plan).learned

    def reads_input_by_aggregation(self, plan) -> bool:
        """Aggregate first without a root term (GCN without a residual): H meets only Â_blk."""
        return plan.order == "agg" and not self.root(plan).stacked and not self.adds_input(plan)

    def uses_plain_block(self, plan) -> bool:
        """Without a root term the stage multiplies by the shard's block (and its transpose);
        with one, by its own stacked copy [Â; S] or [Â | S] and that copy's transpose."""
        return not self.root(plan).stacked

    # ---- compute ----------------------------------------------------------------------------
    def flops(self, z: StageSizes) -> Flops:
        """Forward one SpMM and one GEMM; backward two GEMMs (dW and the data gradient) and one
        SpMM, except what only feeds dH on stage 0 with fixed features (aggregate first: the
        dAGG GEMM and the Âᵀ SpMM; combine first: the dH GEMM). A root term adds S's rows to
        the SpMM and (SAGE, residual) Wr's rows to the GEMM."""
        p, n, D, D2 = z.plan, z.n, z.D, z.D2
        s_nnz = n / (z.size(p.a_rows) * z.size(p.a_cols)) if self.stacked(p) > 1 else 0.0
        nnz = z.nnz_block + s_nnz
        k = self.wide(p)
        if p.order == "agg":
            sp_one = (nnz, D / z.i)  # [Â; S](d×o) · H(o×i)
            mm_one = 2.0 * (n / z.d) * (k * D / z.i) * (D2 / z.o)  # AGG(d×i) · W(i×o)
            return Flops.products([sp_one] * (2 if z.needs_dh else 1),
                                  mm_one * (3 if z.needs_dh else 2))
        sp_one = (nnz, D2 / z.d)  # [Â | S](i×o) · Z(o×d)
        mm_one = 2.0 * (n / z.o) * (D / z.i) * (k * D2 / z.d)  # H(o×i) · W(i×d)
        return Flops.products([sp_one] * 2, mm_one * (3 if z.needs_dh else 2))

    # ---- memory -----------------------------------------------------------------------------
    def memory(self, z: StageSizes) -> StageMemory:
        """What the convolution holds (`stage` above, the toolkit's `conv`): the GEMM keeps only
        the operand its gradient needs (AGG for an aggregate-first dW, the dropped H for a
        combine-first one, W for dH); dropout keeps nothing (its mask is recomputed) and an
        aggregate-first stage drops out inside the SpMM, so the dropped H lives only while it
        is multiplied; the all-reduce over i sums a copy."""
        p, n, fb = z.plan, z.n, z.dtype_bytes
        o, i, d = z.o, z.i, z.d
        root, k, st = self.root(p), self.wide(p), self.stacked(p)
        h_in, D, D2 = z.h_in, z.D, z.D2
        drop = h_in if z.drops_input else 0.0
        caller = z.caller_input  # stage 0 reads the stored or kept features
        w_blk = k * (D / i * D2 / o if p.order == "agg" else D / i * D2 / d)
        w_flat = z.size(p.w_flat)
        gathered = w_blk if w_flat > 1 else 0.0
        vectors = (D2 / z.size(p.out_cols) if p.bias else 0.0) + (1 if self.learns_eps(p) else 0)
        weights, optimizer = param_memory(z, w_blk / w_flat, gathered, vectors)
        if p.order == "agg":
            inter, out = n / d * D / i, n / d * D2 / o
            out_all = out * (2 if i > 1 else 1)  # the all-reduce over i sums a copy
            spmm = st * inter  # [AGG; S·H], alive until the stage returns
            # [AGG | S·H] (SAGE, residual), AGG + (1+ε)·S·H (GIN): the GEMM's left operand
            joined = 0.0 if not root.stacked else inter if root.scaled else 2 * inter
            # GIN's dε keeps S·H, a view of [AGG; S·H]: the whole stacked result stays
            kept = (joined or inter) + (spmm if root.scaled and self.learns_eps(p) else 0.0)
            forward = [caller + (drop if p.index == 0 else 0.0) + spmm,
                       caller + spmm + joined + out_all]
            # backward: dOUT and d(operand) beside what is kept; then, the operand freed,
            # d(operand) and the stacked gradient d[AGG; S·H]
            backward = [(kept + (gathered if z.needs_dh else 0.0), out + (joined or inter))]
            backward.append((0.0, (joined or inter) + (spmm if root.stacked else
                                                       inter * (2 if o > 1 else 1) - inter)))
            dh = spmm
        else:
            inter, out = n / o * D2 / d, n / i * D2 / d
            z_all = k * inter * (2 if i > 1 else 1)  # Z (and H·Wr) and its all-reduced copy
            joined = 2 * inter if root.stacked else 0.0  # [Z; Zr] or [Z; (1+ε)·Z]
            kept = (drop if drop else h_in) + (inter if root.scaled and self.learns_eps(p)
                                              else 0.0)
            forward = [caller + drop + z_all + joined + out]
            # backward: dOUT and the SpMM's [Â | S]ᵀ·dOUT, then dZ (and its all-reduced copy)
            backward = [(kept + (gathered if z.needs_dh else 0.0), out + (joined or inter)),
                        (kept, (joined or 0.0) + k * inter * (2 if i > 1 else 1))]
            dh = k * inter
        mask = dropout_work(z) / fb  # in elements, as the rest here
        forward[0] += mask
        if z.needs_dh:
            kept += gathered  # W for dH
            backward.append((0.0, dh + h_in + mask))
        backward = [(kb * fb, t * fb) for kb, t in backward]
        return StageMemory(kept * fb, [f * fb for f in forward], backward, out, weights,
                           optimizer, self._stacked_bytes(z))

    def _stacked_bytes(self, z: StageSizes) -> float:
        """A root term's own [Â; S] (or [Â | S]) block and its transpose (CSR)."""
        p = z.plan
        if not self.root(p).stacked:
            return 0.0
        rows, cols = z.n / z.size(p.a_rows), z.n / z.size(p.a_cols)
        nnz = z.nnz_block + z.n / (z.size(p.a_rows) * z.size(p.a_cols))  # S: ~ one per row
        per = z.dtype_bytes + z.index_bytes
        if p.order == "agg":
            rows_t, rows = cols, 2 * rows
        else:
            rows_t = 2 * cols
        return 2 * nnz * per + (rows + rows_t + 2) * z.index_bytes


class RootWeightConv(ConvOperator):
    """A convolution with a root weight: H' = (M·H)·W + H·Wr (+ b), M the kind's aggregation
    (SAGE: the mean, GraphConv: the sum); subclasses name W's, Wr's and b's PyG tensors."""

    w_pyg, wr_pyg = "", ""

    def root(self, plan) -> RootTerm:
        return RootTerm.WEIGHT  # H·Wr beside the aggregation: one GEMM with [W; Wr]

    def params(self, plan, d_in, d_out):
        # PyG's SAGEConv and GraphConv hold two `Linear`s with its default initialization;
        # Glorot's bound is ~2x theirs here and, over GraphConv's unnormalized sum, cost
        # 7 points of accuracy (benchmarks/results/model_accuracy.txt)
        bias = [Param("b", (d_out,), "vector", "linear", pyg=self.bias_pyg, fan_in=d_in)]
        return [Param("W", (d_in, d_out), "weight", "linear", stream=0, pyg=self.w_pyg,
                      transform="T"),
                Param("Wr", (d_in, d_out), "weight", "linear", stream=1, pyg=self.wr_pyg,
                      transform="T"),
                *(bias if plan.bias else [])]


#: PyG's ``aggr`` for each aggregation a root-weight convolution sums over
_PYG_AGGR = {"mean": "mean", "sum": "add"}


def root_weight_kind(name: str, aggregation: str, pyg_class: str,
                     description: str) -> ModelKind:
    """The model kind of one `RootWeightConv` stage per layer, operator ``name``, over
    ``aggregation`` ("mean" or "sum"): PyG's ``pyg_class`` with the matching ``aggr``."""
    aggr = _PYG_AGGR[aggregation]
    return ModelKind(name, (name,), aggregation, pyg_class, ("convs.{l}.",), description,
                     pyg_kwargs=lambda cfg, layer, d_in, d_out: {"aggr": aggr})


__all__ = ["ConvOperator", "MASTER_BYTES", "RootWeightConv", "root_weight_kind"]
