"""OGB's link datasets from a local root: the ogbl-collab stand-in (OGB's raw layout, split files
as torch pickles of tensors, or of numpy arrays) read through the OGB path, every pair as the
generator wrote it, the message graph the training edges only; bad split files refused in one
line; a model trained on it scored by OGB's own Evaluator (Hits@50), which our Hits@50 equals."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from plexus_datasets.errors import DatasetError
from plexus.api.linkdata import load_ogbl, ogbl_evaluate, read_split_file
from plexus.engine.config import ModelConfig
from plexus.engine.link import LinkTask, fit, hits_at_k
from plexus.engine.pairs import LinkDecoder
from plexus.engine.serial import SerialModel
from plexus.testing.ogbl_standin import write_ogbl_standin

pytest.importorskip("ogb")


@pytest.mark.parametrize("numpy", [False, True], ids=["tensors", "numpy"])
def test_standin_read_through_the_ogb_path(tmp_path, numpy):
    wrote = write_ogbl_standin(tmp_path, num_nodes=120, seed=3, numpy=numpy)
    split = load_ogbl("ogbl-collab", tmp_path)
    for ours, theirs in (("train", "train"), ("val", "valid"), ("test", "test")):
        np.testing.assert_array_equal(split.pos[ours], wrote[theirs].T)
    for ours, theirs in (("val", "valid_neg"), ("test", "test_neg")):
        np.testing.assert_array_equal(split.neg[ours], wrote[theirs].T)
    g = split.graph
    assert g.num_nodes == 120 and not g.directed and g.num_features == 16
    coo = g.adj.tocoo()
    message = set(zip(coo.row.tolist(), coo.col.tolist()))
    train = {(int(u), int(v)) for u, v in wrote["train"]}
    assert message == train | {(v, u) for u, v in train}  # both directions, nothing else
    for part in ("valid", "test"):
        assert not any((int(u), int(v)) in message for u, v in wrote[part])


def _rewrite(path, obj):
    with open(path, "wb") as f:
        torch.save(obj, f)


class Payload:  # a class a pickle would have to import: refused by both readers
    pass


def test_bad_split_files_refused_in_one_line(tmp_path):
    write_ogbl_standin(tmp_path, num_nodes=60, seed=1)
    folder = tmp_path / "ogbl_collab" / "split" / "time"
    valid = folder / "valid.pt"
    good = read_split_file(valid)
    cases = {
        "class": Payload(),
        "shape": {"edge": torch.zeros((4, 3), dtype=torch.int64),
                  "edge_neg": torch.zeros((4, 2), dtype=torch.int64)},
        "range": {"edge": torch.full((4, 2), 60, dtype=torch.int64),
                  "edge_neg": torch.zeros((4, 2), dtype=torch.int64)},
        "float": {"edge": torch.zeros((4, 2)), "edge_neg": torch.zeros((4, 2))},
        "no-negatives": {"edge": torch.from_numpy(good["edge"])},
        "not-a-dict": [torch.zeros((4, 2), dtype=torch.int64)],
    }
    for what, obj in cases.items():
        _rewrite(valid, obj)
        with pytest.raises(DatasetError) as e:
            load_ogbl("ogbl-collab", tmp_path)
        assert "\n" not in str(e.value) and "valid.pt" in str(e.value), what
    valid.write_bytes(b"not a pickle at all")
    with pytest.raises(DatasetError, match="not a split file"):
        load_ogbl("ogbl-collab", tmp_path)
    valid.write_bytes(pickle.dumps(Payload()))
    with pytest.raises(DatasetError, match="not a split file"):
        read_split_file(valid)
    valid.unlink()
    with pytest.raises(DatasetError, match="missing"):
        load_ogbl("ogbl-collab", tmp_path)
    with pytest.raises(DatasetError, match="root"):
        load_ogbl("ogbl-collab", None)


def test_trained_on_the_standin_scored_by_ogbs_evaluator(tmp_path):
    write_ogbl_standin(tmp_path, num_nodes=300, seed=0)
    split = load_ogbl("ogbl-collab", tmp_path)
    model = SerialModel(split.encoder_graph(16), ModelConfig(2, 16, 0.0), seed=1)
    task = LinkTask(model, LinkDecoder("mlp", 16, hidden=16, layers=2, seed=1),
                    torch.from_numpy(split.pos["train"]), split.num_nodes, seed=1)
    fit(task, 40, lr=0.01)
    pos = task.scores(torch.from_numpy(split.pos["test"])).numpy()
    neg = task.scores(torch.from_numpy(split.neg["test"])).numpy()
    theirs = ogbl_evaluate("ogbl-collab", pos, neg)
    assert theirs["metric"] == "hits@50"
    assert hits_at_k(pos, neg, 50) == pytest.approx(theirs["value"], abs=1e-12)
    assert task.evaluate({"test": (torch.from_numpy(split.pos["test"]),
                                   torch.from_numpy(split.neg["test"]))})["test"]["auc"] > 0.7
