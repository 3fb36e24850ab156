"""A dense stage's torch code (its spec: `plexus_partition.model.ops.dense`): OUT = H·W + b."""

from __future__ import annotations

from .base import KindLayer


class Dense(KindLayer):
    name = "dense"

    def stage(self, g, H, step):
        """OUT = dropout(H)·W: AG(W) over o, AR(OUT) over i; the rows never move."""
        return g.linear(g.dropout(H, g.stage_rate(), step), g.param("W"))

    def serial(self, m, p, H, step):
        """H·W."""
        return H @ m.param("W", p.index)
