"""Users' layers run through the engine's one forward loop (`plexus.engine.model.GridModel`),
with its recompute: a `plexus.nn.Network` built with ``EngineConfig(recompute=True)`` runs each
layer again in backward (one checkpointed segment per layer), and gives the same logits, loss,
gradients and BatchNorm running statistics as the same network without it (the oracle), with
dropout on, BatchNorm inside a layer and an earlier output carried across segments
(``reads_output``); on 1 rank and on a 2x1x1 grid, whose carries and BatchNorm issue
collectives that the re-run issues again."""

from __future__ import annotations

import pytest

import worlds
from plexus.nn import BatchNorm, Layer

pytestmark = pytest.mark.slow  # local worlds

ATOL = 1e-6  # as tests/engine/test_precision.py's recompute check


class Counted(Layer):
    """A layer that counts its forward calls (a recomputed segment calls it again)."""

    calls = 0

    def __call__(self, *args, **kwargs):
        Counted.calls += 1
        return super().__call__(*args, **kwargs)


class Dense(Counted):
    """x·W + b, no aggregation."""

    order = "dense"

    def __init__(self, d_in: int, d_out: int) -> None:
        super().__init__(d_in, d_out)
        self.weight("w")
        self.vector("b")

    def forward(self, g, x, step):  # noqa: D102
        return g.add_bias(g.linear(x, self.w), self.b)


class Skip(Counted):
    """BatchNorm((Â·x + H⁰)·W): reads layer 0's output, normalises its own."""

    order = "agg"

    def __init__(self, width: int) -> None:
        super().__init__(width, width)
        self.weight("w")
        self.bn = BatchNorm(width)
        self.reads_output(0)

    def forward(self, g, x, step):  # noqa: D102
        h = g.aggregate(x) + g.to_rows(g.output(0))
        return self.bn(g.linear(h, self.w))


def one_step(grid, graph, recompute: bool) -> dict:
    import torch

    from plexus.engine.config import EngineConfig
    from plexus.nn import Network

    hidden = 8
    layers = [Dense(graph.num_features, hidden), Skip(hidden), Skip(hidden),
              Dense(hidden, graph.num_classes)]
    net = Network(graph, grid, layers, seed=2, dropout=0.5,
                  engine=EngineConfig(recompute=recompute))
    net.train()
    Counted.calls = 0
    logits = net(step=3)
    loss = net.loss(logits)
    loss.backward()
    calls = Counted.calls
    with torch.no_grad():
        evaluated = net.eval()()
    return {"calls": calls, "logits": logits.detach(), "loss": loss.detach(),
            "eval": evaluated, "grads": {n: p.grad.clone() for n, p in net.named_shards().items()},
            "stats": {n: t.clone() for n, t in net.named_stats().items()}}


def compare(dims: tuple[int, int, int]) -> dict:
    """Per graph: the layers' forward calls without and with recompute, whether the same
    parameters and four statistics came back, and what differs beyond `ATOL`."""
    import torch

    from plexus_datasets.toy import directed_toy_graph, toy_graph
    from plexus.engine.grid import Grid

    grid, out = Grid.create(dims), {}
    for name, graph in (("undirected", toy_graph()), ("directed", directed_toy_graph())):
        ref, got = one_step(grid, graph, False), one_step(grid, graph, True)
        pairs = [("logits", ref["logits"], got["logits"]), ("loss", ref["loss"], got["loss"]),
                 ("eval", ref["eval"], got["eval"])]
        pairs += [(f"grad {k}", v, got["grads"][k]) for k, v in ref["grads"].items()]
        pairs += [(f"stat {k}", v, got["stats"][k]) for k, v in ref["stats"].items()]
        out[name] = {"calls": (ref["calls"], got["calls"]),
                     "names": sorted(ref["grads"]) == sorted(got["grads"])
                     and len(ref["stats"]) == 4,
                     "differ": [f"{what} by {float((a - b).abs().max()):.3g}"
                                for what, a, b in pairs
                                if not torch.allclose(a, b, rtol=0, atol=ATOL)]}
    return out


SIZES = {1: (1, 1, 1), 2: (2, 1, 1)}
worlds.declare("forward-loop", __file__, {size: (compare, (dims,)) for size, dims in SIZES.items()})


@pytest.mark.parametrize("size,dims", sorted(SIZES.items()))
def test_a_network_recomputes_each_layer_and_gives_the_same_step(size, dims):
    for rank, graphs in enumerate(worlds.ranks(size, "forward-loop")):
        for name, got in graphs.items():
            # 4 layers: run once each without recompute; with it, backward runs each again
            assert got["calls"] == (4, 8), (rank, name, got["calls"])
            assert got["names"], (rank, name)
            assert not got["differ"], (rank, name, got["differ"])
