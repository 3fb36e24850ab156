"""GCNII's stage's torch code (its spec and the grid algorithm: `plexus_partition.model.ops.gcn2`;
the Linear maps around it are dense stages, `plexus.engine.kinds.dense`)."""

from __future__ import annotations

import math

import torch

from .base import KindLayer


class GCN2(KindLayer):
    name = "gcnii"

    def beta(self, cfg, layer: int) -> float:
        """The identity map's β of GNN layer ``layer``: log(θ/ℓ + 1)."""
        return math.log(cfg.options.theta / layer + 1)

    def stage(self, g, H, step):
        """Aggregate first: (1-α)·Â·dropout(H) + α·S·H⁰ in Â's rows, times (1-β)·I + β·W (or
        the two terms times their own weights); H⁰ handed on in the output's layout where the
        next stage reads it."""
        p, c, cfg = g.plan, g.comm, g.model
        alpha, beta = cfg.options.alpha, self.beta(cfg, p.layer)
        [k] = self.spec.reads(p)
        with c.labelled(backward="AR(dH⁰)"):
            x0 = c.all_reduce_grad(g.outputs[k], p.depth)    # bwd: AR(dH⁰) over d, as H's
        with c.labelled("AR(AGG)", "AR(dAGG)"):
            h = (1 - alpha) * g.aggregate(g.dropout(H, g.stage_rate(), step))  # AR over o
        with c.labelled("AR(S·H⁰)", "AR(dS·H⁰)"):
            rows0 = g.to_rows(x0)                            # AR(S·H⁰) over o; bwd: AR over o
        identity = 1 - beta
        if self.spec.shared(p):                              # AG(W) over d, AR(OUT) over i
            out = g.linear(h + alpha * rows0, g.param("W") * beta, identity)
        else:
            out = (g.linear(h, g.param("W") * beta, identity)
                   + g.linear(alpha * rows0, g.param("Wh") * beta, identity))
        if self.spec.carries(p):
            g.carried[k] = g.linear(rows0, None, identity=1.0)  # S·H⁰·I: AR over i
        return out

    def serial(self, m, p, H, step):
        """((1-α)·Â·H + α·H⁰)·((1-β)·I + β·W) on the whole graph, H⁰ the serial model's."""
        alpha, beta = m.cfg.options.alpha, self.beta(m.cfg, p.layer)
        [k] = self.spec.reads(p)
        h, h0 = (1 - alpha) * (m.adj @ H), alpha * m.outputs[k]
        W = m.param("W", p.index)
        eye = (1 - beta) * torch.eye(*W.shape, dtype=W.dtype)
        if self.spec.shared(p):
            return (h + h0) @ (beta * W + eye)
        return h @ (beta * W + eye) + h0 @ (beta * m.param("Wh", p.index) + eye)

