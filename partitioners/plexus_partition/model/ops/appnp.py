"""APPNP (Klicpera et al. 2019; PyG's ``APPNP(K, alpha)`` after an MLP, its
examples/citation/appnp.py): the model's layers are Linear maps (dense stages, an activation
between them), the last followed by K hops of personalized PageRank:

    Z⁰ = H·W + b,   Zᵏ⁺¹ = (1-α)·Â·Zᵏ + α·Z⁰,   out = Zᴷ,   Â = D̂^-½(A+I)D̂^-½ (GCN's).

The last layer is one stage, combine first (its torch code: `plexus.engine.kinds.appnp`):
Z = dropout(H)·W, AG(W) over o and AR(Z) over i as a dense stage; b added to Z before the
propagation (it does not commute with Â: ``own_bias``), its gradient summed over o and i;
α·S·Z⁰ moves Z⁰ to Â's rows (AR over o); each hop is one SpMM of Â's block, AR(Â·Z) over o, and
(all but the last) Sᵀ back to Z's rows, AR over i. No per-edge tensor, no parameter in the hops.
"""

from __future__ import annotations

from dataclasses import dataclass

from .base import (Flops, KindSpec, ModelKind, Param, StageMemory, StageSizes, dropout_work,
                   option, param_memory, stage_option)
from .dense import pyg_linear


@dataclass(frozen=True)
class Options:
    """APPNP's options (`plexus_partition.model.model.ModelConfig` fields, flags of the tools)."""

    hops: int = option(10, "APPNP: propagation steps K after the MLP (default {default})",
                       metavar="K", check="count")
    teleport: float = option(0.1, "APPNP: teleport probability alpha towards the MLP's output "
                                  "(default {default})", metavar="A", check="rate")


@dataclass(frozen=True)
class StageOptions:
    """The propagating stage's: its hops and teleport probability."""

    hops: int = 10
    teleport: float = 0.1


class APPNP(KindSpec):
    name = "appnp"
    own_bias = True  # b is added before the propagation

    def stage_order(self, conv_order: str) -> str:
        return "combine"  # the propagation runs on H·W + b

    def uses_plain_block(self, plan) -> bool:
        return True

    def hops(self, plan) -> int:
        return stage_option(plan, "hops", 10)

    def params(self, plan, d_in, d_out):
        return [Param("W", (d_in, d_out), "weight", "glorot", stream=0, pyg="weight",
                      transform="T"), *self.bias_param(plan, d_out)]

    def flops(self, z: StageSizes) -> Flops:
        """The GEMM H·W (forward, dW, dH); per hop one SpMM of Â's block forward and one
        backward, S's and Sᵀ's products (one row each) and the hop's scaling and sum."""
        K, cols = self.hops(z.plan), z.D2 / z.d
        gemm = 2.0 * (z.n / z.o) * (z.D / z.i) * cols * (3 if z.needs_dh else 2)
        s_nnz = z.n / (z.i * z.o)
        passes = [(z.nnz_block, cols)] * (2 * K) + [(s_nnz, cols)] * (2 * K)
        return Flops.products(passes, gemm, 6.0 * K * z.n / z.i * cols)

    def memory(self, z: StageSizes) -> StageMemory:
        """The GEMM keeps its dropped input (dW) and the gathered W (dH); the hops keep nothing
        (Â, S and the scalars are constants). Forward: Z with its all-reduced copy, then per hop
        α·Z⁰, Â·Z with its all-reduced copy, the sum and Z's rows; backward their gradients.
        Resident: S and Sᵀ (one non-zero per row)."""
        p, fb, n = z.plan, z.dtype_bytes, z.n
        h_in, zz, out = z.h_in, n / z.o * z.D2 / z.d, n / z.i * z.D2 / z.d
        drop = h_in if z.drops_input else 0.0
        w_blk, flat = z.D / z.i * z.D2 / z.d, z.size(p.w_flat)
        gathered = w_blk if flat > 1 else 0.0
        weights, optimizer = param_memory(z, w_blk / flat, gathered,
                                          z.D2 / z.size(p.out_cols) if p.bias else 0.0)
        kept = (drop if drop else h_in) + (gathered if z.needs_dh else 0.0)
        summed = 2 if z.o > 1 else 1
        forward = [(z.caller_input + drop + zz * (2 if z.i > 1 else 1)) * fb + dropout_work(z),
                   (z.caller_input + drop + 2 * zz + out * (2 + summed)) * fb]
        backward = [(kept * fb, (out * (2 + summed) + 2 * zz) * fb)]
        if z.needs_dh:
            backward.append((0.0, (zz + h_in) * fb + dropout_work(z)))
        s_nnz = n / (z.i * z.o)
        resident = 2 * s_nnz * (fb + z.index_bytes) + (n / z.i + n / z.o + 2) * z.index_bytes
        return StageMemory(kept * fb, forward, backward, out, weights, optimizer, resident)



def _last(cfg, layer: int) -> bool:
    return layer == cfg.num_layers - 1


KIND = ModelKind(
    "appnp", ("appnp",), "gcn", "APPNP", ("convs.{l}.",),
    "APPNP(K, alpha) after an MLP: Linear layers, the last one's output propagated K hops "
    "towards itself (PyG's examples/citation/appnp.py)",
    options=Options,
    layer_ops=lambda cfg, layer: ("appnp",) if _last(cfg, layer) else ("dense",),
    stage_options=lambda cfg, layer, pos, d_in, d_out: StageOptions(
        cfg.options.hops, cfg.options.teleport) if _last(cfg, layer) else None,
    summary=lambda cfg: f"K {cfg.options.hops}, alpha {cfg.options.teleport}",
    pyg_layer=lambda cfg, layer, d_in, d_out: {
        "conv": pyg_linear(d_in, d_out, cfg.bias),
        "propagate": {"class": "APPNP", "K": cfg.options.hops, "alpha": cfg.options.teleport}
        if _last(cfg, layer) else None})
