"""Multi-label node tasks and ogbn-proteins: labels as a node×task matrix through the input
checks, the partitioner and a shard store; OGB's ROC-AUC rule; the proteins stand-in in OGB's
raw layout, the loader (node features from edge features, the species split, missing labels),
and the stand-in through plexus-train on a grid to OGB's ROC-AUC evaluator.

The engine's multi-label loss, gradients and ROC-AUC against the serial model on every grid
(undirected and directed) are in tests/engine_checks.py (run by test_engine.py); the serial
model against PyG and ogb's Evaluator in test_pyg_reference.py.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import torch

from cli_helpers import read_log, train
from helpers import assert_one_line
from engine_checks import multilabel_graph, toy_graph
from plexus.api import load_outputs
from plexus_datasets import DatasetError, Graph, load_dataset
from plexus_datasets.ogb_loader import mean_incoming
from plexus_datasets.proteins_standin import SPECIES, TASKS, write_proteins_standin
from plexus.engine.rocauc import mean_rocauc, serial_rocauc
from plexus_partition import partition_to_store, read_shard, shard_graph
from plexus_partition.store import write_store


@pytest.fixture(scope="module")
def mgraph() -> Graph:
    return multilabel_graph(toy_graph(), tasks=7)


def test_from_scipy_takes_a_task_matrix_with_missing_labels():
    adj = sp.csr_matrix(np.array([[0, 1, 0], [1, 0, 1], [0, 1, 0]], dtype=np.float32))
    y = np.array([[1, 0], [np.nan, 1], [0, -1]])
    g = Graph.from_scipy(adj, np.ones((3, 2)), y, train=[0, 1], test=[2], multilabel=True)
    assert g.multilabel and g.num_classes == 2 and g.labels.dtype == np.int8
    assert g.labels.tolist() == [[1, 0], [-1, 1], [0, -1]]  # NaN and -1: missing
    for labels, kw, needle in ((y * 2, {}, "must be 0, 1 or missing"),
                               (y[:2], {}, "(3, tasks)"),
                               (y, {"num_classes": 3}, "2 tasks")):
        with pytest.raises(DatasetError, match=needle.replace("(", r"\(").replace(")", r"\)")):
            Graph.from_scipy(adj, np.ones((3, 2)), labels, multilabel=True, **kw)
    with pytest.raises(DatasetError, match="expected"):  # without multilabel: still refused
        Graph.from_scipy(adj, np.ones((3, 2)), y)


def test_multilabel_graph_validation(mgraph):
    g = mgraph
    assert g.multilabel and (g.labels == -1).any() and g.train_mask[0] and (g.labels[0] == -1).all()
    bad = np.where(g.labels == 1, 3, g.labels).astype(np.int8)
    for labels, needle in ((bad, "must be 0, 1 or -1"), (g.labels.astype(np.int64), "int8"),
                           (g.labels[:, :5], "shape")):
        with pytest.raises(DatasetError, match=needle):
            Graph("p", g.adj, g.features, labels, g.train_mask, g.val_mask, g.test_mask,
                  g.num_classes).validate()


def test_multilabel_shards_in_memory_and_through_a_store(tmp_path, mgraph):
    shape, layers = {"x": 2, "y": 1, "z": 2}, 2
    write_store(mgraph, tmp_path / "store", shape, layers, seed=3)
    for coords in ({"x": 0, "y": 0, "z": 0}, {"x": 1, "y": 0, "z": 1}):
        got = read_shard(tmp_path / "store", coords)
        want = shard_graph(mgraph, shape, coords, layers, "agg", got.perm, seed=3)
        for s in (got, want):
            assert s.multilabel and s.labels.dtype == np.int8
            ids = s.output_ids
            assert np.array_equal(s.labels[ids >= 0], mgraph.labels[ids[ids >= 0]])
            assert (s.labels[ids < 0] == -1).all()
        assert np.array_equal(got.labels, want.labels)
    # several processes share a graph directory, which holds one class per node: refused
    with pytest.raises(DatasetError, match="multi-label") as e:
        partition_to_store(mgraph, tmp_path / "jobs2", shape, layers, jobs=2)
    assert_one_line(e)
    assert not (tmp_path / "jobs2").exists()


def test_ogb_rule_skips_tasks_without_both_labels():
    labels = np.array([[1, 0, -1], [0, 0, 1], [1, 0, -1], [-1, 0, 0]], dtype=np.int8)
    scores = np.array([[0.9, 0.1, 0.3], [0.2, 0.5, 0.8], [0.4, 0.2, 0.1], [0.7, 0.3, 0.6]])
    per_task = serial_rocauc(labels, scores)
    assert per_task[0] == 1.0 and np.isnan(per_task[1]) and per_task[2] == 1.0
    assert mean_rocauc(per_task) == 1.0 and mean_rocauc(per_task[1:2]) is None
    # the rank statistic is scikit-learn's trapezoid area (what OGB calls), ties included
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(0)
    for decimals in (0, 1, 3):
        y = rng.integers(-1, 2, 300).astype(np.int8)
        s = np.round(rng.standard_normal(300), decimals)
        want = roc_auc_score(y[y >= 0], s[y >= 0])
        assert serial_rocauc(y[:, None], s[:, None])[0] == pytest.approx(want, abs=1e-12)


# ------------------------------------------------------------------------------- ogbn-proteins

NODES, DEGREE, MISSING = 400, 16, 0.02


def _csv(path: Path) -> np.ndarray:
    return pd.read_csv(path, header=None, compression="gzip").values


@pytest.fixture(scope="module")
def standin(tmp_path_factory) -> Path:
    """A small stand-in with 2% of the labels missing (its root directory)."""
    root = tmp_path_factory.mktemp("proteins")
    write_proteins_standin(root, NODES, DEGREE, missing=MISSING, seed=1)
    return root


@pytest.fixture(scope="module")
def proteins(standin) -> Graph:
    return load_dataset("ogbn-proteins", root=str(standin))


def test_standin_has_the_raw_layout_ogb_reads(standin):
    d = standin / "ogbn_proteins"
    raw = {p.name for p in (d / "raw").iterdir()}
    assert raw == {"edge.csv.gz", "edge-feat.csv.gz", "node-label.csv.gz",
                   "node_species.csv.gz", "num-node-list.csv.gz", "num-edge-list.csv.gz"}
    assert {p.name for p in (d / "split/species").iterdir()} == {
        "train.csv.gz", "valid.csv.gz", "test.csv.gz"}
    assert (d / "RELEASE_v1.txt").is_file()
    edges, feats = _csv(d / "raw/edge.csv.gz"), _csv(d / "raw/edge-feat.csv.gz")
    assert edges.shape == (NODES * DEGREE // 2, 2) and feats.shape == (len(edges), 8)
    assert (edges[:, 0] < edges[:, 1]).all()  # each undirected edge once: ogb adds the reverse
    assert ((feats > 0) & (feats <= 1)).all()
    with gzip.open(d / "raw/node-label.csv.gz", "rt") as f:
        rows = [line.rstrip("\n").split(",") for line in f]
    assert len(rows) == NODES and {len(r) for r in rows} == {TASKS}
    empty = sum(v == "" for r in rows for v in r)
    assert 0 < empty < 2 * MISSING * NODES * TASKS
    species = _csv(d / "raw/node_species.csv.gz")[:, 0]
    parts = {p: _csv(d / f"split/species/{p}.csv.gz")[:, 0] for p in ("train", "valid", "test")}
    assert sorted(np.concatenate(list(parts.values())).tolist()) == list(range(NODES))
    seen = [set(species[ids]) for ids in parts.values()]  # split by species: none shared
    assert seen[0] | seen[1] | seen[2] == set(SPECIES)
    assert not (seen[0] & seen[1]) and not (seen[1] & seen[2]) and not (seen[0] & seen[2])
    again = write_proteins_standin(standin / "again", NODES, DEGREE, missing=MISSING, seed=1)
    for name in ("raw/edge.csv.gz", "raw/node-label.csv.gz", "split/species/test.csv.gz"):
        assert (again / name).read_bytes() == (d / name).read_bytes()  # seeded, byte for byte


def test_loader_builds_the_official_example_inputs(standin, proteins):
    d, graph = standin / "ogbn_proteins", proteins
    edges, feats = _csv(d / "raw/edge.csv.gz"), _csv(d / "raw/edge-feat.csv.gz")
    assert graph.name == "ogbn-proteins" and not graph.directed and graph.multilabel
    assert graph.num_classes == TASKS and graph.labels.shape == (NODES, TASKS)
    assert graph.num_edges == 2 * len(edges)  # both directions stored
    # OGB's example: data.x = adj_t.mean(dim=1) over the edge features, both directions
    from torch_geometric.utils import scatter

    both = torch.from_numpy(np.concatenate([edges, edges[:, ::-1]]).T.copy())
    x = scatter(torch.from_numpy(np.concatenate([feats, feats])).float(), both[1], dim=0,
                dim_size=NODES, reduce="mean")
    np.testing.assert_allclose(graph.features, x.numpy(), rtol=1e-5, atol=1e-7)
    with gzip.open(d / "raw/node-label.csv.gz", "rt") as f:
        raw = np.array([[float(v) if v else np.nan for v in line.rstrip("\n").split(",")]
                        for line in f])
    assert ((graph.labels == -1) == np.isnan(raw)).all()
    assert (graph.labels[~np.isnan(raw)] == raw[~np.isnan(raw)]).all()
    train_ids = _csv(d / "split/species/train.csv.gz")[:, 0]
    assert np.flatnonzero(graph.train_mask).tolist() == sorted(train_ids.tolist())
    assert any("missing" in n for n in graph.notes)


def test_mean_incoming_counts_every_stored_edge():
    edge_index = np.array([[1, 2, 2, 0], [0, 0, 0, 1]])  # (2 -> 0) twice: counted twice
    feat = np.array([[1.0, 0], [2, 2], [4, 6], [8, 1]], dtype=np.float32)
    out = mean_incoming(edge_index, feat, 3, "x")
    np.testing.assert_allclose(out, [[7 / 3, 8 / 3], [8, 1], [0, 0]])
    with pytest.raises(DatasetError, match="edge_feat has shape"):
        mean_incoming(edge_index, feat[:3], 3, "x")


def test_loader_refuses_a_missing_or_bad_file(tmp_path):
    d = write_proteins_standin(tmp_path / "a", 64, 6, seed=2)
    (d / "raw/edge-feat.csv.gz").unlink()
    with pytest.raises(DatasetError, match="raw/edge-feat.csv.gz") as e:
        load_dataset("ogbn-proteins", root=str(tmp_path / "a"))
    assert_one_line(e)
    with pytest.raises(DatasetError, match="needs root=DIR"):
        load_dataset("ogbn-proteins")
    d = write_proteins_standin(tmp_path / "b", 64, 6, seed=2)
    with gzip.open(d / "raw/node-label.csv.gz", "wt") as f:
        f.write("".join(",".join(["2"] * TASKS) + "\n" for _ in range(64)))
    with pytest.raises(DatasetError, match="must be 0, 1 or missing"):
        load_dataset("ogbn-proteins", root=str(tmp_path / "b"))


@pytest.mark.slow
def test_standin_through_plexus_train_on_a_grid_to_ogbs_evaluator(standin, tmp_path):
    """loader -> partition (a shard store) -> train on 2x1x1 -> OGB's Evaluator; its test
    ROC-AUC at the last and at the best-validation epoch equals the engine's own."""
    log = tmp_path / "run.json"
    proc = train("--dataset", "ogbn-proteins", "--root", str(standin), "--grid", "2x1x1",
                 "--recipe", "ogbn-proteins-sage", "--hidden", "16", "--epochs", "10",
                 "--cache", str(tmp_path / "cache"), "--log-json", str(log),
                 "--save-predictions", str(tmp_path / "out"), timeout=600)
    assert proc.returncode == 0, proc.stderr
    records, summary = read_log(log)
    assert summary["metric"] == "rocauc" and summary["dataset"] == "ogbn-proteins"
    assert [r["epoch"] for r in records if r["val_acc"] is not None] == [5, 10]  # every 5
    ogb = summary["ogb"]
    assert ogb["metric"] == "rocauc" and 0.0 < ogb["value"] < 1.0
    assert ogb["value"] == pytest.approx(summary["final"]["test_acc"], abs=1e-9)
    best = summary["ogb_best"]
    assert best["epoch"] == summary["best_epoch"]
    assert best["value"] == pytest.approx(summary["best_test_acc"], abs=1e-9)
    assert "OGB evaluator (ogbn-proteins): test rocauc" in proc.stdout
    out = load_outputs(tmp_path / "out")  # every rank wrote its rows: 0/1 per task
    assert out["pred"].shape == (NODES, TASKS) and out["pred"].dtype == np.int8
    # the run's vectorised ROC-AUC is ogb's Evaluator's on the same logits (the final epoch's)
    from ogb.nodeproppred import Evaluator
    graph = load_dataset("ogbn-proteins", str(standin))
    test = np.asarray(graph.test_mask)
    truth = np.asarray(graph.labels, dtype=np.float64)[test]
    official = Evaluator("ogbn-proteins").eval({"y_true": np.where(truth < 0, np.nan, truth),
                                                "y_pred": np.asarray(out["logits"])[test]})
    assert ogb["value"] == pytest.approx(official["rocauc"], abs=1e-6)
    assert np.array_equal(out["pred"], (out["logits"] > 0).astype(np.int8))
