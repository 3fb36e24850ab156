"""GraphSAGE's torch code (its spec: `plexus_partition.model.ops.sage`): a convolution with a
root weight over the mean."""

from __future__ import annotations

from .conv import RootWeightLayer


class SAGE(RootWeightLayer):
    name = "sage"
