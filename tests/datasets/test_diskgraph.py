"""Graph directories and the streaming converters: each gives the graph the in-memory loader
gives (OGB raw layouts, the papers100M stand-in, R-MAT generated in pieces, any Graph), reads
its arrays in pieces, and refuses damaged input with one typed line."""

from __future__ import annotations

import gzip
import json
import shutil
import zipfile
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import pytest

from helpers import assert_one_line
from engine_checks import directed_toy_graph
from plexus_datasets import load_dataset
from plexus_datasets.canonical import EdgeFiles, canonicalize, csr_pieces
from plexus_datasets.degrees import scan_pieces
from plexus_datasets.diskgraph import (DiskGraph, DiskGraphError, MemoryGraph, decode_features,
                                       encode_features)
from plexus_datasets.diskwrite import write_graph
from plexus_datasets.graph import Graph, incoming
from plexus_datasets.npyio import NpyStream, NpyWriter, npy_layout, read_rows
from plexus_datasets.ogb_loader import load_ogb
from plexus_datasets.ogb_raw import ogb_to_disk
from plexus_datasets.rmat import parse_rmat_params, rmat_graph
from plexus_datasets.rmat_stream import rmat_to_disk
from plexus_datasets.standin import write_papers100m_standin
from plexus_datasets.work import Runner
from fuzzing import samples


def assert_same_graph(a: Graph, b: Graph) -> None:
    assert (a.name, a.num_classes, a.directed, a.notes) == (b.name, b.num_classes, b.directed,
                                                            b.notes)
    assert a.adj.shape == b.adj.shape and (a.adj != b.adj).nnz == 0
    assert a.features.dtype == b.features.dtype and np.array_equal(a.features, b.features)
    assert np.array_equal(a.labels, b.labels)
    for m in ("train_mask", "val_mask", "test_mask"):
        assert np.array_equal(getattr(a, m), getattr(b, m)), m


@pytest.mark.parametrize("compressed", [True, False])
def test_papers100m_standin_converts_to_what_ogb_loads(tmp_path, compressed):
    """The exact raw layout (data.npz deflated or stored, float16 node_feat, NaN labels, the
    time split), streamed in chunks of 1000 edges."""
    ds = write_papers100m_standin(tmp_path, num_nodes=1500, compressed=compressed)
    with zipfile.ZipFile(ds / "raw" / "data.npz") as zf:
        kinds = {i.compress_type for i in zf.infolist()}
    assert kinds == {zipfile.ZIP_DEFLATED if compressed else zipfile.ZIP_STORED}
    disk = ogb_to_disk("ogbn-papers100M", tmp_path, tmp_path / "g", chunk_edges=1000)
    assert disk.feature_dtype == "float16" and disk.directed and disk.edges == "coo"
    converted, loaded = disk.to_graph(), load_ogb("ogbn-papers100M", tmp_path)
    assert_same_graph(converted, loaded)
    assert (converted.labels < 0).mean() > 0.7  # most nodes unlabelled, as in papers100M
    assert converted.train_mask.sum() > converted.val_mask.sum() > 0 and converted.test_mask.any()


@pytest.mark.parametrize("name,undirected", [("ogbn-arxiv", False), ("ogbn-products", True)])
def test_ogb_csv_layouts_convert_to_what_ogb_loads(tmp_path, name, undirected):
    d = samples.write_ogb(tmp_path, processed=False)
    if undirected:  # the products layout: inverse edges added, the sales-ranking split
        d = d.rename(tmp_path / "ogbn_products")
        (d / "split" / "time").rename(d / "split" / "sales_ranking")
        (d / "raw" / "node_year.csv.gz").unlink()
    disk = ogb_to_disk(name, tmp_path, tmp_path / "g", chunk_edges=3)
    assert disk.directed != undirected
    assert_same_graph(disk.to_graph(), load_ogb(name, tmp_path))


def test_rmat_generated_in_pieces_is_the_rmat_spec(tmp_path, monkeypatch):
    from plexus_datasets import rmat_stream

    monkeypatch.setattr(rmat_stream, "WINDOW_BYTES", 4 * 5 * 300)  # H in windows of 300 rows
    p = parse_rmat_params("scale=11,edge_factor=8,features=7,classes=5,seed=4")
    with Runner(tmp_path / "work") as runner:
        disk = rmat_to_disk(p, tmp_path / "g", runner, tmp_path / "work", chunk_edges=3000,
                            bucket_entries=2500)
    assert disk.edges == "csr" and disk.num_edges == rmat_graph(**p).adj.nnz
    assert_same_graph(disk.to_graph(), rmat_graph(**p))
    assert_same_graph(load_dataset(f"graph:{tmp_path / 'g'}"), rmat_graph(**p))


def _scan(graph_dir: Path, folder: Path) -> list[np.ndarray]:
    pieces = csr_pieces(DiskGraph.open(graph_dir), 900)
    with Runner(folder, False) as runner:
        degrees = scan_pieces(pieces, folder, runner, check=True, directed=False)
    return [degrees.load(name) for name in ("row", "col", "loops")]


def test_the_scan_checks_a_csr_graph_slice_by_slice(tmp_path, monkeypatch):
    """The degrees' scan of a stored csr graph, in slices of 7 entries or in one: the same
    degrees; a row out of order, a repeated entry or a lost reverse edge each found, named."""
    from plexus_datasets import degrees

    p = parse_rmat_params("scale=8,edge_factor=4,features=3,classes=3,seed=2")
    with Runner(tmp_path / "work", False) as runner:
        rmat_to_disk(p, tmp_path / "g", runner, tmp_path / "work")
    whole = _scan(tmp_path / "g", tmp_path / "s0")
    monkeypatch.setattr(degrees, "SCAN_SLICE", 7)
    sliced = _scan(tmp_path / "g", tmp_path / "s1")
    assert all(np.array_equal(a, b) for a, b in zip(whole, sliced))
    ptr, idx = np.load(tmp_path / "g" / "indptr.npy"), np.load(tmp_path / "g" / "indices.npy")
    row = int(np.flatnonzero(np.diff(ptr) >= 3)[5])  # a row with three entries or more
    a = int(ptr[row])
    for k, (how, needle) in enumerate([
            ("swap", f"the in-neighbours of node {row} are not sorted and unique"),
            ("repeat", f"the in-neighbours of node {row} are not sorted and unique"),
            ("move", "marked undirected but its incoming adjacency is not symmetric")]):
        bad = idx.copy()
        if how == "swap":
            bad[a], bad[a + 1] = idx[a + 1], idx[a]
        elif how == "repeat":
            bad[a + 1] = idx[a]
        else:  # the row's first entry moved to a column between it and the next: no reverse
            gaps = np.flatnonzero(np.diff(idx[a:int(ptr[row + 1])]) > 1)
            bad[a + gaps[0]] = idx[a + gaps[0]] + 1
        graph = tmp_path / f"bad{k}"
        shutil.copytree(tmp_path / "g", graph)
        np.save(graph / "indices.npy", bad)
        with pytest.raises(DiskGraphError, match=needle):
            _scan(graph, tmp_path / f"b{k}")


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_any_graph_round_trips_with_each_feature_dtype(tmp_path, dtype):
    g = directed_toy_graph()  # self loops kept, as the graph holds them
    disk = write_graph(g, tmp_path / "g", dtype)
    assert disk.feature_dtype == dtype and disk.self_loops == "keep"
    back = disk.to_graph()
    want = decode_features(encode_features(g.features, dtype), dtype)
    assert np.array_equal(back.features, want)
    back.features = g.features
    assert_same_graph(back, g)
    disk.verify()


def test_bfloat16_rounds_as_torch_does():
    import torch

    x = np.random.default_rng(0).standard_normal(10_000).astype(np.float32) * 1e3
    want = torch.from_numpy(x).bfloat16().float().numpy()
    assert np.array_equal(decode_features(encode_features(x, "bfloat16"), "bfloat16"), want)


@pytest.mark.parametrize("directed,loops", [(False, "drop"), (True, "drop"), (True, "keep")])
def test_incoming_adjacency_in_pieces(tmp_path, directed, loops):
    """M from chunks of 37 edges and buckets of 41 entries equals `incoming` of the graph."""
    rng = np.random.default_rng(1)
    n = 60
    src, dst = rng.integers(0, n, 400), rng.integers(0, n, 400)
    src[:20] = dst[:20]  # self loops, and repeats below
    src[20:40], dst[20:40] = src[40:60], dst[40:60]
    for name, arr in (("src", src), ("dst", dst)):
        np.save(tmp_path / f"{name}.npy", arr.astype(np.int32))
    edges = EdgeFiles(str(tmp_path / "src.npy"), str(tmp_path / "dst.npy"), n, directed, loops)
    with Runner(tmp_path / "w") as runner:
        pieces = canonicalize(edges, tmp_path / "w", runner, chunk_edges=37, bucket_entries=41)
    assert len(pieces) > 5
    keep = (src != dst) | (loops == "keep")
    adj = np.zeros((n, n), np.float32)
    adj[src[keep], dst[keep]] = 1
    want = incoming(sp.csr_matrix(adj), directed)
    rows = []
    for k in range(len(pieces)):
        counts, cols = pieces.piece(k)
        r0, r1 = pieces.rows(k)
        rows += [cols[a:b].tolist() for a, b in zip(np.cumsum(counts) - counts, np.cumsum(counts))]
    assert rows == [want.indices[a:b].tolist() for a, b in zip(want.indptr[:-1], want.indptr[1:])]


def test_npy_pieces(tmp_path):
    x = np.arange(60, dtype=np.float32).reshape(20, 3)
    with NpyWriter(tmp_path / "a.npy", np.float32, (3,)) as w:
        for lo in range(0, 20, 7):
            w.append(x[lo:lo + 7])
    assert np.array_equal(np.load(tmp_path / "a.npy"), x)
    assert np.array_equal(read_rows(tmp_path / "a.npy", npy_layout(tmp_path / "a.npy"), 5, 9),
                          x[5:9])
    np.savez_compressed(tmp_path / "z.npz", e=np.arange(1000))
    with NpyStream(tmp_path / "z.npz", "e.npy") as s:
        assert np.array_equal(np.concatenate(list(s.chunks(1000, 77))), np.arange(1000))
    cut = tmp_path / "cut.npz"
    cut.write_bytes((tmp_path / "z.npz").read_bytes()[:300])
    with pytest.raises(DiskGraphError, match="cut.npz"):
        with NpyStream(cut, "e.npy", DiskGraphError) as s:
            s.read(1000)


def test_converters_refuse_damaged_raw_files_in_one_line(tmp_path):
    ds = write_papers100m_standin(tmp_path, num_nodes=300, compressed=False)
    data = (ds / "raw" / "data.npz").read_bytes()
    (ds / "raw" / "data.npz").write_bytes(data[: len(data) // 2])
    with pytest.raises(DiskGraphError.__mro__[1]) as err:  # a DatasetError
        ogb_to_disk("ogbn-papers100M", tmp_path, tmp_path / "g")
    assert_one_line(err, "data.npz")
    assert not (tmp_path / "g").exists() and not list(tmp_path.glob(".g.*"))
    shutil.rmtree(ds)
    ds = write_papers100m_standin(tmp_path, num_nodes=300)
    with gzip.open(ds / "split" / "time" / "test.csv.gz", "wt") as f:
        f.write("0\n299\n300\n")
    with pytest.raises(DiskGraphError.__mro__[1], match="split 'test' has node ids outside"):
        ogb_to_disk("ogbn-papers100M", tmp_path, tmp_path / "g")
    assert not list(tmp_path.glob(".g.*"))


def test_header_checks(tmp_path):
    disk = write_graph(load_dataset("cora"), tmp_path / "g")
    header = json.loads((disk.path / "graph.json").read_text())
    header["directed"] = True  # an edit without re-hashing
    (disk.path / "graph.json").write_text(json.dumps(header))
    with pytest.raises(DiskGraphError, match="content_sha256 does not match"):
        DiskGraph.open(disk.path)
    with pytest.raises(DiskGraphError, match="not a plexus-graph directory"):
        DiskGraph.open(tmp_path)
    assert MemoryGraph(load_dataset("cora")).num_edges == load_dataset("cora").adj.nnz
