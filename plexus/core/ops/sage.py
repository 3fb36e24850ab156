"""GraphSAGE (PyG's SAGEConv, mean aggregation): H' = mean_{j→i} H_j·W + H_i·Wr + b."""

from __future__ import annotations

from .base import ModelKind, Param
from .conv import ConvOperator


class SAGE(ConvOperator):
    name = "sage"
    bias_pyg = "lin_l.bias"

    def root(self, plan) -> str:
        return "sage"

    def params(self, plan, d_in, d_out):
        return [Param("W", (d_in, d_out), "weight", "glorot", stream=0, pyg="lin_l.weight",
                      transform="T"),
                Param("Wr", (d_in, d_out), "weight", "glorot", stream=1, pyg="lin_r.weight",
                      transform="T"),
                *self.bias_param(plan, d_out)]

    def serial(self, m, p, H, step):
        """(M_mean·H)·W + H·Wr, in the configured order."""
        W = m.param("W", p.index)
        OUT = (m.adj @ H) @ W if p.order == "agg" else m.adj @ (H @ W)
        return OUT + H @ m.param("Wr", p.index)


KIND = ModelKind("sage", ("sage",), "mean", "SAGEConv", ("convs.{l}.",),
                 "SAGEConv(aggr='mean'): mean over in-neighbours plus a root weight",
                 pyg_kwargs=lambda cfg, layer, d_in, d_out: {"aggr": "mean"})
