"""GCNII (Chen et al. 2020, PyG's ``GCN2Conv``) written with plexus.nn, on any grid.

    python examples/gcnii.py [--grid 2x1x2] [--layers 8] [--epochs 100]

The model is PyG's examples/gcn2_cora.py: a linear map and ReLU give H⁰, then L GCNII layers
(each followed by ReLU), then a linear map to the classes; dropout on every layer's input. A
GCNII layer ℓ is

    out = ((1-α)·Â·x + α·H⁰) · ((1-β)·I + β·W),        β = log(θ/ℓ + 1)

(``shared_weights=False``: ((1-α)·Â·x)·((1-β)·I + β·W₁) + (α·H⁰)·((1-β)·I + β·W₂)). What it needs
from plexus.nn: H⁰, the first layer's output, in every later layer (``self.reads_output(0)``,
``g.output(0)``: the network carries it to each layer's layout) and the identity mapping in the
same product as W (``g.linear(h, self.w * β, identity=1 - β)``). Its weights are PyG's
(``weight1``, ``weight2``; the linear maps' ``weight`` transposed and ``bias``):
tests/engine_checks.py copies them into PyG's modules on every tested grid and compares logits
and every gradient.
"""

import math

import torch

import plexus
import plexus.nn as pnn

import citation  # the loop and command line gcnii.py and appnp.py share


class Linear(pnn.Layer):
    """x·W + b (PyG's ``Linear``: ``weight`` is Wᵀ), no aggregation."""

    order = "dense"

    def __init__(self, d_in, d_out, activation="relu"):
        super().__init__(d_in, d_out)
        self.activation = activation
        self.weight("w")
        self.vector("bias")

    def forward(self, g, x, step):
        return g.add_bias(g.linear(x, self.w), self.bias)


class GCNII(pnn.Layer):
    """PyG's ``GCN2Conv(channels, alpha, theta, layer, shared_weights)`` with H⁰ the output
    of the network's layer ``initial``; Â is the network's (GCN's D̂^-½(A+I)D̂^-½)."""

    order = "agg"  # aggregate, then the (identity-mapped) weight

    def __init__(self, channels, alpha, theta, layer, shared_weights=True, initial=0):
        super().__init__(channels, channels)
        self.alpha, self.beta = alpha, math.log(theta / layer + 1)
        self.shared_weights, self.initial = shared_weights, initial
        self.weight("weight1")
        if not shared_weights:
            self.weight("weight2")
        self.reads_output(initial)

    def forward(self, g, x, step):
        a, b = self.alpha, self.beta
        h = (1 - a) * g.aggregate(x)
        h0 = a * g.to_rows(g.output(self.initial))  # H⁰ in the rows Â·x lands on
        if self.shared_weights:
            return g.linear(h + h0, self.weight1 * b, identity=1 - b)
        return (g.linear(h, self.weight1 * b, identity=1 - b)
                + g.linear(h0, self.weight2 * b, identity=1 - b))


def build(graph, grid, hidden=64, layers=8, alpha=0.1, theta=0.5, shared_weights=True,
          dropout=0.5, seed=0):
    """The GCNII network: Linear(features → hidden), ``layers`` GCNII layers, Linear(hidden
    → classes); ``shared_weights`` a bool or one per layer."""
    shared = ([shared_weights] * layers if isinstance(shared_weights, bool) else
              list(shared_weights))
    stack = ([Linear(graph.num_features, hidden)]
             + [GCNII(hidden, alpha, theta, l + 1, shared[l]) for l in range(layers)]
             + [Linear(hidden, graph.num_classes)])
    return pnn.Network(graph, grid, stack, seed=seed, dropout=dropout, aggregation="gcn")


def train(grid, graph, layers, epochs):
    """Train on ``grid`` (PyG's example's optimizer: Adam, lr 0.01, weight decay 0.01 on the
    GCNII layers and 5e-4 on the linear maps); rank 0 returns the loss and accuracies."""
    net = build(graph, grid, layers=layers)
    convs = [p for layer in net.layers[1:-1] for p in layer.parameters()]
    lins = [p for layer in (net.layers[0], net.layers[-1]) for p in layer.parameters()]
    opt = torch.optim.Adam([dict(params=convs, weight_decay=0.01),
                            dict(params=lins, weight_decay=5e-4)], lr=0.01)
    return citation.fit(net, opt, epochs, grid)


if __name__ == "__main__":
    # bad input (e.g. a bad --grid): one line, status 2
    plexus.run_script(lambda: citation.main(__doc__, train, "--layers", 8))
