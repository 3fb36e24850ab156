"""Each serial reference model equals PyG's layers of the same name with the same weights copied
in: GCNConv (with BatchNorm1d and residual connections), SAGEConv, GINConv, GATConv (1, 2, 3 and
4 heads, concatenated and averaged), GraphConv and Linear stacks, with every activation (ReLU,
ELU, LeakyReLU, GELU, tanh, none), on an undirected and a directed graph, to 1e-5 on the
logits, every gradient, every running statistic and the evaluation-mode logits; the stack an
export rebuilds applies each activation as PyG's own models do (``act=``).

The PyG stacks (`plexus.testing.pyg_reference`) are built from PyG's public modules; the weights
are copied under the PyG names the operators declare, so a wrong name fails here.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from engine_checks import directed_toy_graph, multilabel_graph, toy_graph, weighted_graph
from plexus_partition.model.ops import split_name
from plexus.api.export import declared_tensors
from plexus.engine.config import ModelConfig
from plexus.engine.serial import SerialModel

pytest.importorskip("torch_geometric")
from plexus.testing.pyg_reference import PygStack, copy_weights  # noqa: E402

HIDDEN = 8
CONFIGS = {
    "gcn": ModelConfig(3, HIDDEN, 0.0),
    "gcn-batchnorm-residual": ModelConfig(4, HIDDEN, 0.0, norm="batch", residual=True),
    "gcn-nobias": ModelConfig(2, HIDDEN, 0.0, bias=False),
    "sage": ModelConfig(3, HIDDEN, 0.0, kind="sage"),
    "sage-batchnorm": ModelConfig(2, HIDDEN, 0.0, kind="sage", norm="batch"),
    "gin": ModelConfig(2, HIDDEN, 0.0, kind="gin"),
    "gin-batchnorm": ModelConfig(3, HIDDEN, 0.0, kind="gin", norm="batch"),
    "mlp": ModelConfig(3, HIDDEN, 0.0, kind="mlp"),
    "gat": ModelConfig(3, 4, 0.0, kind="gat", heads=2, out_heads=3, negative_slope=0.1),
    "gat-batchnorm-1head": ModelConfig(2, HIDDEN, 0.0, kind="gat", norm="batch"),
    "gat-4heads-nobias": ModelConfig(2, 3, 0.0, kind="gat", heads=4, out_heads=2, bias=False),
    "graphconv": ModelConfig(3, HIDDEN, 0.0, kind="graphconv", order="agg,combine,agg"),
    "graphconv-batchnorm-nobias": ModelConfig(2, HIDDEN, 0.0, kind="graphconv", norm="batch",
                                              bias=False),
    # the activations (ReLU above): after BatchNorm, inside GIN's MLP, between GAT's heads
    "gcn-elu-batchnorm": ModelConfig(3, HIDDEN, 0.0, norm="batch", activation="elu"),
    "sage-leaky_relu": ModelConfig(3, HIDDEN, 0.0, kind="sage", activation="leaky_relu"),
    "gin-gelu": ModelConfig(2, HIDDEN, 0.0, kind="gin", activation="gelu"),
    "gin-none": ModelConfig(2, HIDDEN, 0.0, kind="gin", activation="none"),
    "gat-elu": ModelConfig(2, 4, 0.0, kind="gat", heads=2, activation="elu"),
    "graphconv-tanh": ModelConfig(3, HIDDEN, 0.0, kind="graphconv", activation="tanh"),
    "mlp-none": ModelConfig(3, HIDDEN, 0.0, kind="mlp", activation="none"),
    # issue 57's kinds: APPNP after an MLP of 3 and of 1 Linear layer
    "appnp": ModelConfig(3, HIDDEN, 0.0, kind="appnp", hops=4, teleport=0.2),
    "appnp-1layer-nobias-elu": ModelConfig(1, HIDDEN, 0.0, kind="appnp", hops=2, bias=False,
                                           activation="elu"),
    # GCNII: Linear, 3 GCN2Conv (β from each layer's index), Linear; two weights, no bias
    "gcnii": ModelConfig(5, HIDDEN, 0.0, kind="gcnii", alpha=0.2, theta=0.7),
    "gcnii-two-weights-nobias": ModelConfig(4, HIDDEN, 0.0, kind="gcnii", shared_weights=False,
                                           bias=False),
    # GATv2: 2 heads concatenated, then 3 averaged; with BatchNorm (Wl's and Wr's biases stay)
    "gatv2": ModelConfig(3, 4, 0.0, kind="gatv2", heads=2, out_heads=3, negative_slope=0.1),
    "gatv2-batchnorm-nobias": ModelConfig(2, 3, 0.0, kind="gatv2", heads=2, norm="batch",
                                          bias=False),
    "gatv2-batchnorm": ModelConfig(2, HIDDEN, 0.0, kind="gatv2", norm="batch"),
}
ACTIVATIONS = ("relu", "elu", "leaky_relu", "gelu", "tanh", "none")


def assert_gradients_equal(serial: SerialModel, pairs: dict[str, torch.Tensor]) -> None:
    """Every serial parameter's gradient equals its PyG tensor's (transposed where the
    declaration says PyG's is: a Linear's)."""
    transposed = {name for name, _, decl in
                  declared_tensors(serial.cfg, serial.widths[0], serial.widths[-1])
                  if decl.transform == "T"}
    for s, target in pairs.items():
        got = serial.params[s].grad
        want = target.grad.T if s in transposed else target.grad.reshape(got.shape)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, msg=f"gradient of {s}")


@pytest.mark.parametrize("directed", [False, True], ids=["undirected", "directed"])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_serial_equals_pyg(name, directed):
    g = directed_toy_graph() if directed else toy_graph()
    cfg = CONFIGS[name]
    serial = SerialModel(g, cfg, seed=3)
    stack = PygStack(cfg, g.num_features, g.num_classes)
    pairs = copy_weights(stack, serial)
    assert set(pairs) == set(serial.named_shards()), "every Plexus parameter has a PyG home"
    if cfg.kind == "gin":  # ε = 0 would hide a wrong self term: move it off zero in both
        for s, param in serial.params.items():
            if s.startswith("eps"):
                with torch.no_grad():
                    param.fill_(0.3)
                    pairs[s].fill_(0.3)
    coo = g.adj.tocoo()  # adj[i, j] != 0: an edge i -> j, PyG's (source, target)
    edge_index = torch.from_numpy(np.vstack([coo.row, coo.col]).astype(np.int64))
    serial.train()
    stack.train()  # BatchNorm with batch statistics; dropout is 0
    x = torch.from_numpy(g.features)
    mask = torch.from_numpy(g.train_mask)
    labels = torch.from_numpy(g.labels)
    ours, theirs = serial(), stack(x, edge_index)
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)
    serial.loss(ours).backward()
    F.cross_entropy(theirs[mask], labels[mask]).backward()
    assert_gradients_equal(serial, pairs)
    for name, value in serial.named_stats().items():  # running means and (unbiased) variances
        kind, s = split_name(name)
        bn = stack.bns[serial.plans[s].layer]
        want = bn.running_mean if kind == "mean" else bn.running_var
        torch.testing.assert_close(value, want, rtol=1e-5, atol=1e-6, msg=f"buffer {name}")
    with torch.no_grad():  # evaluation: running statistics, no dropout
        torch.testing.assert_close(serial.eval()(), stack.eval()(x, edge_index), rtol=1e-5,
                                   atol=1e-5)


@pytest.mark.parametrize("name,directed", [("gcn", False), ("sage", True)],
                         ids=["gcn-undirected", "sage-directed"])
def test_multilabel_serial_equals_pyg(name, directed):
    """Multi-label (ogbn-proteins' 112 tasks, a tenth of the labels missing): the serial
    model's loss and gradients equal torch's BCEWithLogitsLoss over the labelled entries on
    PyG's stack, and its ROC-AUC equals ogb's Evaluator for ogbn-proteins on PyG's logits."""
    from ogb.nodeproppred import Evaluator

    g = multilabel_graph(directed_toy_graph() if directed else toy_graph(), tasks=112)
    cfg = CONFIGS[name]
    serial = SerialModel(g, cfg, seed=3)
    stack = PygStack(cfg, g.num_features, g.num_classes)
    pairs = copy_weights(stack, serial)
    coo = g.adj.tocoo()
    edge_index = torch.from_numpy(np.vstack([coo.row, coo.col]).astype(np.int64))
    ours, theirs = serial(), stack(torch.from_numpy(g.features), edge_index)
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)
    y = torch.from_numpy(g.labels)
    known = torch.from_numpy(g.train_mask)[:, None] & (y >= 0)
    assert 0 < int(known.sum()) < int(torch.from_numpy(g.train_mask).sum()) * g.num_classes
    loss = serial.loss(ours)
    want = torch.nn.BCEWithLogitsLoss()(theirs[known], y[known].float())
    torch.testing.assert_close(loss, want, rtol=1e-6, atol=1e-6)
    loss.backward()
    want.backward()
    assert_gradients_equal(serial, pairs)
    evaluator = Evaluator("ogbn-proteins")
    truth = np.where(g.labels < 0, np.nan, g.labels.astype(np.float64))
    mine = serial.metrics(ours.detach())
    for split, mask in (("train", g.train_mask), ("val", g.val_mask), ("test", g.test_mask)):
        official = evaluator.eval({"y_true": truth[mask],
                                   "y_pred": theirs.detach().numpy()[mask]})["rocauc"]
        assert mine[split] == pytest.approx(official, abs=1e-12)


@pytest.mark.parametrize("directed", [False, True], ids=["undirected", "directed"])
def test_weighted_gcn_equals_pyg_gcnconv_with_edge_weight(directed):
    """Â of a weighted graph is PyG's gcn_norm (weighted in-degrees; a node's self loop keeps its
    weight, one of weight 1 is added where there is none), and the serial GCN equals
    GCNConv(x, edge_index, edge_weight) in logits and gradients."""
    from torch_geometric.nn.conv.gcn_conv import gcn_norm

    g = weighted_graph(directed_toy_graph() if directed else toy_graph())
    coo = g.adj.tocoo()
    edge_index = torch.from_numpy(np.vstack([coo.row, coo.col]).astype(np.int64))
    weight = torch.from_numpy(coo.data)
    index, value = gcn_norm(edge_index, weight, g.num_nodes, add_self_loops=True)
    theirs_hat = torch.zeros(g.num_nodes, g.num_nodes)
    theirs_hat[index[1], index[0]] = value  # row = target: the message j -> i sits at (i, j)
    ours_hat = torch.from_numpy(g.normalized("gcn").toarray())
    torch.testing.assert_close(ours_hat, theirs_hat, rtol=1e-6, atol=1e-7)
    plain = torch.from_numpy(dataclasses.replace(g, weighted=False).normalized("gcn").toarray())
    assert not torch.allclose(ours_hat, plain)  # the weights matter
    cfg = CONFIGS["gcn"]
    serial = SerialModel(g, cfg, seed=3)
    stack = PygStack(cfg, g.num_features, g.num_classes)
    pairs = copy_weights(stack, serial)
    ours = serial()
    theirs = stack(torch.from_numpy(g.features), edge_index, weight)
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)
    mask, labels = torch.from_numpy(g.train_mask), torch.from_numpy(g.labels)
    serial.loss(ours).backward()
    F.cross_entropy(theirs[mask], labels[mask]).backward()
    assert_gradients_equal(serial, pairs)


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_each_activation_is_pygs_own(activation):
    """PyG's own models with ``act=`` the same name (its ``activation_resolver``; "none": no
    activation) equal the stack an export rebuilds, and so the serial model: GCN and
    GraphSAGE with BatchNorm, in training mode; GIN's MLP holds the module PyG resolves."""
    from torch_geometric.nn.models import GCN, GraphSAGE
    from torch_geometric.nn.resolver import activation_resolver

    g = directed_toy_graph()
    coo = g.adj.tocoo()
    edge_index = torch.from_numpy(np.vstack([coo.row, coo.col]).astype(np.int64))
    x = torch.from_numpy(g.features)
    act = None if activation == "none" else activation
    for kind, pyg_class in (("gcn", GCN), ("sage", GraphSAGE)):
        cfg = ModelConfig(3, HIDDEN, 0.0, kind=kind, norm="batch", activation=activation)
        serial = SerialModel(g, cfg, seed=3)
        stack = PygStack(cfg, g.num_features, g.num_classes)
        copy_weights(stack, serial)
        theirs = pyg_class(g.num_features, HIDDEN, 3, g.num_classes, act=act, norm="batch_norm")
        theirs.convs.load_state_dict(stack.convs.state_dict())
        for norm, mine in zip(theirs.norms, stack.bns):  # PyG's BatchNorm wraps BatchNorm1d
            norm.module.load_state_dict(mine.state_dict())
        theirs.train(), stack.train(), serial.train()
        want = theirs(x, edge_index)
        torch.testing.assert_close(stack(x, edge_index), want, rtol=1e-6, atol=1e-6,
                                   msg=f"{kind}: the export's stack")
        torch.testing.assert_close(serial(), want, rtol=1e-5, atol=1e-5, msg=f"{kind}: serial")
    gin = PygStack(ModelConfig(2, HIDDEN, 0.0, kind="gin", activation=activation),
                   g.num_features, g.num_classes)
    want = type(activation_resolver(act)) if act else torch.nn.Identity
    assert all(type(conv.nn[1]) is want for conv in gin.convs), gin.convs


def _edge_index(g) -> torch.Tensor:
    coo = g.adj.tocoo()
    return torch.from_numpy(np.vstack([coo.row, coo.col]).astype(np.int64))


def _linear(serial: SerialModel, s: int) -> torch.nn.Linear:
    """PyG's (torch's) Linear with stage ``s``'s W and b copied in by hand."""
    W, b = serial.param("W", s), serial.param("b", s)
    lin = torch.nn.Linear(W.shape[0], W.shape[1], bias=b is not None)
    with torch.no_grad():
        lin.weight.copy_(W.T)
        if b is not None:
            lin.bias.copy_(b)
    return lin


@pytest.mark.parametrize("directed", [False, True], ids=["undirected", "directed"])
def test_appnp_equals_pygs_appnp_after_an_mlp(directed):
    """The serial APPNP model equals PyG's examples/citation/appnp.py built here from
    torch_geometric.nn.APPNP and torch's Linear (not from Plexus's PyG description): Linear,
    ReLU, Linear, ReLU, Linear, then APPNP(K=5, alpha=0.15), weights copied by hand; logits
    and every gradient."""
    from torch_geometric.nn import APPNP

    g = directed_toy_graph() if directed else toy_graph()
    serial = SerialModel(g, ModelConfig(3, HIDDEN, 0.0, kind="appnp", hops=5, teleport=0.15),
                         seed=4)
    lins = [_linear(serial, s) for s in range(3)]
    prop = APPNP(K=5, alpha=0.15)
    x, edge_index = torch.from_numpy(g.features), _edge_index(g)
    h = lins[1](lins[0](x).relu()).relu()
    theirs = prop(lins[2](h), edge_index)
    ours = serial()
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)
    mask, labels = torch.from_numpy(g.train_mask), torch.from_numpy(g.labels)
    serial.loss(ours).backward()
    F.cross_entropy(theirs[mask], labels[mask]).backward()
    for s, lin in enumerate(lins):
        torch.testing.assert_close(serial.param("W", s).grad, lin.weight.grad.T, rtol=1e-5,
                                   atol=1e-5)
        torch.testing.assert_close(serial.param("b", s).grad, lin.bias.grad, rtol=1e-5,
                                   atol=1e-5)


@pytest.mark.parametrize("shared", [True, False], ids=["shared", "two-weights"])
@pytest.mark.parametrize("directed", [False, True], ids=["undirected", "directed"])
def test_gcn2_equals_pygs_gcn2conv_between_two_linears(directed, shared):
    """The serial GCNII model equals PyG's examples/gcn2_cora.py built here from
    torch_geometric.nn.GCN2Conv and torch's Linear (not from Plexus's PyG description): x⁰ =
    ReLU(Linear(x)), two GCN2Conv layers (layer 1 and 2, α 0.2, θ 0.7) with ReLU, Linear;
    weights copied by hand; logits and every gradient."""
    from torch_geometric.nn import GCN2Conv

    g = directed_toy_graph() if directed else toy_graph()
    cfg = ModelConfig(4, HIDDEN, 0.0, kind="gcnii", alpha=0.2, theta=0.7, shared_weights=shared)
    serial = SerialModel(g, cfg, seed=4)
    lins = [_linear(serial, 0), _linear(serial, 3)]
    convs = [GCN2Conv(HIDDEN, 0.2, 0.7, layer, shared_weights=shared) for layer in (1, 2)]
    with torch.no_grad():
        for s, conv in enumerate(convs, 1):
            conv.weight1.copy_(serial.param("W", s))
            if not shared:
                conv.weight2.copy_(serial.param("Wh", s))
    x, edge_index = torch.from_numpy(g.features), _edge_index(g)
    h = x0 = lins[0](x).relu()
    for conv in convs:
        h = conv(h, x0, edge_index).relu()
    theirs, ours = lins[1](h), serial()
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)
    mask, labels = torch.from_numpy(g.train_mask), torch.from_numpy(g.labels)
    serial.loss(ours).backward()
    F.cross_entropy(theirs[mask], labels[mask]).backward()
    for s, conv in enumerate(convs, 1):
        torch.testing.assert_close(serial.param("W", s).grad, conv.weight1.grad, rtol=1e-5,
                                   atol=1e-5)
        if not shared:
            torch.testing.assert_close(serial.param("Wh", s).grad, conv.weight2.grad,
                                       rtol=1e-5, atol=1e-5)
    for s, lin in ((0, lins[0]), (3, lins[1])):
        torch.testing.assert_close(serial.param("W", s).grad, lin.weight.grad.T, rtol=1e-5,
                                   atol=1e-5)
