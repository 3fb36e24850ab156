"""GAT's stage (`plexus.core.ops.gat` declares its parameters, collectives and costs; see there
for the layout): Z = H·W, node scores, the edge softmax across the grid, the α-weighted
aggregation per head, concatenated or averaged heads, bias."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from plexus.core.layout import block
from plexus.core.ops import OPERATORS

from ..edges import EdgeBlock, attention_softmax, head_matrix, head_ranges, weighted_aggregate
from ..primitives import aggregate
from ..seeding import dropout, edge_keep
from .base import Stage3D, StageInputs


class GATStage(Stage3D):
    """A GAT stage on the grid: combine-first layout; scores and statistics float32."""

    def __init__(self, inputs: StageInputs) -> None:
        super().__init__(inputs)
        p, decl = self.plan, OPERATORS["gat"]
        shape, coords, device = self.comm.grid.shape, self.comm.grid.coords, self.comm.grid.device
        cfg = inputs.model
        self.slope, self.attn_p = cfg.negative_slope, cfg.attn_dropout
        inner = decl.inner_width(p, inputs.d_out)
        # each head's columns: the real per-head width when concatenated (padding at the end),
        # a padded output width when averaged (one block per head)
        self.head_width = inputs.real[1] // p.heads if p.concat else inputs.d_out
        cols = block(inner, shape[p.w_cols], coords[p.w_cols])
        width = cols.stop - cols.start
        self.heads = head_ranges(cols.start, width, self.head_width, p.heads)
        self.register_buffer("P", head_matrix(cols.start, width, self.head_width, p.heads,
                                              device), persistent=False)
        # averaged heads: each column's place in the output width
        self.register_buffer("out_col", torch.arange(cols.start, cols.stop, device=device)
                             % inputs.d_out, persistent=False)
        graph = inputs.graph
        self.edges = EdgeBlock(graph.matrix(p), graph.out_ids[p.index],
                               graph.shard.input_ids[p.index], device)
        self.S = graph.identity(p)

    def forward(self, H: torch.Tensor, step: int | None = None) -> torch.Tensor:
        """H: rows by o, columns by i; OUT: rows by i, columns by d, replicated over o."""
        p, c = self.plan, self.comm
        o, i, d = p.outer, p.inner, p.depth
        H = self.receive(H)
        drop = self.dropout_args(step)
        H = H if drop is None else dropout(H, *drop)
        W = self.gathered_weight("W", o)                      # AG(W) over o; bwd: RS(dW) over o
        Z = c.all_reduce(self._gemm(H, W), i)                 # AR(Z) over i
        Z = c.all_reduce_grad(Z, i)                           # bwd: AR(dZ) over i
        a = torch.stack([self.params["att_src"], self.params["att_dst"]], 1)
        a = c.all_reduce_grad(c.all_reduce_grad(a, o), i)     # bwd: AR(da) over o and over i
        A = torch.cat([self.P * a[:, :1], self.P * a[:, 1:]], 1).to(self.dtype)
        s = c.all_reduce((Z @ A).float(), d)                  # AR(s) over d: [s_src | s_dst]
        s = c.all_reduce_grad(s, d)                           # bwd: AR(ds) over d
        s_src, s_dst = s[:, :p.heads], s[:, p.heads:]
        s_dst = aggregate(s_dst, self.S, c, o)                # AR(S·s_dst) over o: Â's rows
        s_dst = c.all_reduce_grad(s_dst, o)                   # bwd: AR(ds→rows) over o
        alpha = attention_softmax(s_dst, s_src, self.edges, c, o, self.slope)  # AR-MAX, AR-SUM over o
        edrop = (self.seed, step or 0, p.layer, self.attn_p) \
            if self.training and self.attn_p > 0 else None
        if p.concat:
            OUT = weighted_aggregate(alpha, Z, self.edges, c, o, self.heads, self.P, edrop)  # AR(OUT) over o
        else:
            part = weighted_aggregate(alpha, Z, self.edges, c, None, self.heads, self.P, edrop)
            mean = torch.zeros(part.shape[0], self.head_width, dtype=part.dtype,
                               device=part.device).index_add(1, self.out_col, part)
            mean = c.reduce_scatter(mean.mul_(1.0 / p.heads).T, d).T  # RS(OUT) over d; bwd: AG
            OUT = c.all_reduce(mean, o)                       # AR(OUT) over o
        return self.add_bias(OUT)


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
        keep = torch.stack([edge_keep(model.seed, step or 0, p.layer, h, dst, src, pa)
                            for h in range(H_)], 1)
        alpha = alpha * keep / (1 - pa)
    out = torch.zeros(n, H_, width).index_add(0, dst, alpha[:, :, None] * Zh[src])
    return out.reshape(n, H_ * width) if p.concat else out.mean(1)
