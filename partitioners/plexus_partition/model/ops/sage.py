"""GraphSAGE (PyG's SAGEConv, mean aggregation): H' = mean_{j→i} H_j·W + H_i·Wr + b."""

from __future__ import annotations

from .conv import RootWeightConv, root_weight_kind


class SAGE(RootWeightConv):
    name = "sage"
    w_pyg, wr_pyg, bias_pyg = "lin_l.weight", "lin_r.weight", "lin_l.bias"


KIND = root_weight_kind("sage", "mean", "SAGEConv",
                        "SAGEConv(aggr='mean'): mean over in-neighbours plus a root weight")
