"""The Python API (plexus.api) and the results plexus-train hands back through it.

- `Graph.from_scipy` / `Graph.from_pyg` round trips;
- a user's own loop on 2- and 4-rank grids: gathered logits, predictions and embeddings (rank 0,
  original node order) equal the serial model's, on an undirected and a directed graph, as numpy
  and, with ``as_tensor=True``, as torch tensors;
- `plexus.load_pyg`: an export of every kind rebuilds its PyG model (the README's snippet, run
  as written), whose logits equal Plexus's;
- ``--export`` loads into a plain PyG GCNConv stack that reproduces Plexus's logits;
  ``--save-predictions`` matches the run's reported accuracy; ``--export-best`` differs from the
  final weights; the OGB evaluator's metric at the best-validation epoch; the recipes.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import scipy.sparse as sp
import torch

import plexus
from cli_helpers import read_log, train, train_here
from helpers import REPO, assert_one_line
from plexus.api import RECIPES, RecipeError
from plexus_partition.model.ops import KINDS
from plexus_datasets import DatasetError, Graph, load_dataset
from plexus.engine.config import ModelConfig, TrainConfig
from plexus.engine.serial import SerialModel
from plexus.engine.trainer import Trainer
from plexus_partition.launch.env import LaunchError
from plexus.train import main
from plexus.train.parser import explicit_options

ATOL = 1e-5


def directed_graph(n: int = 61, f: int = 13, c: int = 5, seed: int = 3) -> Graph:
    """A random directed graph (many edges without their reverse), sizes no axis divides."""
    rng = np.random.default_rng(seed)
    a = sp.random(n, n, density=0.08, random_state=seed, format="csr")
    labels = rng.integers(0, c, n)
    return Graph.from_scipy(a, rng.standard_normal((n, f)), labels, train=np.arange(0, 30),
                            val=np.arange(30, 45), test=np.arange(45, n), directed=True,
                            name="directed")


# ---- Graph constructors -------------------------------------------------------------------
def test_from_scipy_round_trip_with_one_direction_and_index_splits():
    cora = load_dataset("cora")
    upper = sp.triu(cora.adj, k=1)  # one direction of each undirected edge
    g = Graph.from_scipy(upper, torch.from_numpy(cora.features), torch.from_numpy(cora.labels),
                         train=np.flatnonzero(cora.train_mask), val=cora.val_mask,
                         test=torch.from_numpy(np.flatnonzero(cora.test_mask)), name="cora")
    assert not g.directed and g.num_classes == cora.num_classes
    assert (g.adj != cora.adj).nnz == 0  # both directions stored, as the loader does
    np.testing.assert_array_equal(g.features, cora.features)
    for k in ("train_mask", "val_mask", "test_mask", "labels"):
        np.testing.assert_array_equal(getattr(g, k), getattr(cora, k))


def test_from_scipy_keeps_directions_and_to_undirected_adds_them():
    g = directed_graph()
    assert g.directed and (g.adj != g.adj.T).nnz > 0
    u = g.to_undirected()
    assert not u.directed and (u.adj != u.adj.T).nnz == 0
    assert (u.adj - ((g.adj + g.adj.T) > 0)).nnz == 0


def test_from_pyg_duck_typed_round_trip():
    cora = load_dataset("cora")
    coo = cora.adj.tocoo()
    repeated = np.vstack([coo.row, coo.col])[:, :50]  # a repeated edge is still one edge
    data = SimpleNamespace(edge_index=torch.tensor(np.hstack([np.vstack([coo.row, coo.col]),
                                                              repeated])),
                           x=torch.from_numpy(cora.features),
                           y=torch.from_numpy(cora.labels).reshape(-1, 1),  # OGB's (N, 1)
                           train_mask=torch.from_numpy(cora.train_mask),
                           val_mask=torch.from_numpy(cora.val_mask),
                           test_mask=torch.from_numpy(cora.test_mask))
    g = Graph.from_pyg(data)
    assert not g.directed  # every edge has its reverse
    assert (g.adj != cora.adj).nnz == 0
    np.testing.assert_array_equal(g.labels, cora.labels)
    np.testing.assert_array_equal(g.test_mask, cora.test_mask)
    d = directed_graph().adj.tocoo()
    data2 = SimpleNamespace(edge_index=np.vstack([d.row, d.col]), x=np.ones((61, 2)),
                            y=np.zeros(61, np.int64))
    g2 = Graph.from_pyg(data2)
    assert g2.directed and not g2.train_mask.any()  # missing masks are empty


@pytest.mark.parametrize("kwargs, message", [
    ({"train": np.array([0, 99])}, "indices must lie in"),
    ({"train": np.ones(3, bool)}, "train mask has 3 entries"),
    ({"val": np.array([0.5])}, "bool mask or an array of node indices"),
])
def test_from_scipy_bad_splits(kwargs, message):
    with pytest.raises(DatasetError, match=message):
        Graph.from_scipy(sp.eye(4, format="csr"), np.zeros((4, 2)), np.zeros(4), **kwargs)


# ---- a user's loop on a grid --------------------------------------------------------------
def serial_reference(graph: Graph, cfg: ModelConfig, epochs: int):
    """The serial model after ``epochs`` of the same Adam; its logits, predictions and the
    last hidden layer's output, without dropout."""
    ser = SerialModel(graph, cfg, seed=0)
    Trainer(ser, TrainConfig(epochs=epochs, lr=0.01, weight_decay=5e-4, eval_every=0)).fit()
    ser.eval()
    with torch.no_grad():
        logits, H = ser(), ser(embeddings=True)
    return logits.numpy(), logits.argmax(1).numpy(), H.numpy()


def user_loop(grid, graphs, cfg, epochs, out_dir):
    """What a user writes: own Adam, own masks, results gathered on rank 0 and written by every
    rank; the OGB evaluator from per-rank counts; a gather refused when it would not fit."""
    from plexus.api.results import output_blocks
    from plexus.train.results import ogb_metric

    out = []
    for graph in graphs:
        model = plexus.distributed_model(graph, grid, cfg)
        opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
        for epoch in range(epochs):
            model.train()
            opt.zero_grad()
            model.loss(model(step=epoch)).backward()
            opt.step()
        mine = np.zeros(graph.num_nodes, bool)
        mine[::3] = True
        model.add_mask("every-third", mine)
        model.eval()
        with torch.no_grad():
            own_loss = float(model.loss(model(), "every-third"))
        results = plexus.gather_outputs(model, embeddings=True)
        single = (plexus.gather_predictions(model), plexus.gather_logits(model),
                  plexus.gather_embeddings(model))
        # on request, torch tensors: the same values from every gather function
        tensors = (plexus.gather_outputs(model, embeddings=True, as_tensor=True),
                   plexus.gather_predictions(model, as_tensor=True),
                   plexus.gather_logits(model, as_tensor=True),
                   plexus.gather_embeddings(model, as_tensor=True))
        saved = plexus.save_outputs(model, Path(out_dir) / f"{graph.name}-{grid.shape}",
                                    embeddings=True, extra={"epoch": epochs})
        metric = ogb_metric(model, "ogbn-arxiv", output_blocks(model, logits=False)["pred"])
        try:
            plexus.gather_logits(model, max_bytes=1000)
            refused = None
        except plexus.GatherTooLargeError as e:
            refused = str(e)
        out.append((results, single, own_loss, str(saved), metric, refused, tensors))
    return out if grid.rank == 0 else None


@pytest.fixture(scope="module")
def graphs():
    return [load_dataset("cora"), directed_graph()]


@pytest.mark.slow
@pytest.mark.parametrize("grid, order", [("1x2x1", "agg"), ("2x1x2", "auto")])
def test_gathered_results_equal_the_serial_model_in_original_order(graphs, grid, order, tmp_path):
    from ogb.nodeproppred import Evaluator

    cfg = ModelConfig(num_layers=3, hidden=6, dropout=0.5, order=order)
    epochs = 4
    got = plexus.launch(user_loop, graphs, cfg, epochs, str(tmp_path), grid=grid,
                        timeout_s=120)
    assert got is not None and len(got) == 2
    for graph, (results, single, own_loss, saved, metric, refused, tensors) in zip(graphs, got):
        logits, pred, hidden = serial_reference(graph, cfg, epochs)
        np.testing.assert_allclose(results["logits"], logits, atol=ATOL, rtol=1e-4)
        np.testing.assert_array_equal(results["pred"], pred)
        np.testing.assert_allclose(results["embeddings"], hidden, atol=ATOL, rtol=1e-4)
        assert results["logits"].shape == (graph.num_nodes, graph.num_classes)
        np.testing.assert_array_equal(single[0], results["pred"])
        np.testing.assert_array_equal(single[1], results["logits"])
        np.testing.assert_array_equal(single[2], results["embeddings"])
        whole, *one_each = tensors
        assert set(whole) == {"pred", "logits", "embeddings"}
        for name, tensor in [*whole.items(), *zip(("pred", "logits", "embeddings"), one_each)]:
            assert isinstance(tensor, torch.Tensor) and tensor.device.type == "cpu"
            assert tensor.dtype == torch.from_numpy(results[name]).dtype
            np.testing.assert_array_equal(tensor.numpy(), results[name])
        mine = np.arange(graph.num_nodes)[::3]
        mine = mine[graph.labels[mine] >= 0]
        want = torch.nn.functional.cross_entropy(torch.from_numpy(logits[mine]),
                                                 torch.from_numpy(graph.labels[mine]))
        assert own_loss == pytest.approx(float(want), abs=1e-5)
        # every rank's own rows, written in place: the gathered arrays exactly
        written = plexus.load_outputs(saved)
        assert written["epoch"] == epochs and written["num_nodes"] == graph.num_nodes
        for name in ("pred", "logits", "embeddings"):
            assert isinstance(written[name], np.memmap)
            np.testing.assert_array_equal(written[name], results[name])
        as_tensors = plexus.load_outputs(saved, as_tensor=True)
        for name in ("pred", "logits", "embeddings"):
            tensor = as_tensors[name]
            assert isinstance(tensor, torch.Tensor)
            np.testing.assert_array_equal(tensor.numpy(), results[name])
            tensor.zero_()  # copy-on-write: the file keeps its values
        np.testing.assert_array_equal(plexus.load_outputs(saved)["logits"], results["logits"])
        assert not [p for p in Path(saved).parent.iterdir() if p.name.startswith(".")]
        # the evaluator from per-rank counts: the evaluator on the gathered predictions
        test = graph.test_mask & (graph.labels >= 0)
        gathered = Evaluator("ogbn-arxiv").eval({"y_true": graph.labels[test].reshape(-1, 1),
                                                 "y_pred": results["pred"][test].reshape(-1, 1)})
        assert metric["value"] == pytest.approx(gathered["acc"], abs=1e-12)
        # too big to gather: one line that names the size and the per-rank writer
        assert refused is not None and "\n" not in refused
        assert f"{graph.num_nodes:,} nodes" in refused and "plexus.save_outputs" in refused
        assert f"{4 * graph.num_nodes * graph.num_classes / 1024:.1f} KiB" in refused


def api_traps(grid, graph):
    """What a PyG user tries: calling the model in training mode without a step, the kind by
    the command line's name, a misspelt option, an unknown kind."""
    from plexus_partition.model.model import ModelError

    out = {}
    model = plexus.distributed_model(graph, grid, "sage", hidden=8, dropout=0.5)
    out["kind"] = model.config.kind
    model.train()
    with torch.no_grad():
        first, second = model(), model()  # steps 0 and 1 of the internal count
        out["masks_differ"] = not torch.equal(first, second)
        out["same_as_explicit"] = (torch.equal(first, model(step=0))
                                   and torch.equal(second, model(step=1)))
        out["explicit_moves_count"] = torch.equal(model(), model(step=2))
        model.eval()
        out["eval_deterministic"] = torch.equal(model(), model())
    serial = SerialModel(graph, ModelConfig(kind="sage", hidden=8), seed=0).train()
    with torch.no_grad():
        out["serial_masks_differ"] = not torch.equal(serial(), serial())
    for name, call in (("kind_keyword", lambda: plexus.distributed_model(graph, grid,
                                                                           kind="sage")),
                       ("misspelt", lambda: plexus.distributed_model(graph, grid, hiden=8)),
                       ("unknown_kind", lambda: plexus.distributed_model(graph, grid, "sgae")),
                       ("bad_value", lambda: plexus.distributed_model(graph, grid, "gat",
                                                                       heads=0))):
        try:
            call()
            out[name] = None
        except (TypeError, ModelError) as e:
            out[name] = f"{type(e).__name__}: {e}"
    return out


def test_a_pyg_user_cannot_fall_into_the_api_traps():
    got = plexus.launch(api_traps, load_dataset("cora"), grid="1x1x1", timeout_s=120)
    assert got["kind"] == "sage"
    assert got["masks_differ"] and got["same_as_explicit"] and got["explicit_moves_count"]
    assert got["eval_deterministic"] and got["serial_masks_differ"]
    assert got["kind_keyword"].startswith("TypeError: the model kind is distributed_model("
                                          "graph, grid, model=...)")
    assert got["misspelt"].startswith("TypeError: unknown model option 'hiden'; the options "
                                      "are num_layers, hidden,")
    assert got["unknown_kind"] == ("ModelError: unknown model kind 'sgae'; use one of "
                                   + ", ".join(KINDS))  # every registered kind
    assert got["bad_value"] == "ModelError: heads must be an integer >= 1, got 0"


def test_init_outside_a_launcher_says_what_to_do(monkeypatch):
    for key in ("RANK", "WORLD_SIZE", "SLURM_PROCID"):
        monkeypatch.delenv(key, raising=False)
    with pytest.raises(LaunchError, match="plexus.launch"):
        plexus.init("1x1x1")


# ---- plexus-train results -----------------------------------------------------------------
def pyg_forward(payload: dict, graph: Graph) -> tuple[torch.Tensor, torch.Tensor]:
    """A plain PyG GCNConv stack loading an --export file: logits and last hidden output."""
    from torch_geometric.nn import GCNConv

    w = payload["pyg"]["widths"]
    net = torch.nn.Module()
    net.convs = torch.nn.ModuleList(GCNConv(a, b, bias=payload["pyg"]["bias"])
                                    for a, b in zip(w[:-1], w[1:]))
    net.load_state_dict(payload["state_dict"])  # strict: every name and shape matches
    coo = graph.adj.tocoo()
    edge_index = torch.tensor(np.vstack([coo.row, coo.col]), dtype=torch.long)
    x, hidden = torch.from_numpy(graph.features), None
    with torch.no_grad():
        for l, conv in enumerate(net.convs):
            x = conv(x, edge_index)
            if l < len(net.convs) - 1:
                x = hidden = x.relu()
    return x, hidden


RUN = ("--grid", "2x1x1", "--epochs", "60", "--lr", "0.05", "--quiet")
# `runs` starts plexus-train as a user does; the other runs call its main here (`train_here`):
# they test what a run computes and writes, which no process boundary changes (issue 58 item 5)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """Two runs of the same training: one exporting the final weights, one the best epoch's."""
    out = tmp_path_factory.mktemp("results")
    found = {}
    for name, extra in (("final", ()), ("best", ("--export-best",))):
        proc = train(*RUN, "--save-predictions", str(out / f"{name}-pred"), "--save-embeddings",
                     "--export", str(out / f"{name}.pt"), "--log-json", str(out / f"{name}.json"),
                     *extra)
        assert proc.returncode == 0, proc.stderr
        found[name] = {"summary": read_log(out / f"{name}.json")[1],
                       "pred": plexus.load_outputs(out / f"{name}-pred"),
                       "weights": torch.load(out / f"{name}.pt", weights_only=True),
                       "stdout": proc.stdout, "dir": out}
    return found


@pytest.mark.slow
def test_export_loads_into_pyg_and_reproduces_the_logits(runs):
    cora = load_dataset("cora")
    run = runs["final"]
    payload = run["weights"]
    assert payload["kind"] == "gcn" and payload["config"]["num_layers"] == 2
    assert payload["epoch"] == 60 and payload["best"] is False
    assert set(payload["state_dict"]) == {"convs.0.lin.weight", "convs.0.bias",
                                          "convs.1.lin.weight", "convs.1.bias"}
    logits, hidden = pyg_forward(payload, cora)
    np.testing.assert_allclose(logits.numpy(), run["pred"]["logits"], atol=1e-5, rtol=0)
    np.testing.assert_allclose(hidden.numpy(), run["pred"]["embeddings"], atol=1e-5, rtol=0)
    assert "weights written to" in run["stdout"] and "predictions written to" in run["stdout"]


@pytest.mark.slow
def test_saved_predictions_match_the_reported_accuracy(runs):
    cora = load_dataset("cora")
    run = runs["final"]
    pred, final = run["pred"]["pred"], run["summary"]["final"]
    assert pred.shape == (cora.num_nodes,) and int(run["pred"]["epoch"]) == 60
    np.testing.assert_array_equal(pred, run["pred"]["logits"].argmax(1))
    for mask, key in ((cora.train_mask, "train_acc"), (cora.val_mask, "val_acc"),
                      (cora.test_mask, "test_acc")):
        assert (pred[mask] == cora.labels[mask]).mean() == pytest.approx(final[key], abs=1e-12)


@pytest.mark.slow
def test_export_best_holds_the_best_validation_epoch(runs):
    cora = load_dataset("cora")
    best, final = runs["best"], runs["final"]
    summary = best["summary"]
    assert summary["best_epoch"] != summary["final"]["epoch"], "the setting must peak early"
    assert best["weights"]["epoch"] == summary["best_epoch"] and best["weights"]["best"] is True
    # the same training: identical final predictions, different exported weights
    np.testing.assert_array_equal(best["pred"]["logits"], final["pred"]["logits"])
    w_best, w_final = best["weights"]["state_dict"], final["weights"]["state_dict"]
    assert not torch.allclose(w_best["convs.0.lin.weight"], w_final["convs.0.lin.weight"])
    pred = pyg_forward(best["weights"], cora)[0].argmax(1).numpy()
    assert (pred[cora.val_mask] == cora.labels[cora.val_mask]).mean() == pytest.approx(
        summary["best_val_acc"], abs=1e-12)
    assert (pred[cora.test_mask] == cora.labels[cora.test_mask]).mean() == pytest.approx(
        summary["best_test_acc"], abs=1e-12)


@pytest.mark.slow
def test_ogb_metric_at_the_best_epoch_with_symmetrize(tmp_path):
    # Cora stored as a one-direction "ogbn-arxiv" npz: --symmetrize restores both directions
    cora = load_dataset("cora")
    a = sp.triu(cora.adj, k=1).tocsr()
    data = tmp_path / "ogbn-arxiv.npz"
    np.savez(data, adj_data=a.data, adj_indices=a.indices, adj_indptr=a.indptr,
             adj_shape=np.array(a.shape), attr_matrix=cora.features, labels=cora.labels,
             train_mask=cora.train_mask, val_mask=cora.val_mask, test_mask=cora.test_mask)
    log = tmp_path / "ogb.json"
    proc = train_here("--grid", "1x1x1", "--dataset", f"npz:{data}", "--symmetrize", *RUN[2:],
                      "--log-json", str(log))
    assert proc.returncode == 0, proc.stderr
    summary = read_log(log)[1]
    assert summary["dataset"] == "ogbn-arxiv.npz"  # named by its file, scored as OGB's arxiv
    assert summary["best_epoch"] != summary["final"]["epoch"]
    assert summary["ogb"]["value"] == pytest.approx(summary["final"]["test_acc"], abs=1e-12)
    assert summary["ogb_best"]["epoch"] == summary["best_epoch"]
    assert summary["ogb_best"]["value"] == pytest.approx(summary["best_test_acc"], abs=1e-12)
    assert "at the best validation epoch" in proc.stdout


# ---- options and recipes ------------------------------------------------------------------
@pytest.mark.parametrize("args, message", [
    (["--save-embeddings"], "--save-embeddings needs --save-predictions"),
    (["--export-best"], "--export-best needs --export"),
    (["--export", "/"], "--export /: is a directory"),
    (["--save-predictions", "/"], "--save-predictions /: is a folder of the system"),
    (["--save-predictions", "p.npz"], "outputs are a directory of .npy files"),
    (["--save-predictions", "p", "--save-embeddings", "--layers", "1"],
     "needs a hidden layer"),
    (["--symmetrize", "--shards", "/nonexistent"], "--symmetrize"),
    (["--recipe", "nope"], "invalid choice"),
])
def test_bad_result_options_are_one_line(args, message, capsys, monkeypatch, tmp_path):
    for key in ("RANK", "WORLD_SIZE", "SLURM_PROCID"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.chdir(tmp_path)
    assert main(["--grid", "1x1x1", *args]) == 2
    err = capsys.readouterr().err
    assert_one_line(err, prog="plexus-train")
    assert message in err


def test_recipes_follow_the_ogb_examples():
    arxiv, gcn, sage = (RECIPES[n] for n in ("ogbn-arxiv-gcn", "ogbn-products-gcn",
                                              "ogbn-products-sage"))
    for r in (arxiv, gcn, sage):  # the OGB examples
        assert r.model["num_layers"] == 3 and r.model["hidden"] == 256
        assert r.model["dropout"] == 0.5 and r.model["input_dropout"] is False
        assert r.train["lr"] == 0.01 and r.train["weight_decay"] == 0.0
        assert "ogb/examples/nodeproppred/" in r.source
    assert arxiv.train["epochs"] == 500 and arxiv.symmetrize and arxiv.model["norm"] == "batch"
    assert gcn.train["epochs"] == sage.train["epochs"] == 300
    assert "norm" not in gcn.model and sage.model["kind"] == "sage"
    paper = RECIPES["ogbn-papers100M-gcn"]  # the Plexus paper's GCN (hpcgroup/plexus)
    assert paper.dataset == "ogbn-papers100M" and "hpcgroup/plexus" in paper.source
    assert paper.model == {"kind": "gcn", "num_layers": 3, "hidden": 128, "bias": False,
                           "dropout": 0.0, "learnable_features": True}
    assert paper.train == {"lr": 0.003, "weight_decay": 0.0, "epochs": 10}
    assert not paper.symmetrize  # directed, aggregating over incoming edges
    assert explicit_options(["--grid", "1x1x1", "--epochs", "7"]) == {"grid", "epochs"}


def test_every_recipe_builds_and_an_unknown_option_is_one_clear_error():
    built = {name: r.model_config() for name, r in RECIPES.items()}
    assert built["ogbn-arxiv-gcn"].norm == "batch" and built["ogbn-arxiv-gcn"].kind == "gcn"
    assert built["ogbn-products-sage"].kind == "sage" and built["ogbn-products-sage"].aggregation == "mean"
    assert not any(cfg.input_dropout and cfg.dropout > 0 for cfg in built.values())
    from plexus.api.recipes import Recipe
    gat = built["ogbn-arxiv-gat"]
    assert (gat.kind, gat.num_layers, gat.hidden, gat.heads, gat.out_heads, gat.norm) == (
        "gat", 3, 250, 3, 3, "batch")
    with pytest.raises(RecipeError, match=r"needs model options .*k_steps=4"):
        Recipe("sgc", "cora", "nowhere", model={"k_steps": 4}).model_config()
    with pytest.raises(RecipeError, match=r"recipe sgc: hops is an option of the appnp model"):
        Recipe("sgc", "cora", "nowhere", model={"hops": 4}).model_config()
    with pytest.raises(RecipeError, match=r"recipe bad: heads is an option of the gat model"):
        Recipe("bad", "cora", "nowhere", model={"heads": 4}).model_config()


@pytest.mark.slow
def test_summary_json_names_the_files(runs):
    summary = runs["best"]["summary"]
    out = runs["best"]["dir"]
    assert Path(summary["export_file"]) == out / "best.pt"
    assert Path(summary["predictions_file"]) == out / "best-pred"
    assert not list(out.glob(".*"))  # written atomically, nothing left behind
    # the second run of the same training reads the store the first partitioned the graph into
    assert summary["cache"]["built"] is False
    assert summary["cache"]["store"] == runs["final"]["summary"]["cache"]["store"]
    json.dumps(summary)


@pytest.mark.slow
def test_export_best_survives_a_resume(runs, tmp_path):
    # stop just after the best epoch of the 60-epoch run, resume to 60: the checkpoint carries
    # the best epoch's weights, so the export equals the uninterrupted run's
    best = runs["best"]
    stop = best["summary"]["best_epoch"] + 1
    assert stop < 60, "the setting must peak before the last epoch"
    ck, out = tmp_path / "ck", tmp_path / "resumed.pt"
    first = train_here(*RUN[:2], "--epochs", str(stop), *RUN[4:], "--checkpoint", str(ck),
                       "--export-best", "--export", str(tmp_path / "first.pt"))
    assert first.returncode == 0, first.stderr
    proc = train_here(*RUN, "--checkpoint", str(ck), "--resume", "--export-best", "--export",
                      str(out))
    assert proc.returncode == 0, proc.stderr
    got = torch.load(out, weights_only=True)
    assert got["epoch"] == best["weights"]["epoch"]
    for name, tensor in best["weights"]["state_dict"].items():
        torch.testing.assert_close(got["state_dict"][name], tensor, atol=1e-6, rtol=0)


@pytest.mark.slow
def test_export_best_refuses_a_checkpoint_without_the_best_weights(tmp_path):
    ck = tmp_path / "ck"
    first = train_here(*RUN[:2], "--epochs", "5", *RUN[4:], "--checkpoint", str(ck))
    assert first.returncode == 0, first.stderr
    proc = train_here(*RUN, "--checkpoint", str(ck), "--resume", "--export-best", "--export",
                      str(tmp_path / "w.pt"))
    assert proc.returncode == 2
    assert_one_line(proc.stderr, "does not hold the weights of its best")
    assert not (tmp_path / "w.pt").exists()


def test_a_recipe_sets_what_the_command_line_does_not(monkeypatch):
    from plexus.api.recipes import Recipe
    from plexus_partition.launch.env import JobEnv
    from plexus.train.cli import build_plan, build_parser

    monkeypatch.setitem(RECIPES, "test-recipe", Recipe(
        "test-recipe", "ogbn-arxiv", "a test", model={"num_layers": 3, "hidden": 32,
                                                      "bias": False},
        train={"epochs": 7, "lr": 0.02}, symmetrize=True))
    argv = ["--grid", "1x1x1", "--recipe", "test-recipe", "--hidden", "8", "--epochs", "9"]
    args = build_parser().parse_args(argv)  # the recipe applied as the options are parsed
    assert args.explicit == {"grid", "recipe", "hidden", "epochs"}
    env = JobEnv("torchrun", 0, 1, 0, 1, "127.0.0.1", 29500)  # a launched rank: cheap checks
    opts = build_plan(args, env)
    assert (opts.model.num_layers, opts.model.hidden, opts.model.bias) == (3, 8, False)
    assert (opts.train.epochs, opts.train.lr) == (9, 0.02)
    assert opts.symmetrize and opts.dataset == "ogbn-arxiv"


def _tiny_ogb_arxiv(root: Path) -> None:
    """A 7-node ogbn-arxiv in OGB's raw CSV layout (directed: OGB adds no inverse edges)."""
    import gzip

    def write(rel: str, rows) -> None:
        path = root / "ogbn_arxiv" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        with gzip.open(path, "wt") as f:
            f.writelines(",".join(str(v) for v in np.atleast_1d(r)) + "\n" for r in rows)

    edges = [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 6), (6, 0), (0, 3)]
    write("raw/edge.csv.gz", edges)
    write("raw/num-node-list.csv.gz", [7])
    write("raw/num-edge-list.csv.gz", [len(edges)])
    write("raw/node-feat.csv.gz", np.random.default_rng(0).standard_normal((7, 4)).round(3))
    write("raw/node-label.csv.gz", [[i % 3] for i in range(7)])
    write("raw/node_year.csv.gz", [[2000 + i] for i in range(7)])
    for part, ids in (("train", [0, 1, 2]), ("valid", [3, 4]), ("test", [5, 6])):
        write(f"split/time/{part}.csv.gz", ids)
    (root / "ogbn_arxiv" / "RELEASE_v1.txt").touch()


@pytest.mark.slow
def test_symmetrize_trains_on_the_undirected_graph(tmp_path, monkeypatch):
    import builtins

    monkeypatch.setattr(builtins, "input", lambda *a: pytest.fail("ogb asked on stdin"))
    _tiny_ogb_arxiv(tmp_path)
    graph = load_dataset("ogbn-arxiv", root=str(tmp_path))
    assert graph.directed
    got = {}
    for name, flags in (("directed", ()), ("symmetrized", ("--symmetrize",))):
        out = tmp_path / f"{name}-pred"
        proc = train_here("--grid", "1x1x1", "--dataset", "ogbn-arxiv", "--root", str(tmp_path),
                          "--epochs", "0", "--quiet", "--save-predictions", str(out), *flags)
        assert proc.returncode == 0, proc.stderr
        got[name] = plexus.load_outputs(out)["logits"]
    for name, g in (("directed", graph), ("symmetrized", graph.to_undirected())):
        ser = SerialModel(g, ModelConfig(), seed=0).eval()
        with torch.no_grad():
            np.testing.assert_allclose(got[name], ser().numpy(), atol=ATOL, rtol=1e-4)
    assert not np.allclose(got["directed"], got["symmetrized"], atol=1e-3)


@pytest.mark.slow
@pytest.mark.parametrize("model", [("--model", "sage", "--norm", "batch"),
                                   ("--model", "gin", "--norm", "batch", "--layers", "3"),
                                   ("--residual", "--norm", "batch", "--layers", "3"),
                                   ("--model", "gat", "--heads", "2", "--out-heads", "3",
                                    "--norm", "batch", "--hidden", "5", "--attn-dropout", "0.2"),
                                   ("--model", "gat", "--heads", "2", "--hidden", "4",
                                    "--activation", "elu")],
                         ids=["sage-batchnorm", "gin-batchnorm", "gcn-residual-batchnorm",
                              "gat-batchnorm", "gat-elu"])
def test_every_model_kind_exports_to_its_pyg_stack(model, tmp_path):
    """--export of SAGE, GIN, GAT and GCN with BatchNorm and residual connections, and GAT with
    --activation elu (the GAT paper's), from two ranks:
    `plexus.load_pyg` rebuilds PyG's stack of SAGEConv / GINConv / GATConv / GCNConv and
    BatchNorm1d (weights loaded strictly), whose logits and last hidden output equal the saved
    ones."""
    cora = load_dataset("cora")
    proc = train_here("--grid", "1x2x1", "--epochs", "12", "--quiet", "--save-predictions",
                      str(tmp_path / "p"), "--save-embeddings", "--export", str(tmp_path / "w.pt"),
                      *model)
    assert proc.returncode == 0, proc.stderr
    saved = plexus.load_outputs(tmp_path / "p")
    stack = plexus.load_pyg(tmp_path / "w.pt")
    assert not stack.training
    seen = []
    stack.convs[-1].register_forward_pre_hook(lambda _m, args: seen.append(args[0]))
    coo = cora.adj.tocoo()
    edge_index = torch.tensor(np.vstack([coo.row, coo.col]), dtype=torch.long)
    with torch.no_grad():
        logits = stack(torch.from_numpy(cora.features), edge_index)
    # GIN sums its neighbours: logits reach tens, so rounding is relative there
    np.testing.assert_allclose(logits.numpy(), saved["logits"], atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(seen[0].numpy(), saved["embeddings"], atol=1e-5, rtol=1e-5)


# ---- plexus.load_pyg: exports that rebuild themselves ------------------------------------
# Every kind, with BatchNorm and residual connections where the kind has them.
EXPORT_KINDS = {
    "gcn": dict(),
    "gcn-residual-batchnorm": dict(num_layers=3, residual=True, norm="batch"),
    "sage-batchnorm": dict(model="sage", norm="batch"),
    "gin": dict(model="gin", num_layers=3, train_eps=False),
    "gin-batchnorm": dict(model="gin", norm="batch", hidden=12),
    "gat-batchnorm": dict(model="gat", heads=2, out_heads=3, hidden=5, norm="batch",
                          attn_dropout=0.2),
    "mlp": dict(model="mlp"),
    "graphconv-batchnorm": dict(model="graphconv", norm="batch"),
    "mlp-batchnorm": dict(model="mlp", num_layers=3, norm="batch", bias=False),
    # the activations: the file names each, and its PyG model applies the same
    "gat-elu": dict(model="gat", heads=2, hidden=4, activation="elu"),
    "gin-gelu": dict(model="gin", activation="gelu"),
    "sage-leaky_relu-batchnorm": dict(model="sage", norm="batch", activation="leaky_relu"),
    "gcn-tanh": dict(num_layers=3, activation="tanh"),
    "gcn-none": dict(activation="none"),
}


def train_and_export(grid, graph, options, path):
    """A few epochs of a user's loop, then the export and the gathered logits (a tensor)."""
    model = plexus.distributed_model(graph, grid, seed=1, **options)
    opt = torch.optim.Adam(model.parameters(), lr=0.02)
    for epoch in range(3):
        model.train()
        opt.zero_grad()
        model.loss(model(step=epoch), mask="train").backward()
        opt.step()
    plexus.save_weights(model, path)
    return plexus.gather_logits(model, as_tensor=True)


def readme_load_snippet() -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    found = re.search(r"rebuilds its own PyG model:.*?```python\n(.*?)```", text, re.DOTALL)
    assert found, "the README's load_pyg snippet is gone"
    return found.group(1)


@pytest.mark.parametrize("name", list(EXPORT_KINDS))
def test_load_pyg_rebuilds_every_kind_and_the_readme_snippet_runs(name, tmp_path, monkeypatch):
    """export → `plexus.load_pyg` (through the README's snippet, as written) → PyG's logits equal
    Plexus's, for every kind; the file records every module's widths."""
    cora = load_dataset("cora")
    options = EXPORT_KINDS[name]
    want = plexus.launch(train_and_export, cora, options, str(tmp_path / "gcn.pt"),
                         grid="1x1x1", timeout_s=300)
    assert isinstance(want, torch.Tensor) and want.shape == (cora.num_nodes, cora.num_classes)
    monkeypatch.chdir(tmp_path)
    scope = {"plexus": plexus, "torch": torch, "np": np, "graph": cora}
    with torch.no_grad():
        exec(readme_load_snippet(), scope)  # noqa: S102 - the README's own code
    model, got = scope["model"], scope["logits"]
    assert isinstance(model, torch.nn.Module) and not model.training
    # GIN sums its neighbours: logits reach tens, so rounding is relative there
    torch.testing.assert_close(got, want, atol=1.5e-5, rtol=1e-5)
    spec = torch.load(tmp_path / "gcn.pt", weights_only=True)["pyg"]
    assert spec["norm"] == options.get("norm", "none")
    assert spec["activation"] == options.get("activation", "relu")
    norms = [layer["norm"] for layer in spec["layers"]]
    if options.get("norm") == "batch":
        assert [n["num_features"] for n in norms[:-1]] == spec["widths"][1:-1]
        assert all(n["class"] == "BatchNorm1d" for n in norms[:-1]) and norms[-1] is None
        assert len(model.bns) == len(norms) - 1
    else:
        assert not any(norms) and model.bns is None


def test_gin_export_records_its_inner_mlp(tmp_path):
    """The widths issue 25 found missing: GIN's MLP is Linear(in, hidden), ReLU,
    Linear(hidden, out) in every layer, hidden wide inside."""
    cora = load_dataset("cora")
    plexus.launch(train_and_export, cora, EXPORT_KINDS["gin-batchnorm"], str(tmp_path / "g.pt"),
                  grid="1x1x1", timeout_s=300)
    layers = torch.load(tmp_path / "g.pt", weights_only=True)["pyg"]["layers"]
    mlps = [[(m["class"], m.get("in_features"), m.get("out_features"))
             for m in layer["conv"]["nn"]] for layer in layers]
    assert mlps == [[("Linear", 1433, 12), ("ReLU", None, None), ("Linear", 12, 12)],
                    [("Linear", 12, 12), ("ReLU", None, None), ("Linear", 12, 7)]]
    assert layers[0]["conv"]["train_eps"] is True
    assert layers[0]["norm"] == {"class": "BatchNorm1d", "num_features": 12, "eps": 1e-5,
                                 "momentum": 0.1}


def test_load_pyg_refuses_what_is_no_export_in_one_line(tmp_path):
    from plexus.api import ExportError

    not_export = tmp_path / "other.pt"
    torch.save({"weights": torch.zeros(3)}, not_export)
    cora = load_dataset("cora")
    good = tmp_path / "gcn.pt"
    plexus.launch(train_and_export, cora, {}, str(good), grid="1x1x1", timeout_s=300)
    payload = torch.load(good, weights_only=True)
    # a file from before the modules were described (plexus-weights/1) is rebuilt from its config
    old = tmp_path / "old.pt"
    torch.save(dict(payload, format="plexus-weights/1", pyg={
        "class": "GCNConv", "in_channels": 1433, "out_channels": 7, "widths": [1433, 16, 7],
        "norm": None, "layers": [{"in_channels": 1433, "out_channels": 16},
                                 {"in_channels": 16, "out_channels": 7}]}), old)
    assert [c.out_channels for c in plexus.load_pyg(old).convs] == [16, 7]
    payload["state_dict"]["convs.0.lin.weight"] = torch.zeros(3, 3)
    wrong = tmp_path / "wrong.pt"
    torch.save(payload, wrong)
    (tmp_path / "text.pt").write_text("not a weights file")
    for path, needle in ((tmp_path / "missing.pt", "no such file"),
                         (not_export, "not a Plexus weights export"),
                         (tmp_path / "text.pt", "not a readable weights file"),
                         (wrong, "its weights do not fit the model it describes")):
        with pytest.raises(ExportError) as err:
            plexus.load_pyg(path)
        assert needle in str(err.value) and str(path) in str(err.value)
        assert_one_line(err)


def test_graph_repr_is_one_line_and_ogb_evaluate_is_the_official_metric():
    import plexus
    from plexus_datasets import DatasetError

    cora = plexus.load_dataset("cora")
    assert repr(cora) == ("Graph('cora': 2,708 nodes, 10,556 edges (undirected), 1,433 features, "
                          "7 classes, train/val/test 140/500/1,000)")
    rng = np.random.default_rng(0)
    pred = np.where(rng.random(cora.num_nodes) < 0.7, cora.labels, 0)
    t = cora.test_mask
    got = plexus.ogb_evaluate(cora, pred, "test", name="ogbn-arxiv")
    assert got["name"] == "ogbn-arxiv" and got["metric"] == "acc"
    assert got["value"] == pytest.approx(float((pred[t] == cora.labels[t]).mean()))
    assert plexus.ogb_evaluate(cora, pred, cora.val_mask, name="ogbn-arxiv")["value"] == \
        pytest.approx(float((pred[cora.val_mask] == cora.labels[cora.val_mask]).mean()))
    with pytest.raises(DatasetError, match="not an OGB node-property dataset"):
        plexus.ogb_evaluate(cora, pred)  # cora is no OGB dataset
    with pytest.raises(DatasetError, match="rows for 2708 nodes"):
        plexus.ogb_evaluate(cora, pred[:10], name="ogbn-arxiv")
