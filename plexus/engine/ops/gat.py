"""GAT's stage (`plexus.core.ops.gat` declares its parameters, collectives and costs; see there
for the layout): Z = H·W, node scores, the edge softmax across the grid, the α-weighted
aggregation per head, concatenated or averaged heads, bias."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from plexus.core.ops import OPERATORS

from ..graph3d import StageGraph
from ..masks import edge_keep
from .base import Stage3D, StageInputs


class GATStage(Stage3D):
    """A GAT stage on the grid, written with `plexus.engine.graph3d.StageGraph` (the operations
    users' layers use too): combine-first layout; scores and statistics float32."""

    def __init__(self, inputs: StageInputs) -> None:
        super().__init__(inputs)
        p = self.plan
        cfg = inputs.model
        self.slope, self.attn_p = cfg.negative_slope, cfg.attn_dropout
        width = OPERATORS["gat"].inner_width(p, inputs.d_out)  # H·W's padded width
        # each head's columns: the real per-head width when concatenated (padding at the end),
        # a padded output width when averaged (one block per head)
        self.head_width = inputs.real[1] // p.heads if p.concat else inputs.d_out
        self.g = StageGraph(p, self.comm, inputs.graph, self.input_ids, inputs.d_in,
                            inputs.d_out, self.seed, self.dtype, self.tuner)
        cols = self.g.col_block(width)
        # averaged heads: the output column of each of this rank's columns
        out_col = torch.arange(cols.start, cols.stop, device=self.comm.grid.device)
        self.register_buffer("out_col", out_col % inputs.d_out, persistent=False)

    def forward(self, H: torch.Tensor, step: int | None = None) -> torch.Tensor:
        """H: rows by o, columns by i; OUT: rows by i, columns by d, replicated over o."""
        p, g, c, heads = self.plan, self.g, self.comm, self.plan.heads
        o, d = p.outer, p.depth
        step = step or 0
        H = g.receive(H)
        if self.training:
            H = g.dropout(H, self.p, step)
        Z = g.linear(H, self.params["W"])                     # AG(W) over o, AR(Z) over i; bwd: AR(dZ) over i
        a = torch.stack([self.params["att_src"], self.params["att_dst"]], 1)
        s = g.head_sums(Z, a, heads, self.head_width)  # AR(s) over d; bwd: AR(ds), AR(da)
        s_src, s_dst = s[:, :heads], g.to_rows(s[:, heads:])  # AR(S·s) over o: Â's rows
        alpha = g.attention(s_dst, s_src, self.slope)         # AR-MAX, AR-SUM over o; bwd: AR(ds) over o
        drop = self.attn_p if self.training else 0.0
        if p.concat:                                          # AR(OUT) over o
            return self.add_bias(g.aggregate_weighted(alpha, Z, heads, self.head_width, drop,
                                                      step))
        part = g.aggregate_weighted(alpha, Z, heads, self.head_width, drop, step, reduce=False)
        mean = torch.zeros(part.shape[0], self.head_width, dtype=part.dtype,
                           device=part.device).index_add(1, self.out_col, part)
        mean = c.reduce_scatter(mean.mul_(1.0 / heads).T, d).T  # RS(OUT) over d; bwd: AG
        return self.add_bias(c.all_reduce(mean, o))           # AR(OUT) over o


def serial(model, p, H: torch.Tensor, step: int | None) -> torch.Tensor:
    """The serial reference, written from GATConv's definition on the whole graph: scores per
    head, softmax over each node's in-edges (Â's structure: M with one self loop per node),
    attention dropout with the engine's masks, messages α·Z_j summed per destination (an
    edge × head × feature tensor: fine for the reference's small graphs)."""
    s, H_ = p.index, p.heads
    Z = H @ model.param("W", s)
    n, width = Z.shape[0], Z.shape[1] // H_
    Zh = Z.view(n, H_, width)
    s_src = (Zh * model.param("att_src", s).view(H_, width)).sum(-1)
    s_dst = (Zh * model.param("att_dst", s).view(H_, width)).sum(-1)
    dst, src = model.adj.indices()
    e = F.leaky_relu(s_dst[dst] + s_src[src], model.cfg.negative_slope)  # (edges, heads)
    m = torch.full((n, H_), float("-inf")).scatter_reduce(
        0, dst[:, None].expand(-1, H_), e, "amax")
    w = torch.exp(e - m[dst])
    alpha = w / torch.zeros(n, H_).index_add(0, dst, w)[dst]
    pa = model.cfg.attn_dropout
    if model.training and pa > 0:
        alpha = alpha * edge_keep(model.seed, step or 0, p.layer, H_, dst, src, pa) / (1 - pa)
    out = torch.zeros(n, H_, width).index_add(0, dst, alpha[:, :, None] * Zh[src])
    return out.reshape(n, H_ * width) if p.concat else out.mean(1)
