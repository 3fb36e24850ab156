"""Serial link prediction equals PyG: a GCNConv encoder (PyG's stack, the same weights copied in),
the same decoder written as OGB's examples write ``LinkPredictor`` (here, not Plexus's), the
same negatives, OGB's loss −log σ(pos) − log(1 − σ(neg)) and Adam: equal losses over several
steps and equal test scores, to 1e-5, for the dot and the MLP decoders, on an undirected and a
directed graph. And the negatives: uniform, seeded, any slice drawn alone."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from plexus_datasets.linksplit import random_edge_split
from plexus_datasets.toy import directed_toy_graph, toy_graph
from plexus.engine.config import ModelConfig
from plexus.engine.link import LinkTask, fit, hits_at_k, link_metrics
from plexus.engine.pairs import LinkDecoder, negative_pairs
from plexus.engine.serial import SerialModel

pytest.importorskip("torch_geometric")
from plexus.testing.pyg_reference import PygStack, copy_weights  # noqa: E402

OUT = 8


class OgbLinkPredictor(torch.nn.Module):
    """OGB's examples' ``LinkPredictor`` (examples/linkproppred/*/gnn.py), as written there."""

    def __init__(self, in_channels, hidden_channels, out_channels, num_layers, dropout):
        super().__init__()
        self.lins = torch.nn.ModuleList()
        self.lins.append(torch.nn.Linear(in_channels, hidden_channels))
        for _ in range(num_layers - 2):
            self.lins.append(torch.nn.Linear(hidden_channels, hidden_channels))
        self.lins.append(torch.nn.Linear(hidden_channels, out_channels))
        self.dropout = dropout

    def forward(self, x_i, x_j):
        x = x_i * x_j
        for lin in self.lins[:-1]:
            x = lin(x)
            x = F.relu(x)
            x = F.dropout(x, p=self.dropout, training=self.training)
        x = self.lins[-1](x)
        return torch.sigmoid(x)


def dot_predictor(x_i, x_j):
    """PyG's inner-product decoder (``GAE``'s): σ(⟨x_i, x_j⟩)."""
    return torch.sigmoid((x_i * x_j).sum(dim=-1))


@pytest.mark.parametrize("decoder", ["dot", "mlp"])
@pytest.mark.parametrize("directed", [False, True], ids=["undirected", "directed"])
def test_serial_link_prediction_equals_pyg(decoder, directed):
    g = directed_toy_graph() if directed else toy_graph()
    split = random_edge_split(g, (0.7, 0.1, 0.2), seed=4)
    eg = split.encoder_graph(OUT)
    cfg = ModelConfig(2, 6, 0.0)
    serial = SerialModel(eg, cfg, seed=3)
    stack = PygStack(cfg, eg.num_features, OUT)
    copy_weights(stack, serial)
    dec = LinkDecoder(decoder, OUT, hidden=5, layers=3, seed=3)
    pos = torch.from_numpy(split.pos["train"])
    task = LinkTask(serial, dec, pos, g.num_nodes, seed=3)
    if decoder == "mlp":
        theirs_dec = OgbLinkPredictor(OUT, 5, 1, 3, 0.0)
        theirs_dec.load_state_dict(dec.state_dict())  # the decoder loads into OGB's module
        predict = lambda a, b: theirs_dec(a, b).squeeze(-1)  # noqa: E731
        params = list(stack.parameters()) + list(theirs_dec.parameters())
    else:
        predict, params = dot_predictor, list(stack.parameters())
    coo = eg.adj.tocoo()  # the message graph: training edges only
    edge_index = torch.from_numpy(np.vstack([coo.row, coo.col]).astype(np.int64))
    x = torch.from_numpy(eg.features)
    opt = torch.optim.Adam(params, lr=0.01)
    want = []
    for step in range(4):
        opt.zero_grad()
        h = stack(x, edge_index)
        neg = negative_pairs(3, step, g.num_nodes, pos.shape[1])
        p, n = predict(h[pos[0]], h[pos[1]]), predict(h[neg[0]], h[neg[1]])
        loss = -torch.log(p + 1e-15).mean() - torch.log(1 - n + 1e-15).mean()
        loss.backward()
        opt.step()
        want.append(float(loss.detach()))
    got = fit(task, 4, lr=0.01)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    test_pairs = torch.from_numpy(np.hstack([split.pos["test"], split.neg["test"]]))
    with torch.no_grad():
        stack.eval()
        h = stack(x, edge_index)
        theirs = predict(h[test_pairs[0]], h[test_pairs[1]])
    ours = torch.sigmoid(task.scores(test_pairs))
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)
    assert want[-1] < want[0], "training moved the loss down"


def test_negatives_uniform_seeded_and_sliceable():
    n = 13
    a = negative_pairs(7, 2, n, 26_000)
    assert a.shape == (2, 26_000) and a.dtype == torch.int64
    assert int(a.min()) >= 0 and int(a.max()) < n
    for row in a:  # each end uniform over the nodes: 2,000 expected per node
        counts = torch.bincount(row, minlength=n).double()
        assert float(counts.min()) > 1800 and float(counts.max()) < 2200
    pair_counts = torch.bincount(a[0] * n + a[1], minlength=n * n).double()
    assert float(pair_counts.max()) < 300  # 154 expected per ordered pair
    torch.testing.assert_close(negative_pairs(7, 2, n, 100, start=500), a[:, 500:600])
    assert torch.equal(negative_pairs(7, 2, n, 50), a[:, :50])
    assert not torch.equal(negative_pairs(7, 3, n, 50), a[:, :50])
    assert not torch.equal(negative_pairs(8, 2, n, 50), a[:, :50])


def test_link_metrics_by_hand():
    pos, neg = np.array([0.9, 0.4, 0.2]), np.array([0.5, 0.1, 0.3, 0.4])
    # positive above negative: 0.9 beats 4, 0.4 beats 2 and ties 1 (a half), 0.2 beats 1
    assert link_metrics(pos, neg, k=2)["auc"] == pytest.approx(7.5 / 12, abs=1e-12)
    # the 2nd highest negative is 0.4: only 0.9 is above it
    assert hits_at_k(pos, neg, 2) == pytest.approx(1 / 3)
    assert hits_at_k(pos, neg, 5) == 1.0  # fewer negatives than K: OGB counts every hit
