"""GraphConv (PyG's GraphConv, Morris et al., aggr "add"): H'_i = W1·H_i + W2·Σ_{j→i} H_j + b.

The whole kind in one file: a graph convolution with a root weight over the sum aggregation
(M, no self loops: "sum"), so its collectives, flops and memory are `ConvOperator`'s with the
H·Wr root term (SAGE's over the mean); its torch code is the toolkit's ``g.conv`` with that root
term (inherited); its serial reference and PyG names are below.
"""

from __future__ import annotations

from .base import ModelKind, Param
from .conv import ConvOperator


class GraphConv(ConvOperator):
    name = "graphconv"
    bias_pyg = "lin_rel.bias"

    def root(self, plan) -> str:
        return "sage"  # H·Wr beside the aggregation, one GEMM with [W; Wr]

    def params(self, plan, d_in, d_out):
        return [Param("W", (d_in, d_out), "weight", "glorot", stream=0, pyg="lin_rel.weight",
                      transform="T"),
                Param("Wr", (d_in, d_out), "weight", "glorot", stream=1, pyg="lin_root.weight",
                      transform="T"),
                *self.bias_param(plan, d_out)]

    def serial(self, m, p, H, step):
        """(M·H)·W + H·Wr, in the configured order."""
        W = m.param("W", p.index)
        OUT = (m.adj @ H) @ W if p.order == "agg" else m.adj @ (H @ W)
        return OUT + H @ m.param("Wr", p.index)


KIND = ModelKind("graphconv", ("graphconv",), "sum", "GraphConv", ("convs.{l}.",),
                 "GraphConv(aggr='add'): sum over in-neighbours plus a root weight",
                 pyg_kwargs=lambda cfg, layer, d_in, d_out: {"aggr": "add"})
