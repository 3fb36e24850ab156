"""Your own GNN layers on a Plexus grid, written with plexus.nn, and their serial versions.

    python examples/custom_layer.py [--grid 2x1x2] [--epochs 100]

Two layers that are not Plexus's own: a GraphConv-like layer (PyG's GraphConv: a weight for the
sum of the neighbours and one for the node itself) and a multi-head dot-product attention
layer (like PyG's TransformerConv: softmax over each node's in-edges of q_i·k_j/√d, values
summed with those weights, plus a root weight). Each is written once against `plexus.nn`'s
graph operations, which handle the 3D layouts: the same code runs on every grid. Beside them,
their serial versions in plain PyTorch on an edge list (`serial_forward`); the tests run both
on every engine grid and compare logits, loss, every gradient and training curves.
"""

import argparse
import math

import torch
import torch.nn.functional as F

import plexus
import plexus.nn as pnn
from plexus_datasets.graph import incoming


class GraphConvLike(pnn.Layer):
    """out_i = (Σ_{j→i} x_j)·W_rel + x_i·W_root + b."""

    order = "agg"  # aggregate the input, then the linear maps

    def __init__(self, d_in, d_out):
        super().__init__(d_in, d_out)
        self.weight("w_rel")
        self.weight("w_root")
        self.vector("bias")

    def forward(self, g, x, step):
        neighbours = g.aggregate(x)  # Σ_j x_j, in the rows the aggregation lands on
        own = g.to_rows(x)  # x_i, in the same rows
        out = g.linear(neighbours, self.w_rel) + g.linear(own, self.w_root)
        return g.add_bias(out, self.bias)


class DotAttention(pnn.Layer):
    """Per head h: out_i^h = Σ_{j→i} softmax_j(q_i^h·k_j^h/√d)·v_j^h, then + x_i·W_root + b
    (heads concatenated; attention dropout on the coefficients)."""

    order = "combine"  # the linear maps first, then the (weighted) aggregation

    def __init__(self, d_in, d_out, heads=2, attn_dropout=0.0):
        super().__init__(d_in, d_out)
        self.heads, self.attn_dropout = heads, attn_dropout
        for name in ("w_q", "w_k", "w_v", "w_root"):
            self.weight(name)
        self.vector("bias")

    def forward(self, g, x, step):
        width = self.out_features // self.heads
        q, k, v = (g.linear(x, w) for w in (self.w_q, self.w_k, self.w_v))
        scores = g.sddmm(g.to_rows(q), k, self.heads, width)
        alpha = g.edge_softmax(scores / math.sqrt(width))
        drop = self.attn_dropout if self.training else 0.0
        out = g.aggregate_weighted(alpha, v, self.heads, width, drop, step)
        out = out + g.to_rows(g.linear(x, self.w_root))
        return g.add_bias(out, self.bias)


def build(graph, grid, hidden=16, heads=2, dropout=0.5, attn_dropout=0.2, seed=0):
    """The network: GraphConvLike, DotAttention (``heads`` heads of hidden/heads features),
    GraphConvLike, ReLU between them; Â is the plain sum over in-neighbours."""
    layers = [GraphConvLike(graph.num_features, hidden),
              DotAttention(hidden, hidden, heads, attn_dropout),
              GraphConvLike(hidden, graph.num_classes)]
    return pnn.Network(graph, grid, layers, seed=seed, dropout=dropout, aggregation="sum")


def serial_forward(graph, params, heads=2, step=0, training=False, dropout=0.5,
                   attn_dropout=0.2, seed=0):
    """The same network in plain PyTorch on the whole graph (edges j -> i), with the full
    parameters ``params`` (`plexus.nn.Network.full_parameters`) and the same dropout masks."""
    m = incoming(graph.adj, graph.directed).tocoo()  # rows: destinations
    dst, src = torch.as_tensor(m.row, dtype=torch.long), torch.as_tensor(m.col, dtype=torch.long)
    n = graph.num_nodes

    def graph_conv(x, l):
        neighbours = torch.zeros(n, x.shape[1]).index_add(0, dst, x[src])
        return neighbours @ params[f"{l}.w_rel"] + x @ params[f"{l}.w_root"] + params[f"{l}.bias"]

    def attention(x, l):
        width = params[f"{l}.bias"].shape[0] // heads
        q, k, v = (x @ params[f"{l}.{w}"] for w in ("w_q", "w_k", "w_v"))
        q, k, v = (t.view(n, heads, width) for t in (q, k, v))
        e = (q[dst] * k[src]).sum(-1) / math.sqrt(width)  # (edges, heads)
        top = torch.full((n, heads), float("-inf")).scatter_reduce(
            0, dst[:, None].expand(-1, heads), e, "amax")
        w = torch.exp(e - top[dst])
        alpha = w / torch.zeros(n, heads).index_add(0, dst, w)[dst]
        if training:
            alpha = pnn.serial_edge_dropout(alpha, attn_dropout, seed, step, l, dst, src)
        out = torch.zeros(n, heads, width).index_add(0, dst, alpha[:, :, None] * v[src])
        return out.reshape(n, -1) + x @ params[f"{l}.w_root"] + params[f"{l}.bias"]

    h = torch.from_numpy(graph.features)
    for l, layer in enumerate((graph_conv, attention, graph_conv)):
        if training:
            h = pnn.serial_dropout(h, dropout, seed, step, l)
        h = layer(h, l)
        if l < 2:
            h = F.relu(h)
    return h


def train(grid, graph, epochs):
    """Train the network on ``grid``; rank 0 returns the loss and the test accuracy of the
    network and of its serial version with the trained parameters (they predict the same)."""
    net = build(graph, grid)
    opt = torch.optim.Adam(net.parameters(), lr=0.01, weight_decay=5e-4)
    for epoch in range(epochs):
        net.train()
        opt.zero_grad()
        loss = net.loss(net(step=epoch))  # the same value on every rank
        loss.backward()
        opt.step()
    with torch.no_grad():
        acc = net.eval().accuracy(net())
    params = net.full_parameters()  # full tensors, the same on every grid
    with torch.no_grad():
        pred = serial_forward(graph, params).argmax(1).numpy()
    serial_acc = (pred[graph.test_mask] == graph.labels[graph.test_mask]).mean()
    if grid.rank == 0:
        return {"loss": loss.item(), "test_acc": acc["test"], "serial_test_acc": serial_acc}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--grid", default="1x1x2")
    parser.add_argument("--epochs", type=int, default=100)
    args = parser.parse_args()
    result = plexus.launch(train, plexus.load_dataset("cora"), args.epochs, grid=args.grid)
    if result is not None:  # rank 0's
        print(" ".join(f"{k} {v:.4f}" for k, v in result.items()))


if __name__ == "__main__":
    plexus.run_script(main)  # bad input (e.g. a bad --grid): one line, status 2
