"""GATv2's torch code (its spec and the grid algorithm: `plexus_partition.model.ops.gatv2`)."""

from __future__ import annotations

import torch.nn.functional as F

from ..edges import head_matrix
from .base import KindLayer
from .gat import aggregate_heads, attend


class GATv2(KindLayer):
    name = "gatv2"

    def stage(self, g, H, step):
        """Combine first: Zl, Zr as GAT's Z (their biases before the scores), Zr in Â's rows,
        both and a gathered over d, each edge's score over the whole inner width (float32),
        α by the edge softmax across the grid, the α-weighted aggregation of Zl's own columns
        per head, concatenated or averaged."""
        p, c, cfg, heads = g.plan, g.comm, g.model, self.spec.heads(g.plan)
        step, o, i, d = step or 0, p.outer, p.inner, p.depth
        width = g.real[1] // heads if self.spec.concat(p) else g.d_out
        H = g.dropout(H, g.stage_rate(), step)
        Zl = g.linear(H, g.param("W"))                # AG(W) over o, AR(Z) over i; bwd: AR(dZ)
        Zr = g.linear(H, g.param("Wr"))
        if g.param("bl") is not None:  # Z is replicated over i, its rows cut by o
            Zl = Zl + g.replicate(g.replicate(g.param("bl").to(Zl.dtype), o, "AR(db)"), i,
                                  "AR(db)")
            Zr = Zr + g.replicate(g.replicate(g.param("br").to(Zr.dtype), o, "AR(db)"), i,
                                  "AR(db)")
        with c.labelled("AR(S·Zr)", "AR(dZr→rows)"):
            rows_r = g.replicate(g.to_rows(Zr), p.a_cols)  # AR over o; bwd: AR over o
        with c.labelled("AG(Z)", "RS(dZ)"):              # the whole inner width, over d
            full_l, full_r = (c.all_gather(X.T, d).T for X in (Zl, rows_r))
        a = g.replicate(g.replicate(g.param("att"), o, "AR(da)"), i, "AR(da)")
        with c.labelled("AG(a)", "RS(da)"):
            a = c.all_gather(a, d)                       # AG(a) over d; bwd: RS(da)
        e = g.edges
        P = g.cached(("P", a.shape[0], width, heads),
                     lambda: head_matrix(0, a.shape[0], width, heads, a.device))
        x = (full_r.float().index_select(0, e.row.long()) +
            full_l.float().index_select(0, e.col.long()))
        scores = (F.leaky_relu(x, cfg.options.negative_slope) * a.float()) @ P
        with c.exact(), c.labelled(backward="AR(Σα·dα)"):  # float32 statistics, whatever
            alpha = g.edge_softmax(scores)               # the wire: AR-MAX, AR-SUM over o
        return aggregate_heads(g, alpha, Zl, heads, width, step, self.spec.concat(p))

    def serial(self, m, p, H, step):
        """Written from GATv2Conv's definition on the whole graph: per edge and head
        a·LeakyReLU(Zr_i + Zl_j), the softmax over each node's in-edges (Â's structure: M
        with one self loop per node), attention dropout with the engine's masks, messages
        α·Zl_j summed per destination."""
        s, heads = p.index, self.spec.heads(p)
        Zl, Zr = H @ m.param("W", s), H @ m.param("Wr", s)
        if m.param("bl", s) is not None:
            Zl, Zr = Zl + m.param("bl", s), Zr + m.param("br", s)
        n, width = Zl.shape[0], Zl.shape[1] // heads
        Zlh, Zrh = Zl.view(n, heads, width), Zr.view(n, heads, width)
        dst, src = m.adj.indices()
        x = F.leaky_relu(Zrh[dst] + Zlh[src], m.cfg.options.negative_slope)
        e = (x * m.param("att", s).view(heads, width)).sum(-1)  # (edges, heads)
        return attend(m, p, e, Zlh, step, self.spec.concat(p))
