"""plexus-train's data flags (issue 48 item 4): --split-seed apart from --seed (default --seed, so
seeded runs are what they were), --features said in the run's first line, the cache keyed by a
file's content and by the new flags only where they are given."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import scipy.sparse as sp

from cli_helpers import launched, train
from plexus.train.cache import BuildRequest, Source, streams
from plexus.train.parser import build_parser
from plexus.train.session import data_note


def _npz(path, seed=0, n=40):
    rng = np.random.default_rng(seed)
    a = sp.random(n, n, density=0.1, random_state=seed, format="csr")
    a.data[:] = 1
    np.savez(path, adj_data=a.data, adj_indices=a.indices, adj_indptr=a.indptr,
             adj_shape=np.array(a.shape), attr_matrix=rng.random((n, 5), dtype=np.float32),
             labels=rng.integers(0, 3, n))


def _plan(*argv: str):
    return launched(build_parser().parse_args(["--grid", "1x1x1", "--no-cache", *argv]))


def test_the_split_seed_defaults_to_the_seed_and_stands_apart_when_given(tmp_path):
    _npz(tmp_path / "g.npz")
    spec = f"npz:{tmp_path / 'g.npz'}"
    plan = _plan("--dataset", spec, "--seed", "3")
    assert (plan.train.seed, plan.data_seed, plan.split_seed) == (3, 3, None)
    plan = _plan("--dataset", spec, "--seed", "3", "--split-seed", "7")
    assert (plan.train.seed, plan.data_seed) == (3, 7)


def test_the_first_line_says_how_features_are_scaled(tmp_path):
    _npz(tmp_path / "g.npz")
    assert data_note(_plan()) == ", features row-normalized (--features auto)"  # Cora
    assert data_note(_plan("--features", "raw")) == ", features raw"
    npz = f"npz:{tmp_path / 'g.npz'}"
    assert data_note(_plan("--dataset", npz)) == ", features raw (--features auto)"
    assert data_note(_plan("--dataset", npz, "--features", "row", "--split-seed", "7")) == \
        ", features row-normalized, split seed 7"


def test_cache_keys_change_only_with_what_is_given(tmp_path):
    old = Source("cora", None, 0, False).key()
    assert Source("cora", None, 0, False, None, "auto").key() == old  # stores cached before stay
    assert "data_seed" not in old and "features" not in old
    assert Source("cora", None, 0, False, 5).key() != old
    assert Source("cora", None, 0, False, None, "raw").key() != old


def test_a_file_is_cached_under_its_content_not_its_path(tmp_path):
    _npz(tmp_path / "a.npz")
    (tmp_path / "b").mkdir()
    shutil.copy(tmp_path / "a.npz", tmp_path / "b" / "cora.npz")
    _npz(tmp_path / "c.npz", seed=1)
    key = Source(f"npz:{tmp_path / 'a.npz'}", None, 0, False).key()
    assert "spec" not in key and key["content"][0] == "npz"
    assert Source(f"npz:{tmp_path / 'b' / 'cora.npz'}", None, 0, False).key() == key
    assert Source(f"npz:{tmp_path / 'c.npz'}", None, 0, False).key() != key


def test_row_scaled_features_are_not_streamed_as_they_are():
    from plexus_partition.model.grid import GridShape
    from plexus_partition.model.model import ModelConfig

    def request(features: str) -> BuildRequest:
        source = Source("rmat:scale=6", None, 0, False, None, features)
        return BuildRequest(source, {}, "/nonexistent", GridShape.parse("1x1x2"), 2,
                            ModelConfig(), "double")

    assert streams(request("auto")) and streams(request("raw")) and not streams(request("row"))


@pytest.mark.slow
def test_a_run_says_its_features_and_split_seed_first(tmp_path):
    _npz(tmp_path / "cora.npz")
    proc = train("--dataset", f"npz:{tmp_path / 'cora.npz'}", "--grid", "1x1x1", "--epochs", "1",
                 "--split-seed", "7", "--features", "row", "--threads", "1")
    assert proc.returncode == 0, proc.stderr[-2000:]
    first = proc.stdout.splitlines()[0]
    assert first.startswith("plexus-train: cora.npz (N=40")  # named by its file
    assert first.endswith(", features row-normalized, split seed 7, precision fp32")
