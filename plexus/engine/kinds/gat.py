"""GAT's torch code (its spec and the grid algorithm: `plexus_partition.model.ops.gat`)."""

from __future__ import annotations

from .base import KindLayer


class GAT(KindLayer):
    name = "gat"

    def stage(self, g, H, step):
        """Combine-first: Z = H·W, the node scores per head, α by the edge softmax across the
        grid, the α-weighted aggregation per head, concatenated or averaged; the scores and
        statistics float32."""
        p, heads, cfg = g.plan, self.spec.heads(g.plan), g.model
        step = step or 0
        # each head's columns: the real per-head width when concatenated (padding at the end),
        # a padded output width when averaged (one block per head)
        width = g.real[1] // heads if self.spec.concat(p) else g.d_out
        H = g.dropout(H, g.stage_rate(), step)
        Z = g.linear(H, g.param("W"))                 # AG(W) over o, AR(Z) over i; bwd: AR(dZ)
        with g.comm.exact():  # float32 scores and statistics whatever the wire precision
            s = g.head_sums(Z, [g.param("att_src"), g.param("att_dst")], heads, width)  # AR(s)
            with g.comm.labelled("AR(s→rows)"):
                s_src, s_dst = s[:, :heads], g.to_rows(s[:, heads:])  # AR(S·s) over o: Â's rows
            alpha = g.attention(s_dst, s_src, cfg.options.negative_slope)  # AR-MAX, AR-SUM over o
        return aggregate_heads(g, alpha, Z, heads, width, step, self.spec.concat(p))

    def serial(self, m, p, H, step):
        """Written from GATConv's definition on the whole graph: scores per head, softmax over
        each node's in-edges (Â's structure: M with one self loop per node), attention dropout
        with the engine's masks, messages α·Z_j summed per destination (an edge × head ×
        feature tensor: fine for the reference's small graphs)."""
        s, heads = p.index, self.spec.heads(p)
        Z = H @ m.param("W", s)
        n, width = Z.shape[0], Z.shape[1] // heads
        Zh = Z.view(n, heads, width)
        s_src = (Zh * m.param("att_src", s).view(heads, width)).sum(-1)
        s_dst = (Zh * m.param("att_dst", s).view(heads, width)).sum(-1)
        dst, src = m.adj.indices()
        raw = s_dst[dst] + s_src[src]
        slope = m.cfg.options.negative_slope
        e = raw.clamp_min(0) + slope * raw.clamp_max(0)  # LeakyReLU, (edges, heads)
        return attend(m, p, e, Zh, step, self.spec.concat(p))


def aggregate_heads(g, alpha, Z, heads: int, width: int, step: int, concat: bool):
    """The grid's α-weighted aggregation of ``Z`` per head, attention dropout on the training
    step, the heads concatenated (``concat``: AR(OUT) over o) or averaged (RS(OUT) over d, AR(OUT)
    over o). GAT's and GATv2's (`attend` is its serial twin)."""
    drop = g.model.options.attn_dropout if g.training else 0.0
    if concat:
        return g.aggregate_weighted(alpha, Z, heads, width, drop, step)
    part = g.aggregate_weighted(alpha, Z, heads, width, drop, step, reduce=False)
    return g.average_heads(part, heads, width)


def attend(m, p, e, Zh, step, concat: bool):
    """The serial attention of per-edge scores ``e`` (edges of ``m.adj``, heads) on node
    messages ``Zh`` (nodes, heads, width): the softmax over each node's in-edges, attention
    dropout with the engine's masks, α·Zh_j summed per destination, the heads concatenated
    (``concat``) or averaged. GAT's and GATv2's."""
    (n, heads, width), (dst, src) = Zh.shape, m.adj.indices()
    top = e.new_full((n, heads), float("-inf")).scatter_reduce(
        0, dst[:, None].expand(-1, heads), e, "amax")
    w = (e - top[dst]).exp()
    alpha = w / w.new_zeros(n, heads).index_add(0, dst, w)[dst]
    rate = m.cfg.options.attn_dropout
    if m.training and rate > 0:
        alpha = alpha * m.edge_keep(step or 0, p.layer, heads, dst, src, rate) / (1 - rate)
    out = Zh.new_zeros(n, heads, width).index_add(0, dst, alpha[:, :, None] * Zh[src])
    return out.reshape(n, heads * width) if concat else out.mean(1)
