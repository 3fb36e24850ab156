"""The engine's model and a `plexus.nn.Network` are one model: built by one builder
(`plexus.engine.model.GridModel`), from one seed they start from the same parameters, run the
same BatchNorm stage and give the same logits and running statistics."""

from __future__ import annotations

import pytest

from plexus.nn import BatchNorm, Layer

pytestmark = pytest.mark.slow  # a one-rank world


class GCNLayer(Layer):
    """The built-in combine-first GCN stage written as a user's layer, BatchNorm optional."""

    def __init__(self, d_in: int, d_out: int, bias: bool, norm: bool) -> None:
        super().__init__(d_in, d_out)
        self.weight("W")
        self.has_bias = bias
        if bias:
            self.vector("b")
        self.bn = BatchNorm(d_out) if norm else None

    def forward(self, g, x, step):  # noqa: D102
        out = g.aggregate(g.linear(x, self.W))
        out = g.add_bias(out, self.b) if self.has_bias else out
        return self.bn(out) if self.bn is not None else out


# the engine's names of the Network's parameters and statistics
NAMES = {"W0": "0.W", "gamma0": "0.bn.gamma", "beta0": "0.bn.beta", "mean0": "0.bn.mean",
         "var0": "0.bn.var", "W1": "1.W", "b1": "1.b"}


def both_models(seed: int) -> dict:
    import torch

    from plexus_partition.model.layout import DEFAULT_PERMUTATION
    from plexus_datasets.toy import toy_graph
    from plexus.engine.build import build_model
    from plexus.engine.config import ModelConfig
    from plexus.engine.grid import Grid
    from plexus.engine.model import GridModel
    from plexus.engine.stage import Stage3D
    from plexus.nn import Network
    from plexus_partition import shard_graph

    graph, grid = toy_graph(), Grid.create((1, 1, 1))
    cfg = ModelConfig(2, 8, 0.0, kind="gcn", order="combine", norm="batch")
    shard = shard_graph(graph, grid.shape, grid.coords, 2, ["combine", "combine"],
                        DEFAULT_PERMUTATION, seed=seed, aggregation="gcn")
    engine = build_model(grid, shard, cfg, seed)
    net = Network(graph, grid, [GCNLayer(graph.num_features, 8, False, True),
                                GCNLayer(8, graph.num_classes, True, False)], seed=seed)
    out = {"builder": isinstance(engine, GridModel) and isinstance(net, GridModel),
           "norm": type(engine.norms["0"]) is Stage3D and type(net.layers[0].bn.norm) is Stage3D}
    first = engine.full_parameters()
    out["names"] = sorted(first) == sorted(NAMES)
    second = net.full_parameters()
    out["init"] = all(torch.equal(first[e], second[n]) for e, n in NAMES.items())
    for model in (engine, net):
        model.train()
        model(0)  # one training pass: the running statistics move
        model.eval()
    with torch.no_grad():
        out["logits"] = float((engine().float() - net().float()).abs().max())
    stats_e, stats_n = engine.full_parameters(), net.full_parameters()
    out["stats"] = max(float((stats_e[e] - stats_n[n]).abs().max()) for e, n in NAMES.items())
    return out


def test_the_engine_model_and_a_network_are_one_model():
    from plexus.testing.localworld import run_world

    got, = run_world(1, both_models, 3)
    assert got["builder"] and got["norm"] and got["names"]
    assert got["init"], "the same seed gave different initial parameters"
    assert got["logits"] < 1e-5 and got["stats"] < 1e-5, got
