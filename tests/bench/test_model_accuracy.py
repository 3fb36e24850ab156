"""benchmarks/model_accuracy.py's synthetic graph: the contextual SBM it writes has the stated
shape (class sizes, split, edge counts, homophily, class means) and reads back through
``load_dataset("npz:...")`` as exactly the arrays written, so Plexus and PyG train on the same
graph. The script's own end-to-end run is a slow smoke test."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from helpers import REPO

from plexus_datasets import load_dataset

SCRIPT = REPO / "benchmarks" / "model_accuracy.py"


def script():
    spec = importlib.util.spec_from_file_location("model_accuracy", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_csbm_is_what_the_docstring_says_and_loads_unchanged(tmp_path: Path) -> None:
    bench = script()
    digest = bench.make_csbm(tmp_path / "a.npz")
    assert bench.make_csbm(tmp_path / "b.npz") == digest  # deterministic
    with np.load(tmp_path / "a.npz") as raw:
        written = {k: raw[k] for k in raw.files}
    labels = written["labels"]
    assert np.bincount(labels).tolist() == [600] * 5
    train, val, test = (written[f"{k}_mask"] for k in ("train", "val", "test"))
    assert (train.sum(), val.sum(), test.sum()) == (100, 500, 1000)
    assert np.bincount(labels[train]).tolist() == [20] * 5
    assert not (train & val).any() and not (train & test).any() and not (val & test).any()
    # Expected edges (hand-derived): inside classes 5·C(600,2)·5/599 = 7500, across
    # C(5,2)·600²·5/2400 = 7500; a binomial's spread is ~87 each.
    adj = written["adj_data"].size // 2
    row = np.repeat(np.arange(3000), np.diff(written["adj_indptr"]))
    intra = (labels[row] == labels[written["adj_indices"]]).mean()
    assert 14_400 < adj < 15_600 and 0.47 < intra < 0.53
    x = written["attr_matrix"]
    norms = [np.linalg.norm(x[labels == c].mean(0)) for c in range(5)]
    assert all(1.8 < v < 2.3 for v in norms), norms  # mean of norm 2 plus the noise's average

    graph = load_dataset(f"npz:{tmp_path / 'a.npz'}")
    np.testing.assert_array_equal(graph.features, x)
    np.testing.assert_array_equal(graph.labels, labels)
    for k, mask in (("train", train), ("val", val), ("test", test)):
        np.testing.assert_array_equal(getattr(graph, f"{k}_mask"), mask)
    loaded = graph.adj.tocsr()
    loaded.sort_indices()
    np.testing.assert_array_equal(loaded.indptr, written["adj_indptr"])
    np.testing.assert_array_equal(loaded.indices, written["adj_indices"])


@pytest.mark.slow
def test_model_accuracy_smoke(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--smoke", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=600, cwd=REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = (tmp_path / "model_accuracy.txt").read_text(encoding="utf-8")
    assert "SYNTHETIC contextual stochastic block model" in text
    for graph in ("cora", "csbm"):
        for model in ("gcn", "graphconv"):
            assert any(line.split()[:2] == [graph, model] for line in text.splitlines()), text
