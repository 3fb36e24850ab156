"""GIN's convolution stage's torch code (its spec: `plexus_partition.model.ops.gin`; the MLP's
second map is a dense stage, `plexus.engine.kinds.dense`)."""

from __future__ import annotations

from .conv import ConvLayer


class GIN(ConvLayer):
    name = "gin"

    def serial(self, m, p, H, step):
        """(M·X + (1+ε)·X) with X = H (aggregate first, then ·W) or X = H·W (combine first)."""
        W, eps = m.param("W", p.index), m.param("eps", p.index)
        X = H if p.order == "agg" else H @ W
        AGG = m.adj @ X + (1 + (eps if eps is not None else 0.0)) * X
        return AGG @ W if p.order == "agg" else AGG
