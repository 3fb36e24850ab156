"""Multi-label node tasks and ogbn-proteins: labels as a node×task matrix through the input
checks, the partitioner and a shard store; OGB's ROC-AUC rule.

The engine's multi-label loss, gradients and ROC-AUC against the serial model on every grid
(undirected and directed) are in tests/engine_checks.py (run by test_engine.py); the serial
model against PyG and ogb's Evaluator in test_pyg_reference.py.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from engine_checks import multilabel_graph, toy_graph
from plexus.datasets import DatasetError, Graph
from plexus.engine.rocauc import mean_rocauc, serial_rocauc
from plexus.partitioners import read_shard, shard_graph
from plexus.partitioners.store import write_store


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
        got = read_shard(tmp_path / "store", shape, coords, layers)
        want = shard_graph(mgraph, shape, coords, layers, "agg", got.perm, seed=3)
        for s in (got, want):
            assert s.multilabel and s.labels.dtype == np.int8
            ids = s.output_ids
            assert np.array_equal(s.labels[ids >= 0], mgraph.labels[ids[ids >= 0]])
            assert (s.labels[ids < 0] == -1).all()
        assert np.array_equal(got.labels, want.labels)


def test_ogb_rule_skips_tasks_without_both_labels():
    labels = np.array([[1, 0, -1], [0, 0, 1], [1, 0, -1], [-1, 0, 0]], dtype=np.int8)
    scores = np.array([[0.9, 0.1, 0.3], [0.2, 0.5, 0.8], [0.4, 0.2, 0.1], [0.7, 0.3, 0.6]])
    per_task = serial_rocauc(labels, scores)
    assert per_task[0] == 1.0 and np.isnan(per_task[1]) and per_task[2] == 1.0
    assert mean_rocauc(per_task) == 1.0 and mean_rocauc(per_task[1:2]) is None
