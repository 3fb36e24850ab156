"""GATv2 (Brody et al. 2022; PyG's GATv2Conv, self loops added, ``share_weights`` off,
``heads`` heads concatenated or averaged), per head h with Zl = H·Wl + bl, Zr = H·Wr + br:

    e_ij = a^h · LeakyReLU(Zr_i^h + Zl_j^h),  α_ij = softmax_j over i's in-edges of e_ij,
    H'_i^h = Σ_j α_ij·Zl_j^h (+ b after concatenating or averaging).

The nonlinearity sits inside the sum over a head's columns, so the score has no node-score
decomposition (GAT's a_dst·Z_i + a_src·Z_j): per edge it needs whole rows of Zl and Zr. On the
grid (combine first, roles (o, i, d); torch code: `plexus.engine.kinds.gatv2`) Zl and Zr are
rows-by-o, columns-by-d like GAT's Z; Zr moves to Â's rows (S·Zr, AR over o) and both are
gathered over d (AG, n = N·Di/|o| and N·Di/|i|), as is a: every rank of d scores its block's
edges over all the columns, the same scores on each (the work per edge is repeated |d| times,
the traffic node-sized: no per-edge tensor crosses the grid, so the schedule does not move with
the graph's degree). The softmax's statistics are GAT's (AR-MAX, AR-SUM over o), the α-weighted
aggregation of Zl's own columns too; in backward the gathers' reduce-scatters over d sum the
score gradients, partial over d's columns of dα.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from . import gat
from .base import (EDGE_PASS_BYTES, Flops, Param, StageMemory, StageSizes, param_memory,
                   stage_option)
from .gat import GAT, STAT_BYTES, heads_of


@dataclass(frozen=True)
class StageOptions:
    """A GATv2 stage's: GAT's, and whether Wl and Wr have biases (the config's ``bias``: they
    stay with BatchNorm, which only replaces the output's)."""

    heads: int = 1
    concat: bool = True
    attn_dropout: float = 0.0
    lin_bias: bool = True


def _stage_options(cfg, layer: int, pos: int, d_in: int, d_out: int) -> StageOptions:
    heads = heads_of(cfg, layer)
    return StageOptions(heads, layer < cfg.num_layers - 1 or heads == 1,
                        cfg.options.attn_dropout, cfg.bias)


class GATv2(GAT):
    name = "gatv2"

    def lin_bias(self, plan) -> bool:
        return stage_option(plan, "lin_bias", True)

    def params(self, plan, d_in, d_out):
        inner = self.inner_width(plan, d_out)
        att = dict(layout="inner", init="glorot_heads", transform="heads", heads=self.heads(plan))
        out = [Param("W", (d_in, inner), "weight", "glorot", stream=0, pyg="lin_l.weight",
                     transform="T"),
               Param("Wr", (d_in, inner), "weight", "glorot", stream=0, pyg="lin_r.weight",
                     transform="T"),
               Param("att", (inner,), pyg="att", **att)]
        if self.lin_bias(plan):
            out += [Param("bl", (inner,), "inner", "zeros", pyg="lin_l.bias"),
                    Param("br", (inner,), "inner", "zeros", pyg="lin_r.bias")]
        return out + self.bias_param(plan, d_out)

    def flops(self, z: StageSizes) -> Flops:
        """GAT's two GEMMs twice (Zl and Zr), its α-weighted SpMM, transpose and SDDMM; per edge
        and column of the whole inner width the score's sum, LeakyReLU and product with a,
        forward and backward (~8 flops), besides GAT's per-edge softmax."""
        n, H, nnz = z.n, self.heads(z.plan), z.nnz_block
        width = z.Di / z.d
        gemm = 2 * 2.0 * (n / z.o) * (z.D / z.i) * width * (3 if z.needs_dh else 2)
        other = 24 * nnz * H + 8 * nnz * z.Di
        return Flops.products([(nnz, width)] * 3, gemm, other)

    def memory(self, z: StageSizes) -> StageMemory:
        """GAT's, with Wr, Zr and the gathered Zl, Zr (whole inner width) besides, and the
        score's per-edge, per-column tensors (float32: the gathered rows' sum, LeakyReLU's output
        and its product with a; autograd keeps the first two for backward)."""
        base = super().memory(z)
        fb, E, Di = z.dtype_bytes, z.nnz_block, z.Di
        zz = z.n / z.o * Di / z.d
        full = (z.n / z.o + z.n / z.i) * Di  # the gathered Zl and Zr
        per_edge = E * Di * STAT_BYTES
        w_blk, flat = z.D / z.i * Di / z.d, z.size(z.plan.w_flat)
        extra_w, extra_opt = param_memory(z, w_blk / flat, w_blk if flat > 1 else 0.0,
                                          2 * Di / z.d if self.lin_bias(z.plan) else 0.0)
        kept = base.kept + zz * fb + (full * fb + 2 * per_edge if z.needs_dh else 2 * per_edge)
        bump = zz * fb + full * fb + 3 * per_edge + E * EDGE_PASS_BYTES
        return StageMemory(kept, [f + bump for f in base.forward],
                           [(k + kept - base.kept, t + bump) for k, t in base.backward],
                           base.out, base.weights + extra_w, base.optimizer + extra_opt,
                           base.resident)


KIND = dataclasses.replace(
    gat.KIND, name="gatv2", stage_ops=("gatv2",), pyg_class="GATv2Conv",
    description="GATv2Conv: attention a·LeakyReLU(Wr·x_i + Wl·x_j) over in-neighbours and "
                "the node itself, heads as GAT's (--heads, --out-heads)",
    stage_options=_stage_options,
    pyg_kwargs=lambda cfg, layer, d_in, d_out: {**gat.pyg_kwargs(cfg, layer, d_in, d_out),
                                                "share_weights": False})
