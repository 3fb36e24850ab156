"""GraphConv's torch code (its spec: `plexus_partition.model.ops.graphconv`): a convolution with
a root weight over the sum."""

from __future__ import annotations

from .conv import RootWeightLayer


class GraphConv(RootWeightLayer):
    name = "graphconv"
