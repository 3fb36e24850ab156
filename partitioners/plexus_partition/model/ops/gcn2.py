"""GCNII (Chen et al. 2020; PyG's ``GCN2Conv`` in its examples/gcn2_cora.py): a Linear map and
its activation give H⁰, then GCNII layers ℓ = 1 .. L-2, then a Linear map to the classes:

    H' = ((1-α)·Â·H + α·H⁰)·((1-β)·I + β·W),   β = log(θ/ℓ + 1),   Â = D̂^-½(A+I)D̂^-½

(``shared_weights`` off: ((1-α)·Â·H)·((1-β)·I + β·W) + (α·H⁰)·((1-β)·I + β·W₂)); no bias.

A GCNII stage aggregates first and reads an earlier output, H⁰ (stage 0's, `KindSpec.reads`),
handed to it in its input's layout: rows by o, columns by i, replicated over d, like H. Its
torch code (`plexus.engine.kinds.gcn2`): AR(dH⁰) over d in backward, as for H; AR(Â·H) over o;
S·H⁰ to Â's rows (AR over o); the identity-mapped product, AG(W) over d and AR(OUT) over i; and
where the next stage reads H⁰ too (`carries`), H⁰ in the output's layout, S·H⁰·I: AR over i.
"""

from __future__ import annotations

from dataclasses import dataclass

from .base import (Flops, KindSpec, ModelKind, Param, StageMemory, StageSizes, dropout_work,
                   option, param_memory, stage_option)
from .dense import pyg_linear


@dataclass(frozen=True)
class Options:
    """GCNII's options (`plexus_partition.model.model.ModelConfig` fields, flags of the tools)."""

    alpha: float = option(0.1, "GCNII: the initial residual's weight alpha (default "
                               "{default})", metavar="A", check="rate")
    theta: float = option(0.5, "GCNII: theta of the identity map's beta = log(theta/l + 1) "
                               "(default {default})", metavar="T", check="finite")
    shared_weights: bool = option(True, "GCNII: one weight for Â·H and H⁰ (default on; off: "
                                        "a second weight for H⁰)", negatable=True)


@dataclass(frozen=True)
class StageOptions:
    """A GCNII stage's: the output it reads (H⁰: stage 0's), whether it hands H⁰ on to the
    next stage, whether H⁰ shares the weight."""

    reads: tuple[int, ...] = (0,)
    carries: bool = False
    shared_weights: bool = True


class GCN2(KindSpec):
    name = "gcnii"
    has_bias = False  # GCN2Conv has none

    def stage_order(self, conv_order: str) -> str:
        return "agg"  # propagate, then the identity-mapped weight

    def uses_plain_block(self, plan) -> bool:
        return True

    def shared(self, plan) -> bool:
        return stage_option(plan, "shared_weights", True)

    def params(self, plan, d_in, d_out):
        out = [Param("W", (d_in, d_out), "weight", "glorot", stream=0, pyg="weight1")]
        if not self.shared(plan):
            out.append(Param("Wh", (d_in, d_out), "weight", "glorot", stream=0, pyg="weight2"))
        return out

    def flops(self, z: StageSizes) -> Flops:
        """Â·H and S·H⁰ (forward, and backward where H learns), the identity-mapped GEMM (two
        without shared weights; forward, dW, dH) and, carrying H⁰, S·H⁰·I."""
        p, cols = z.plan, z.D / z.i
        gemm_one = 2.0 * (z.n / z.d) * cols * (z.D2 / z.o)
        gemms = (1 if self.shared(p) else 2) * 3 + (2 if self.carries(p) else 0)
        s_nnz = z.n / (z.size(p.a_rows) * z.size(p.a_cols))
        passes = [(z.nnz_block, cols)] * (2 if z.needs_dh else 1) + [(s_nnz, cols)] * 2
        return Flops.products(passes, gemm_one * gemms, 4.0 * z.n / z.d * cols)

    def memory(self, z: StageSizes) -> StageMemory:
        """H⁰ and H (the caller's); forward Â·H with its all-reduced copy, S·H⁰, the scaled
        sum, the output with its all-reduced copy and the carried H⁰; kept for backward the
        sum (dW; both terms without shared weights) and the gathered W (dH)."""
        p, fb, n = z.plan, z.dtype_bytes, z.n
        h_in, inter, out = z.h_in, n / z.d * z.D / z.i, n / z.d * z.D2 / z.o
        k = 1 if self.shared(p) else 2
        w_blk, flat = z.D / z.i * z.D2 / z.o, z.size(p.w_flat)
        gathered = k * w_blk if flat > 1 else 0.0
        weights, optimizer = param_memory(z, k * w_blk / flat, gathered)
        drop = h_in if z.drops_input else 0.0
        kept = k * inter + (gathered if z.needs_dh else 0.0)
        summed = 2 if z.o > 1 else 1
        carried = out if self.carries(p) else 0.0
        caller = z.caller_input + h_in  # H and H⁰
        forward = [(caller + drop + inter * (summed + 1)) * fb + dropout_work(z),
                   (caller + 3 * inter + out * (2 if z.i > 1 else 1) + carried) * fb]
        backward = [(kept * fb, (out + 3 * inter) * fb),
                    (0.0, (2 * inter * summed + 2 * h_in) * fb + dropout_work(z))]
        s_nnz = n / (z.size(p.a_rows) * z.size(p.a_cols))
        resident = s_nnz * (fb + z.index_bytes) + (n / z.size(p.a_rows) + 1) * z.index_bytes
        return StageMemory(kept * fb, forward, backward, out, weights, optimizer, resident)


def _conv(cfg, layer: int) -> bool:
    return 0 < layer < cfg.num_layers - 1



KIND = ModelKind(
    "gcnii", ("gcnii",), "gcn", "GCN2Conv", ("convs.{l}.",),
    "GCN2Conv (GCNII) between two Linear maps: --layers counts them too (L-2 GCNII layers), "
    "each reading the first map's output H⁰ (PyG's examples/gcn2_cora.py)",
    options=Options,
    layer_ops=lambda cfg, layer: ("gcnii",) if _conv(cfg, layer) else ("dense",),
    stage_options=lambda cfg, layer, pos, d_in, d_out: StageOptions(
        (0,), layer < cfg.num_layers - 2, cfg.options.shared_weights)
    if _conv(cfg, layer) else None,
    summary=lambda cfg: (f"alpha {cfg.options.alpha}, theta {cfg.options.theta}"
                         + ("" if cfg.options.shared_weights else ", two weights")),
    pyg_layer=lambda cfg, layer, d_in, d_out: {
        "conv": {"class": "GCN2Conv", "channels": d_in, "alpha": cfg.options.alpha,
                 "theta": cfg.options.theta, "layer": layer,
                 "shared_weights": cfg.options.shared_weights},
        "initial": 0} if _conv(cfg, layer) else {"conv": pyg_linear(d_in, d_out, cfg.bias)})
