"""GraphSAGE (PyG's SAGEConv, mean aggregation): H' = mean_{j→i} H_j·W + H_i·Wr + b."""

from __future__ import annotations

from .base import ModelKind
from .conv import RootWeightConv


class SAGE(RootWeightConv):
    name = "sage"
    w_pyg, wr_pyg, bias_pyg = "lin_l.weight", "lin_r.weight", "lin_l.bias"


KIND = ModelKind("sage", ("sage",), "mean", "SAGEConv", ("convs.{l}.",),
                 "SAGEConv(aggr='mean'): mean over in-neighbours plus a root weight",
                 pyg_kwargs=lambda cfg, layer, d_in, d_out: {"aggr": "mean"})
