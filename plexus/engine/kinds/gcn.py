"""GCN's torch code (its spec: `plexus_partition.model.ops.gcn`)."""

from __future__ import annotations

from .conv import ConvLayer


class GCN(ConvLayer):
    name = "gcn"

    def serial(self, m, p, H, step):
        """Â·H·W (+ H) in the configured order (for like rounding)."""
        W = m.param("W", p.index)
        OUT = (m.adj @ H) @ W if p.order == "agg" else m.adj @ (H @ W)
        return OUT + H if self.spec.adds_input(p) else OUT
