"""APPNP's propagating stage's torch code (its spec and the grid algorithm:
`plexus_partition.model.ops.appnp`; the MLP's layers before it are dense stages,
`plexus.engine.kinds.dense`)."""

from __future__ import annotations

from .base import KindLayer


class APPNP(KindLayer):
    name = "appnp"

    def stage(self, g, H, step):
        """Z⁰ = dropout(H)·W + b (combine first: rows by o, columns by d), then K hops
        Z ← (1-α)·Â·Z + α·Z⁰ in Â's rows, each but the last moved back to Z's rows."""
        p, c = g.plan, g.comm
        K, alpha = self.spec.hops(p), p.options.teleport
        Z = g.linear(g.dropout(H, g.stage_rate(), step), g.param("W"))  # AG(W) over o, AR(Z)
        b = g.param("b")                                     # over i; bwd: AR(dZ), RS(dW)
        if b is not None:  # Z is replicated over i, its rows cut by o: db summed over both
            b = g.replicate(g.replicate(b.to(Z.dtype), p.outer, "AR(db)"), p.inner, "AR(db)")
            Z = Z + b
        with c.labelled("AR(S·Z⁰)"):
            teleported = alpha * g.to_rows(Z)                # AR(S·Z⁰) over o
        z = Z
        for k in range(K):
            with c.labelled("AR(Â·Z)"):
                rows = (1 - alpha) * g.aggregate(z) + teleported  # AR(Â·Z) over o
            if k < K - 1:
                with c.labelled("AR(Sᵀ·Z)", "AR(dZ)"):
                    z = g.to_nodes(rows)                     # AR(Sᵀ·Z) over i; bwd: AR over o, i
        return rows

    def serial(self, m, p, H, step):
        """H·W + b, then K hops of (1-α)·Â·Z + α·Z⁰ on the whole graph."""
        K, alpha = self.spec.hops(p), p.options.teleport
        Z0 = H @ m.param("W", p.index)
        b = m.param("b", p.index)
        if b is not None:
            Z0 = Z0 + b
        teleported, z = alpha * Z0, Z0
        for _ in range(K):
            z = (1 - alpha) * (m.adj @ z) + teleported
        return z
