"""APPNP (Klicpera et al. 2019, PyG's ``APPNP``) written with plexus.nn, on any grid.

    python examples/appnp.py [--grid 2x1x2] [--hops 10] [--epochs 100]

The model is PyG's examples/citation/appnp.py: H = MLP(X) (Linear, ReLU, Linear; dropout on
both inputs), then K hops of personalized PageRank in one layer,

    Z⁰ = H,   Zᵏ⁺¹ = (1-α)·Â·Zᵏ + α·H,   out = Zᴷ,

with no dropout before the propagation and no activation after the MLP's last linear map. What it
needs from plexus.nn: several hops in one layer (``g.to_nodes`` moves Â·Z's rows back to the
input's for the next ``g.aggregate``), a layer without a following activation (``activation =
None``) and one without input dropout (``input_dropout = 0.0``), and no weight at the end
(``g.linear(z, None, identity=1.0)`` moves the result to the output's columns). It equals PyG's
``APPNP`` on every tested grid (tests/engine_checks.py: logits and every gradient).
"""

import torch

import plexus
import plexus.nn as pnn

import citation  # the loop and command line gcnii.py and appnp.py share
from gcnii import Linear


class APPNP(pnn.Layer):
    """PyG's ``APPNP(K, alpha)``: K propagation hops towards the input H; Â is the network's
    (GCN's D̂^-½(A+I)D̂^-½). No parameters."""

    order = "agg"
    input_dropout = 0.0  # PyG's example propagates the MLP's output as it is

    def __init__(self, channels, K, alpha):
        super().__init__(channels, channels)
        self.K, self.alpha = K, alpha

    def forward(self, g, x, step):
        h = self.alpha * g.to_rows(x)  # α·H, in the rows Â·Z lands on
        z = x
        for k in range(self.K):
            rows = (1 - self.alpha) * g.aggregate(z) + h
            if k < self.K - 1:
                z = g.to_nodes(rows)  # back to the input's rows for the next hop
        return g.linear(rows, None, identity=1.0)


def build(graph, grid, hidden=64, K=10, alpha=0.1, dropout=0.5, seed=0):
    """The APPNP network: Linear(features → hidden), ReLU, Linear(hidden → classes), K hops."""
    stack = [Linear(graph.num_features, hidden),
             Linear(hidden, graph.num_classes, activation=None),
             APPNP(graph.num_classes, K, alpha)]
    return pnn.Network(graph, grid, stack, seed=seed, dropout=dropout, aggregation="gcn")


def train(grid, graph, hops, epochs):
    """Train on ``grid`` (Adam, lr 0.01, weight decay 5e-4); rank 0 returns the loss and
    accuracies."""
    net = build(graph, grid, K=hops)
    opt = torch.optim.Adam(net.parameters(), lr=0.01, weight_decay=5e-4)
    return citation.fit(net, opt, epochs, grid)


if __name__ == "__main__":
    # bad input (e.g. a bad --grid): one line, status 2
    plexus.run_script(lambda: citation.main(__doc__, train, "--hops", 10))
