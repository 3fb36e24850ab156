"""Datasets without surprises (issue 48 item 4): feature scaling an explicit option with one rule
for every loader (--features auto|raw|row, auto = the format's published convention), said in the
run's first line; --split-seed apart from --seed; a graph read from a path named by its file and
keyed by its content in the cache."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import scipy.sparse as sp

from plexus_datasets import load_dataset
from plexus_datasets.errors import DatasetError
from plexus_datasets.spec import content_key, feature_mode

CORA_EDGES = 10556  # edges of the embedded Cora, both directions counted


def _npz(path, n=40, features=None, seed=0):
    """A gnn-benchmark file without a split (so the split is drawn from the dataset seed)."""
    rng = np.random.default_rng(seed)
    a = sp.random(n, n, density=0.1, random_state=seed, format="csr")
    a.data[:] = 1
    feats = rng.integers(0, 3, (n, 5)).astype(np.float32) if features is None else features
    np.savez(path, adj_data=a.data, adj_indices=a.indices, adj_indptr=a.indptr,
             adj_shape=np.array(a.shape), attr_matrix=feats, labels=rng.integers(0, 3, n))
    return feats


@pytest.mark.parametrize("spec, mode", [("cora", "row"), ("CiteSeer", "row"),
                                        ("planetoid:/x/ind.cora", "row"), ("npz:/x/cora.npz", "raw"),
                                        ("mtx:/x/a.mtx", "raw"), ("ogbn-arxiv", "raw"),
                                        ("rmat:scale=5", "raw"), ("graph:/x", "raw")])
def test_auto_is_each_formats_convention(spec, mode):
    assert feature_mode(spec) == mode
    assert feature_mode(spec, "raw") == "raw" and feature_mode(spec, "row") == "row"


def test_an_unknown_mode_is_refused_in_one_line():
    with pytest.raises(DatasetError, match="features 'l2': use one of auto, raw, row"):
        load_dataset("cora", features="l2")


def test_cora_raw_is_the_bag_of_words_and_auto_its_rows_scaled_to_one():
    auto, raw = load_dataset("cora"), load_dataset("cora", features="raw")
    assert set(np.unique(raw.features)) == {0.0, 1.0}  # Planetoid's binary bag of words
    counts = raw.features.sum(axis=1, keepdims=True)
    want = raw.features / np.where(counts == 0, 1, counts)  # by hand: each row over its count
    np.testing.assert_array_equal(auto.features, want.astype(np.float32))
    np.testing.assert_array_equal(load_dataset("cora", features="row").features, auto.features)
    assert auto.num_edges == raw.num_edges == CORA_EDGES


def test_npz_keeps_its_values_by_default_and_row_scales_signed_features_safely(tmp_path):
    feats = _npz(tmp_path / "g.npz")
    np.testing.assert_array_equal(load_dataset(f"npz:{tmp_path / 'g.npz'}").features, feats)
    signed = np.array([[1.0, -1.0, 2.0]] * 40, dtype=np.float32)  # sums to 2, |sum| 4
    _npz(tmp_path / "s.npz", features=signed)
    g = load_dataset(f"npz:{tmp_path / 's.npz'}", features="row")
    np.testing.assert_allclose(g.features[0], [0.25, -0.25, 0.5])
    assert "--features row" in g.notes[-1]


def test_a_file_is_named_by_its_file_not_as_the_embedded_dataset(tmp_path):
    _npz(tmp_path / "cora.npz")
    g = load_dataset(f"npz:{tmp_path / 'cora.npz'}")
    assert g.name == "cora.npz" != load_dataset("cora").name


def test_a_file_is_keyed_by_its_content_wherever_it_lies(tmp_path):
    _npz(tmp_path / "a.npz")
    (tmp_path / "elsewhere").mkdir()
    shutil.copy(tmp_path / "a.npz", tmp_path / "elsewhere" / "b.npz")
    _npz(tmp_path / "c.npz", seed=1)
    key = content_key(f"npz:{tmp_path / 'a.npz'}")
    assert key[0] == "npz" and len(key[1]) == 64
    assert content_key(f"npz:{tmp_path / 'elsewhere' / 'b.npz'}") == key
    assert content_key(f"npz:{tmp_path / 'c.npz'}") != key
    assert content_key("cora") is None and content_key("rmat:scale=5") is None


def test_the_split_follows_the_dataset_seed_only(tmp_path):
    _npz(tmp_path / "g.npz")
    spec = f"npz:{tmp_path / 'g.npz'}"
    a, b, again = (load_dataset(spec, seed=s) for s in (0, 7, 0))
    assert not np.array_equal(a.train_mask, b.train_mask)  # a random split, drawn from the seed
    np.testing.assert_array_equal(a.train_mask, again.train_mask)
    np.testing.assert_array_equal(a.features, b.features)  # the file's features stay
