"""The graph convolution's torch code (its spec: `plexus_partition.model.ops.conv`): the
toolkit's ``g.conv`` with the spec's root term, and the serial reference of a convolution with
a root weight (SAGE, GraphConv)."""

from __future__ import annotations

from .base import KindLayer


class ConvLayer(KindLayer):
    """A graph convolution stage (`plexus_partition.model.ops.conv.ConvOperator`)."""

    def stage(self, g, H, step):
        """The toolkit's graph convolution with this operator's root term (``g.conv``)."""
        return g.conv(H, step, self.spec.root(g.plan), Wr=g.param("Wr"), eps=g.param("eps"))


class RootWeightLayer(ConvLayer):
    """A convolution with a root weight: H' = (M·H)·W + H·Wr
    (`plexus_partition.model.ops.conv.RootWeightConv`)."""

    def serial(self, m, p, H, step):
        """(M·H)·W + H·Wr, in the configured order (for like rounding)."""
        W = m.param("W", p.index)
        OUT = (m.adj @ H) @ W if p.order == "agg" else m.adj @ (H @ W)
        return OUT + H @ m.param("Wr", p.index)
