"""ogbn-papers100M's path, end to end at a small scale (issue 22): the stand-in written in the exact
raw layout (float16 features, most nodes unlabelled, the time split) is converted and partitioned
out of core by plexus-partition, trained by plexus-train on 2x1x2 with the paper's recipe, every
rank writes its own rows of the predictions, and OGB's evaluator computed from per-rank counts
equals the evaluator run on the written predictions. Both tools' mains are called in this process
(the run's ranks are processes): the path under test is the data's, and the console scripts'
processes are tested end to end elsewhere (issue 58 item 5)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from ogb.nodeproppred import Evaluator

from cli_helpers import read_log, tool_here, train_here
from plexus.api import load_outputs
from plexus_datasets.ogb_loader import load_ogb
from plexus_datasets.standin import write_papers100m_standin

pytestmark = pytest.mark.slow  # worlds or end-to-end runs: left out of the fast subset


def test_papers100m_standin_converts_partitions_trains_and_evaluates(tmp_path):
    root, store, pred, log = (tmp_path / "root", tmp_path / "store", tmp_path / "pred",
                              tmp_path / "log.json")
    write_papers100m_standin(root, num_nodes=1200)
    done = tool_here("plexus-partition", "--dataset", "ogbn-papers100M", "--root", str(root),
                     "--grid", "2x1x2", "--layers", "3", "--out", str(store))
    assert done.returncode == 0, done.stderr
    assert json.loads((store / "manifest.json").read_text())["dataset"] == "ogbn-papers100M"

    done = train_here("--shards", str(store), "--recipe", "ogbn-papers100M-gcn", "--epochs", "3",
                      "--save-predictions", str(pred), "--log-json", str(log), "--quiet")
    assert done.returncode == 0, done.stderr
    _, summary = read_log(log)
    assert summary["grid"] == "2x1x2" and summary["predictions_file"] == str(pred)

    graph = load_ogb("ogbn-papers100M", root)  # the reference: ogb's own reading of the files
    out = load_outputs(pred)
    assert out["pred"].shape == (graph.num_nodes,)
    assert out["logits"].shape == (graph.num_nodes, graph.num_classes)
    np.testing.assert_array_equal(out["pred"], np.asarray(out["logits"]).argmax(1))
    test = graph.test_mask & (graph.labels >= 0)
    assert 0 < test.sum() < 0.5 * graph.num_nodes  # most nodes unlabelled, as in papers100M
    want = Evaluator("ogbn-papers100M").eval({"y_true": graph.labels[test].reshape(-1, 1),
                                              "y_pred": out["pred"][test].reshape(-1, 1)})["acc"]
    assert summary["ogb"]["name"] == "ogbn-papers100M"
    assert abs(summary["ogb"]["value"] - want) < 1e-12
    assert abs(summary["final"]["test_acc"] - summary["ogb"]["value"]) < 1e-9
