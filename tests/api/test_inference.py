"""`plexus.infer`: a trained model on a graph it never saw, on 1x1x1 and on a multi-rank grid,
equals the exported PyG model (`plexus.load_pyg`, PyG's own layers: the oracle) on that graph;
`Graph.to_pyg` is `Graph.from_pyg`'s inverse.

The model is trained on the subgraph of 60% of Cora's nodes and run on the subgraph of the other
40% (no node, edge or feature row shared), for GCN, GAT (attention vectors: the "heads" layout)
and SAGE with BatchNorm (running statistics).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import plexus
from helpers import assert_one_line
from plexus_datasets import Graph, load_dataset

KINDS = {"gcn": {}, "gat": dict(heads=2, hidden=8), "sage-bn": dict(norm="batch")}


def subgraph(g: Graph, keep: np.ndarray, name: str) -> Graph:
    idx = np.flatnonzero(keep)
    return Graph.from_scipy(g.adj[idx][:, idx], g.features[idx], g.labels[idx],
                            train=g.train_mask[idx], val=g.val_mask[idx], test=g.test_mask[idx],
                            num_classes=g.num_classes, name=name)


@pytest.fixture(scope="module")
def held_out(tmp_path_factory):
    """Exports of each kind trained (a few epochs, 1x1x1) on one part of Cora, the other part,
    and PyG's logits of each export on it."""
    pytest.importorskip("torch_geometric")
    cora = load_dataset("cora")
    seen = np.random.default_rng(0).random(cora.num_nodes) < 0.6
    train_graph, new = subgraph(cora, seen, "cora-seen"), subgraph(cora, ~seen, "cora-new")
    out = tmp_path_factory.mktemp("exports")
    exports, want = {}, {}
    data = new.to_pyg()
    for name, options in KINDS.items():
        exports[name] = str(out / f"{name}.pt")
        plexus.launch(_train, train_graph, name.split("-")[0], options, exports[name],
                      grid="1x1x1")
        with torch.no_grad():
            want[name] = plexus.load_pyg(exports[name])(data.x, data.edge_index)
    return {"new": new, "exports": exports, "want": want, "out": out}


def _train(grid, graph, kind, options, path):
    model = plexus.distributed_model(graph, grid, kind, seed=1, **options)
    opt = torch.optim.Adam(model.parameters(), lr=0.02)
    for epoch in range(5):
        model.train()
        opt.zero_grad()
        model.loss(model(step=epoch), mask="train").backward()
        opt.step()
    plexus.save_weights(model, path)


def _infer_all(grid, exports, graph, out):
    """Every export on ``graph`` in one world: gathered logits, and the outputs directory."""
    logits = {name: plexus.infer(path, graph, grid, as_tensor=True)
              for name, path in exports.items()}
    written = plexus.infer(exports["gcn"], graph, grid, out=out, embeddings=True)
    return logits, str(written)


@pytest.mark.slow
@pytest.mark.parametrize("grid", ["1x1x1", "2x1x2"])
def test_infer_on_a_graph_never_seen_equals_the_exported_pyg_model(held_out, grid):
    new = held_out["new"]
    out = held_out["out"] / f"pred-{grid}"
    logits, written = plexus.launch(_infer_all, held_out["exports"], new, str(out), grid=grid,
                                    timeout_s=600)
    for name, want in held_out["want"].items():
        assert logits[name].shape == (new.num_nodes, new.num_classes)
        torch.testing.assert_close(logits[name], want, rtol=0, atol=1e-5, msg=name)
    # written as --save-predictions writes them: every node's class and logits, original order
    saved = plexus.load_outputs(written)
    np.testing.assert_allclose(saved["logits"], held_out["want"]["gcn"].numpy(), rtol=0,
                               atol=1e-5)
    np.testing.assert_array_equal(saved["pred"], np.asarray(saved["logits"]).argmax(1))
    assert saved["embeddings"].shape == (new.num_nodes, 16)


def _infer(grid, weights, graph):
    return plexus.infer(weights, graph, grid)


def test_weights_of_another_width_or_learnt_features_are_one_line(tmp_path):
    cora = load_dataset("cora")
    path = tmp_path / "gcn.pt"
    plexus.launch(_train, cora, "gcn", {}, str(path), grid="1x1x1")
    narrow = Graph.from_scipy(cora.adj, cora.features[:, :100], cora.labels, name="narrow")
    with pytest.raises(plexus.InferenceError) as e:
        plexus.launch(_infer, path, narrow, grid="1x1x1")
    assert_one_line(e)
    assert "narrow: 100 features, but the model was trained on 1433" in str(e.value)
    learnt = tmp_path / "learnt.pt"
    plexus.launch(_train, cora, "gcn", {"learnable_features": True}, str(learnt), grid="1x1x1")
    with pytest.raises(plexus.InferenceError, match="learnt its input features"):
        plexus.launch(_infer, learnt, cora, grid="1x1x1")
    with pytest.raises(plexus.ExportError, match="not a Plexus weights export"):
        torch.save({"x": 1}, tmp_path / "other.pt")
        plexus.launch(_infer, tmp_path / "other.pt", cora, grid="1x1x1")


def test_to_pyg_is_from_pygs_inverse():
    pytest.importorskip("torch_geometric")
    from torch_geometric.data import Data

    cora = load_dataset("cora")
    data = cora.to_pyg()
    assert isinstance(data, Data) and data.num_nodes == cora.num_nodes
    assert data.edge_index.shape == (2, cora.num_edges) and data.x.dtype == torch.float32
    # PyG's own reading of the edges: every (i, j) of the stored adjacency, source first
    adj = cora.adj.tocoo()
    assert set(zip(adj.row.tolist(), adj.col.tolist())) == set(
        map(tuple, data.edge_index.T.tolist()))
    back = Graph.from_pyg(data, name="cora")
    assert (back.adj != cora.adj).nnz == 0 and back.directed == cora.directed
    np.testing.assert_array_equal(back.features, cora.features)
    np.testing.assert_array_equal(back.labels, cora.labels)
    for split in ("train_mask", "val_mask", "test_mask"):
        np.testing.assert_array_equal(getattr(back, split), getattr(cora, split))


def test_the_performance_models_predict_is_now_estimate():
    """`plexus.predict` was the performance model's epoch time, a trap for anyone looking for
    model inference (issue 59): it is `plexus.estimate`; the old name warns, for one release."""
    from plexus.perfmodel import ModelSpec

    spec = ModelSpec(2708, 13264, 1433, 7)
    with pytest.warns(DeprecationWarning, match="renamed estimate"):
        old = plexus.predict(spec, (2, 1, 2))
    assert old == plexus.estimate(spec, (2, 1, 2)) and old.time_s > 0
