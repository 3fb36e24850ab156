"""GCN (PyG's GCNConv): H' = Â·H·W + b, Â = D^-1/2 (M + I) D^-1/2; optionally + H (residual)."""

from __future__ import annotations

from .base import ModelKind, Param
from .conv import ConvOperator


class GCN(ConvOperator):
    name = "gcn"
    bias_pyg = "bias"

    def root(self, plan) -> str:
        return "res" if plan.residual else "none"

    def params(self, plan, d_in, d_out):
        return [Param("W", (d_in, d_out), "weight", "glorot", stream=0, pyg="lin.weight",
                      transform="T"), *self.bias_param(plan, d_out)]

    def serial(self, m, p, H, step):
        """Â·H·W (+ H) in the configured order (for like rounding)."""
        W = m.param("W", p.index)
        OUT = (m.adj @ H) @ W if p.order == "agg" else m.adj @ (H @ W)
        return OUT + H if p.residual else OUT


KIND = ModelKind("gcn", ("gcn",), "gcn", "GCNConv", ("convs.{l}.",),
                 "GCNConv: symmetric-normalized sum over in-neighbours and the node itself",
                 options=("residual",), takes_edge_weights=True)
