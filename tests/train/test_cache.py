"""The shard-store cache of ``plexus-train --dataset`` (plexus.train.cache): a store is reused
exactly when it would come out identical, rebuilt when any key field changes or its files are
damaged, and built once when two runs ask at the same time. (That a run reading it trains
exactly as a run cutting its own shards: tests/train/test_train_cli.py.)
"""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from cli_helpers import cache_plan
from helpers import assert_one_line
from plexus_partition.model.grid import GridShape
from plexus_datasets import load_dataset
from plexus.engine.config import EngineConfig, ModelConfig
from plexus_partition import read_manifest, read_shard
from plexus.train.cache import (BuildRequest, Cache, CacheError, Source, cached_options,
                                obtain_store)


def _npz(path: Path, scale: float = 1.0) -> str:
    g = load_dataset("cora")
    a = sp.csr_matrix(g.adj)
    np.savez(path, adj_data=a.data, adj_indices=a.indices, adj_indptr=a.indptr,
             adj_shape=np.array(a.shape), attr_matrix=g.features * scale, labels=g.labels,
             train_mask=g.train_mask, val_mask=g.val_mask, test_mask=g.test_mask)
    return f"npz:{path}"


def test_a_store_is_reused_exactly_when_it_would_be_identical(tmp_path):
    cache = Cache(tmp_path / "cache")
    data = _npz(tmp_path / "g.npz")
    first, store = cached_options(cache_plan(data), cache, None)
    assert store.built and first.shards == store.path and store.summary()["built"]
    manifest = read_manifest(store.path)
    assert manifest["grid"] == {"x": 2, "y": 1, "z": 1} and manifest["num_stages"] == 2
    again = cached_options(cache_plan(data), cache, None)[1]
    assert not again.built and again.path == store.path
    assert "reusing the cached shard store" in again.line()
    changed = {  # every field of the key gives another store
        "seed": cache_plan(data, seed=1),
        "grid": cache_plan(data, grid="1x2x1"),
        "layers": cache_plan(data, model=ModelConfig(num_layers=3)),
        "orders": cache_plan(data, model=ModelConfig(order="agg")),  # the default: combine
        "stages": cache_plan(data, model=ModelConfig(kind="gin")),
        "aggregation": cache_plan(data, model=ModelConfig(kind="sage")),
        "perm": cache_plan(data, perm="single"),
        "symmetrize": cache_plan(data, symmetrize=True),
        "split seed": cache_plan(data, split_seed=5),  # the split of an npz without one
        "features": cache_plan(data, features="row"),
    }
    paths = {store.path}
    for field, opts in changed.items():
        got = cached_options(opts, cache, None)[1]
        assert got.built, field
        assert got.path not in paths, field
        paths.add(got.path)
    # not in the key: what does not change the store (hidden width, dropout, epochs, engine)
    same = cache_plan(data, model=ModelConfig(hidden=64, dropout=0.1),
                      engine=EngineConfig(dtype="bf16"))
    assert not cached_options(same, cache, None)[1].built
    # the graph's file changes (size or modification time): a new store
    _npz(tmp_path / "g.npz", scale=2.0)
    rebuilt = cached_options(cache_plan(data), cache, None)[1]
    assert rebuilt.built and rebuilt.path != store.path
    assert read_manifest(rebuilt.path)["graph_sha256"] != manifest["graph_sha256"]


def test_a_damaged_store_is_rebuilt_and_a_huge_source_is_one_clear_error(tmp_path, monkeypatch):
    from plexus.train import cachekeys as cache_module

    cache = Cache(tmp_path / "cache")
    store = cached_options(cache_plan(), cache, None)[1]
    victim = Path(store.path) / "rank-x1-y0-z0.npz"
    victim.write_bytes(victim.read_bytes()[:100])  # truncated: the size check sees it
    again = cached_options(cache_plan(), cache, None)[1]
    assert again.built and again.path == store.path
    monkeypatch.setattr(cache_module, "MAX_SOURCE_FILES", 1)
    many = tmp_path / "many"
    many.mkdir()
    for i in range(2):
        (many / f"ind.cora.{i}").touch()
    with pytest.raises(CacheError, match="more than 1 files to watch") as e:
        cached_options(cache_plan(f"planetoid:{many}"), cache, None)
    assert_one_line(e)


def test_two_runs_asking_at_once_build_one_store(tmp_path):
    graph = load_dataset("cora")
    source = Source("cora", None, 0, False)
    request = BuildRequest(source, source.key(), str(tmp_path), GridShape.parse("1x2x1"), None,
                           ModelConfig(), "double")
    results, start = [], threading.Barrier(2)

    def run():
        start.wait()
        results.append(obtain_store(Cache(tmp_path), request, graph))

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r.built for r in results) == [False, True]
    assert results[0].path == results[1].path
    for y in range(2):  # every file is whole and matches the manifest (sha256 checked)
        read_shard(results[0].path, y)  # grid 1x2x1: rank y is at (0, y, 0)


def test_which_runs_use_the_cache():
    assert cache_plan(cache_dir="/c").uses_cache(None)
    assert not cache_plan(grid="1x1x1", cache_dir="/c").uses_cache(None)  # one rank: cut in-process
    assert cache_plan(grid="1x1x1", cache_dir="/c", cache_explicit=True).uses_cache(None)
    assert not cache_plan(cache_dir=None).uses_cache(None)  # --no-cache
    assert not cache_plan(cache_dir="/c", shards="/s").uses_cache(None)
    assert dataclasses.replace(cache_plan(cache_dir="/c"), grid=None).uses_cache(4)


def test_the_set_up_is_priced_by_the_model_the_check_and_plexus_model(capsys):
    import json
    from dataclasses import replace

    from plexus.perfmodel import ModelSpec, epoch_memory, run_peak, setup_memory
    from plexus.perfmodel.cli import model_main
    from plexus.api.memcheck import Available, MemoryCheckError, check_partition_memory

    # R-MAT scale 20 with 64 features on 2x2x2 (benchmarks/results/cache_setup.txt)
    spec = ModelSpec(num_nodes=1 << 20, nnz=32_450_714, num_features=64, num_classes=16,
                     from_store=True)
    setup, train = setup_memory(spec, (2, 2, 2)), epoch_memory(spec, (2, 2, 2))
    assert setup.rank < train.total == run_peak(spec, (2, 2, 2))  # reading a shard: below
    cut = setup_memory(replace(spec, from_store=False), (2, 2, 2))
    assert cut.rank == cut.partition > train.total  # cutting from the whole graph: above
    assert 1.5 * 2**30 < setup.partition < 2.5 * 2**30  # measured 1.90 GiB
    with pytest.raises(MemoryCheckError, match="partitioning the graph .* in one process") as e:
        check_partition_memory(setup.partition, Available(2**30, "test"))
    assert_one_line(e, "--shards")
    assert model_main(["-G", "8", "--nodes", str(1 << 20), "--nnz", "32450714", "--features",
                       "64", "--classes", "16", "--top", "2", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["partition_bytes"] == setup.partition
    assert all(0 < c["setup_bytes"] <= c["memory"]["total"] for c in doc["configs"])
    assert model_main(["-G", "8", "--dataset", "cora", "--top", "1"]) == 0
    assert "set-up/rank" in capsys.readouterr().out


def _fail_in_child(kind: str) -> None:
    import os
    import signal

    if kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    raise CacheError("bad input, one line")


@pytest.mark.slow  # a tool's process or a world's ranks (issue 58: the slow rule at run time)
def test_the_partitioning_child_hands_back_its_error_or_its_death():
    from plexus.runtime.child import ChildDied, ChildTraceback, run_in_child

    with pytest.raises(CacheError, match="bad input, one line") as e:
        run_in_child("partitioning x", _fail_in_child, "raise")
    assert isinstance(e.value.__cause__, ChildTraceback)  # the child's traceback goes along
    with pytest.raises(ChildDied, match="partitioning x in a child process failed: the child was "
                                        r"killed by signal 9 \(out of memory\?\)"):
        run_in_child("partitioning x", _fail_in_child, "kill")


@pytest.mark.parametrize("kind", ["gcn", "sage"])
def test_a_streamed_build_equals_the_in_memory_one(tmp_path, kind):
    """A source the converters read in pieces is cut out of core (`build_streamed`: converted
    into the cache's graphs/, then the streaming partitioner); its store has the same path and
    the same bytes as the store built from the loaded graph."""
    from plexus.train.cache import build_store, streams

    spec = "rmat:scale=9,edge_factor=6,features=8,classes=3"
    stores = []
    for streamed in (True, False):
        cache = Cache(tmp_path / f"cache-{streamed}")
        source = Source(spec, None, 3, False)
        request = BuildRequest(source, source.key(), str(cache.root), GridShape.parse("2x1x2"),
                               None, ModelConfig(kind=kind, num_layers=3), "double")
        assert streams(request)
        path, sizes, _ = build_store(request, None if streamed else source.load())
        assert (Path(path).parent / "graphs").is_dir() == streamed
        stores.append((Path(path), sizes))
    (a, sa), (b, sb) = stores
    assert a.name == b.name and sa.graph_sha256 == sb.graph_sha256
    files = sorted(p.name for p in a.iterdir())
    assert files == sorted(p.name for p in b.iterdir())
    for name in files:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
