"""A dense stage OUT = H·W + b (no aggregation): the MLP's layers and GIN's second linear map.

H is rows-by-o, columns-by-i, replicated over d; W rows-by-i, columns-by-d (stored cut over o
as well, gathered before use); H·W is a partial sum over i, so AR(OUT) over i gives OUT
rows-by-o, columns-by-d, replicated over i: the rows never move.
"""

from __future__ import annotations

from .base import (Flops, KindSpec, ModelKind, Param, StageMemory, StageSizes,
                   dropout_work, param_memory)


class Dense(KindSpec):
    name = "dense"
    graph = False
    bias_pyg = "bias"

    def stage_order(self, conv_order: str) -> str:
        return "dense"

    def params(self, plan, d_in, d_out):
        return [Param("W", (d_in, d_out), "weight", "glorot", stream=0, pyg="weight",
                      transform="T"), *self.bias_param(plan, d_out)]

    def flops(self, z: StageSizes) -> Flops:
        mm_one = 2.0 * (z.n / z.o) * (z.D / z.i) * (z.D2 / z.d)
        return Flops(0.0, mm_one * (3 if z.needs_dh else 2))

    def memory(self, z: StageSizes) -> StageMemory:
        """The GEMM keeps its (dropped) input for dW and W for dH; AR(OUT) sums a copy."""
        p, fb, n = z.plan, z.dtype_bytes, z.n
        h_in, out = z.h_in, n / z.o * z.D2 / z.d
        drop = h_in if z.drops_input else 0.0
        caller = z.caller_input  # stage 0 reads the stored or kept features
        w_blk, flat = z.D / z.i * z.D2 / z.d, z.size(p.w_flat)
        gathered = w_blk if flat > 1 else 0.0
        weights, optimizer = param_memory(z, w_blk / flat, gathered,
                                          z.D2 / z.size(p.out_cols) if p.bias else 0.0)
        kept = (drop if drop else h_in) + (gathered if z.needs_dh else 0.0)
        out_all = out * (2 if z.i > 1 else 1)
        backward = [(kept * fb, out * fb)]
        if z.needs_dh:
            backward.append((0.0, (out + h_in) * fb + dropout_work(z)))
        return StageMemory(kept * fb, [(caller + drop + out_all) * fb + dropout_work(z)],
                           backward, out, weights, optimizer)


def pyg_linear(d_in: int, d_out: int, bias: bool) -> dict:
    """The PyG description of a Linear map (torch's), as a layer's or an MLP's module."""
    return {"class": "Linear", "in_features": d_in, "out_features": d_out, "bias": bias}


KIND = ModelKind("mlp", ("dense",), "gcn", "Linear", ("convs.{l}.",),
                 "an MLP: Linear layers, no graph", takes_edge_weights=True)
