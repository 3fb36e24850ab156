"""GraphConv (PyG's GraphConv, Morris et al., aggr "add"): H'_i = W1·H_i + W2·Σ_{j→i} H_j + b.

The kind's spec: a convolution with a root weight over the sum aggregation (M, no self loops:
"sum"), so its collectives, flops and memory are `RootWeightConv`'s, as SAGE's over the mean (its
torch code, the toolkit's ``g.conv``, and serial reference: `plexus.engine.kinds.graphconv`);
its PyG names and layer are below.
"""

from __future__ import annotations

from .conv import RootWeightConv, root_weight_kind


class GraphConv(RootWeightConv):
    name = "graphconv"
    w_pyg, wr_pyg, bias_pyg = "lin_rel.weight", "lin_root.weight", "lin_rel.bias"


KIND = root_weight_kind("graphconv", "sum", "GraphConv",
                        "GraphConv(aggr='add'): sum over in-neighbours plus a root weight")
