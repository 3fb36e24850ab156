"""Tests for plexus_datasets: every loader on small real or generated files, and every bad input."""

from __future__ import annotations

import builtins
import gzip
import pickle
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

from helpers import assert_one_line
from plexus_datasets import (DatasetError, Graph, degree_bucket_labels, edges_to_csr,
                             gcn_normalize, load_dataset, parse_rmat_params, random_split,
                             rmat_graph)
from plexus_datasets.planetoid import EMBEDDED_DIR



def _refused(spec: str, *parts: str, root: str | None = None) -> None:
    """load_dataset(spec, root) refuses in one line naming every one of ``parts``."""
    with pytest.raises(DatasetError) as e:
        load_dataset(spec, root=root)
    assert_one_line(e, *parts)

def assert_symmetric_simple(g: Graph) -> None:
    assert (g.adj != g.adj.T).nnz == 0
    assert g.adj.diagonal().sum() == 0
    assert set(np.unique(g.adj.data)) <= {1.0}


# ---------------------------------------------------------------------------------- Planetoid

def test_cora_public_split_and_counts():
    g = load_dataset("cora")
    assert (g.num_nodes, g.num_features, g.num_classes) == (2708, 1433, 7)
    assert g.num_edges == 10556  # 5278 undirected edges, both directions stored
    assert_symmetric_simple(g)
    assert not g.directed
    assert (g.train_mask.sum(), g.val_mask.sum(), g.test_mask.sum()) == (140, 500, 1000)
    assert g.train_mask[:140].all() and g.val_mask[140:640].all()
    test_ids = np.loadtxt(EMBEDDED_DIR / "ind.cora.test.index", dtype=np.int64)
    assert np.array_equal(np.flatnonzero(g.test_mask), np.sort(test_ids))
    assert not (g.train_mask & g.val_mask).any() and not (g.val_mask & g.test_mask).any()
    assert (g.labels >= 0).all()
    assert np.array_equal(np.bincount(g.labels), [351, 217, 418, 818, 426, 298, 180])
    # binary bag-of-words rows, row-normalized as Kipf & Welling
    assert g.features.dtype == np.float32
    assert np.allclose(g.features.sum(axis=1), 1.0, atol=1e-5)
    assert all(len(set(row[row > 0].tolist())) == 1 for row in g.features[:50])
    # Same set through the other spec forms.
    for spec in ("planetoid:cora", f"planetoid:{EMBEDDED_DIR}",
                 f"planetoid:{EMBEDDED_DIR}/ind.cora"):
        h = load_dataset(spec)
        assert h.num_edges == g.num_edges and np.array_equal(h.labels, g.labels)


def _write_planetoid(d: Path, name: str, test_index: list[int], n_allx: int, n_train: int,
                     num_feat: int = 4, num_cls: int = 3, zero_label_row: int | None = None,
                     edges: dict | None = None) -> dict:
    """Fake ind.<name>.* files; feature row of node v is [v+1, 1, 0, ...] (row-normalized by the
    loader to [(v+1)/(v+2), 1/(v+2), ...]) so placement is checkable."""
    d.mkdir(parents=True, exist_ok=True)

    def feats(ids):
        m = np.zeros((len(ids), num_feat), dtype=np.float32)
        m[:, 0] = np.asarray(ids) + 1
        m[:, 1] = 1
        return sp.csr_matrix(m)

    def onehot(ids):
        m = np.zeros((len(ids), num_cls), dtype=np.int64)
        m[np.arange(len(ids)), np.asarray(ids) % num_cls] = 1
        return m

    allx_ids = list(range(n_allx))
    ally = onehot(allx_ids)
    if zero_label_row is not None:
        ally[zero_label_row] = 0
    graph = defaultdict(list, edges or {v: [(v + 1) % n_allx] for v in range(n_allx)})
    objs = {"x": feats(allx_ids[:n_train]), "y": ally[:n_train], "allx": feats(allx_ids),
            "ally": ally, "tx": feats(test_index), "ty": onehot(test_index), "graph": graph}
    for key, obj in objs.items():
        with open(d / f"ind.{name}.{key}", "wb") as f:
            pickle.dump(obj, f, protocol=2)
    (d / f"ind.{name}.test.index").write_text("".join(f"{i}\n" for i in test_index))
    return objs


def test_planetoid_gaps_become_zero_unlabelled_nodes(tmp_path):
    # Test ids 6..11 with 8 and 10 missing (like CiteSeer's isolated nodes), listed unsorted.
    test_index = [9, 6, 11, 7]
    edges = {0: [1, 2], 1: [0], 2: [9], 6: [7], 11: [6, 6]}
    _write_planetoid(tmp_path, "citeseer", test_index, n_allx=6, n_train=2, zero_label_row=3,
                     edges=edges)
    g = load_dataset("citeseer", root=str(tmp_path))
    assert g.num_nodes == 12 and g.num_classes == 3
    for v in (8, 10):  # gaps
        assert not g.features[v].any() and g.labels[v] == -1
        assert not (g.train_mask[v] or g.val_mask[v] or g.test_mask[v])
    for v in test_index + list(range(6)):  # tx row k went to node test_index[k]
        assert np.isclose(g.features[v, 0], (v + 1) / (v + 2))
    assert g.labels[3] == -1  # all-zero one-hot row
    expected = np.array([v % 3 for v in range(12)])
    keep = ~np.isin(np.arange(12), [3, 8, 10])
    assert np.array_equal(g.labels[keep], expected[keep])
    assert np.flatnonzero(g.train_mask).tolist() == [0, 1]
    # val = the next 500 nodes, capped at the allx rows; node 3 is unlabelled
    assert np.flatnonzero(g.val_mask).tolist() == [2, 4, 5]
    assert np.flatnonzero(g.test_mask).tolist() == [6, 7, 9, 11]
    assert_symmetric_simple(g)
    assert g.num_edges == 2 * 5  # 0-1, 0-2, 2-9, 6-7, 6-11 (duplicates collapsed)
    assert any("test.index" in n for n in g.notes)
    # PyG's directory layout and the planetoid:DIR form find the same files.
    pyg = tmp_path / "pyg" / "CiteSeer" / "raw"
    _write_planetoid(pyg, "citeseer", test_index, 6, 2, zero_label_row=3, edges=edges)
    for spec, root in (("citeseer", str(tmp_path / "pyg")), (f"planetoid:{tmp_path}", None)):
        h = load_dataset(spec, root=root)
        assert np.array_equal(h.labels, g.labels) and (h.adj != g.adj).nnz == 0


def test_planetoid_bad_inputs(tmp_path):
    _refused("pubmed", "pubmed", "root=DIR", "ind.pubmed.")
    _refused("pubmed", str(tmp_path), "ind.pubmed.x", root=str(tmp_path))

    d = tmp_path / "p"
    _write_planetoid(d, "toy", [5, 4], n_allx=4, n_train=2)
    (d / "ind.toy.ty").unlink()
    _refused(f"planetoid:{d}", "ind.toy.ty", "not found")

    _write_planetoid(d, "toy", [5, 4], n_allx=4, n_train=2)
    data = (d / "ind.toy.allx").read_bytes()
    (d / "ind.toy.allx").write_bytes(data[: len(data) // 2])
    _refused(f"planetoid:{d}", "ind.toy.allx", "not a readable Planetoid pickle")

    _write_planetoid(d, "toy", [5, 4], n_allx=4, n_train=2)
    (d / "ind.toy.test.index").write_text("5\n4\nfour\n")
    _refused(f"planetoid:{d}", "ind.toy.test.index", "line 3", "four")

    # Pickles can run code: anything but the expected types is refused, not executed.
    _write_planetoid(d, "toy", [5, 4], n_allx=4, n_train=2)

    class Evil:
        def __reduce__(self):
            return (builtins.exec, ("raise SystemExit('pwned')",))

    with open(d / "ind.toy.graph", "wb") as f:
        pickle.dump(Evil(), f, protocol=2)
    _refused(f"planetoid:{d}", "ind.toy.graph", "unexpected type")

    _write_planetoid(d, "toy", [5, 4], n_allx=4, n_train=2, edges={0: [17]})
    _refused(f"planetoid:{d}", "ind.toy.graph", "17")


# ---------------------------------------------------------------------------------------- OGB

def _gz_csv(path: Path, rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        for row in rows:
            f.write(",".join(str(v) for v in np.atleast_1d(row)) + "\n")


OGB_EDGES = [(0, 1), (1, 2), (2, 0), (3, 4), (4, 5), (5, 3), (0, 3), (1, 0)]


def _write_ogb_csv(root: Path, name: str, split: str, extra_node_file: str | None,
                   labels: list | None = None) -> Path:
    """A 6-node dataset in OGB's raw CSV layout (see ogb.io.read_csv_graph_raw)."""
    d = root / name.replace("-", "_")
    n = 6
    _gz_csv(d / "raw/edge.csv.gz", OGB_EDGES)
    _gz_csv(d / "raw/num-node-list.csv.gz", [n])
    _gz_csv(d / "raw/num-edge-list.csv.gz", [len(OGB_EDGES)])
    _gz_csv(d / "raw/node-feat.csv.gz", np.arange(n * 3).reshape(n, 3) * 0.5)
    _gz_csv(d / "raw/node-label.csv.gz", [[v] for v in (labels or [i % 3 for i in range(n)])])
    if extra_node_file:
        _gz_csv(d / f"raw/{extra_node_file}.csv.gz", [[2000 + i] for i in range(n)])
    for part, ids in (("train", [0, 1, 2]), ("valid", [3]), ("test", [4, 5])):
        _gz_csv(d / f"split/{split}/{part}.csv.gz", ids)
    (d / "RELEASE_v1.txt").touch()
    return d


@pytest.fixture
def no_stdin_prompt(monkeypatch):
    """Fail the test if anything asks on stdin (ogb does for big downloads and version updates)."""
    def refuse(*args):
        raise AssertionError(f"input() called: {args}")
    monkeypatch.setattr(builtins, "input", refuse)


def test_ogb_arxiv_from_raw_then_processed_cache(tmp_path, capsys, no_stdin_prompt):
    d = _write_ogb_csv(tmp_path, "ogbn-arxiv", "time", "node_year")
    first = load_dataset("ogbn-arxiv", root=str(tmp_path))
    assert (d / "processed/data_processed").is_file()  # the second load reads this cache,
    second = load_dataset("ogbn-arxiv", root=str(tmp_path))  # via torch.load (weights_only path)
    assert capsys.readouterr().out == ""  # ogb's prints are swallowed
    for g in (first, second):
        assert g.name == "ogbn-arxiv" and g.directed  # citation graph: ogb adds no inverse edges
        assert g.num_nodes == 6 and g.num_classes == 40  # class count from ogb's master.csv
        assert g.num_edges == len(OGB_EDGES)
        assert g.adj[1, 0] == 1 and g.adj[0, 1] == 1 and g.adj[4, 3] == 0 and g.adj[3, 4] == 1
        assert np.allclose(g.features, np.arange(18).reshape(6, 3) * 0.5)
        assert g.features.dtype == np.float32
        assert g.labels.tolist() == [0, 1, 2, 0, 1, 2] and g.labels.dtype == np.int64
        assert np.flatnonzero(g.train_mask).tolist() == [0, 1, 2]
        assert np.flatnonzero(g.val_mask).tolist() == [3]
        assert np.flatnonzero(g.test_mask).tolist() == [4, 5]
    assert (first.adj != second.adj).nnz == 0


def test_ogb_products_is_undirected(tmp_path, no_stdin_prompt):
    _write_ogb_csv(tmp_path, "ogbn-products", "sales_ranking", None)
    g = load_dataset("ogbn-products", root=str(tmp_path))
    assert not g.directed and g.num_classes == 47
    assert_symmetric_simple(g)
    assert g.num_edges == 2 * 7  # (0,1) and (1,0) are one undirected edge


def test_ogb_papers100m_binary_with_unlabelled_nodes(tmp_path, no_stdin_prompt):
    import torch

    d = tmp_path / "ogbn_papers100M"
    (d / "raw").mkdir(parents=True)
    (d / "split/time").mkdir(parents=True)
    edge_index = np.array([[0, 1, 2, 3], [1, 2, 3, 0]], dtype=np.int64)
    np.savez(d / "raw/data.npz", edge_index=edge_index, num_nodes_list=np.array([5]),
             num_edges_list=np.array([4]), node_feat=np.ones((5, 2), dtype=np.float32))
    y = np.array([[3.0], [np.nan], [171.0], [np.nan], [0.0]])
    np.savez(d / "raw/node-label.npz", node_label=y)
    torch.save({"train": np.array([0]), "valid": np.array([2]), "test": np.array([4])},
               d / "split/time/split_dict.pt")
    (d / "RELEASE_v1.txt").touch()
    g = load_dataset("ogbn-papers100m", root=str(tmp_path))  # spec names are case-insensitive
    assert g.name == "ogbn-papers100M" and g.directed and g.num_classes == 172
    assert g.labels.tolist() == [3, -1, 171, -1, 0]
    assert g.train_mask.tolist() == [True, False, False, False, False]
    assert g.test_mask[4] and g.val_mask[2]
    assert any("no label" in n for n in g.notes)


def test_ogb_bad_inputs(tmp_path, no_stdin_prompt):
    _refused("ogbn-arxiv", "root=DIR", "ogbn_arxiv")
    _refused("ogbn-arxiv", str(tmp_path / "ogbn_arxiv"), "raw/edge.csv.gz", "raw/node_year.csv.gz",
             root=str(tmp_path))
    _refused("ogbn-mag", "ogbn-mag", "not supported", root=str(tmp_path))
    _refused("ogbn-nope", "ogbn-nope", "ogbn-arxiv", root=str(tmp_path))

    d = _write_ogb_csv(tmp_path, "ogbn-arxiv", "time", "node_year")
    (d / "RELEASE_v1.txt").unlink()  # ogb would ask on stdin whether to re-download
    _refused("ogbn-arxiv", "RELEASE_v1.txt", root=str(tmp_path))
    (d / "RELEASE_v1.txt").touch()
    (d / "raw/node_year.csv.gz").unlink()
    _refused("ogbn-arxiv", "missing raw/node_year.csv.gz", root=str(tmp_path))
    _write_ogb_csv(tmp_path, "ogbn-arxiv", "time", "node_year")
    (d / "split/time/valid.csv.gz").unlink()
    _refused("ogbn-arxiv", "split/time/valid.csv.gz", root=str(tmp_path))

    d2 = _write_ogb_csv(tmp_path / "r2", "ogbn-arxiv", "time", "node_year",
                        labels=[0, 1, 40, 0, 1, 2])  # arxiv has 40 classes: 40 is out of range
    _refused("ogbn-arxiv", str(d2), "labels range over [0, 40]", root=str(tmp_path / "r2"))

    d3 = _write_ogb_csv(tmp_path / "r3", "ogbn-arxiv", "time", "node_year")
    (d3 / "raw/edge.csv.gz").write_bytes(b"this is not gzip")
    _refused("ogbn-arxiv", str(d3 / "raw/edge.csv.gz"), "not a readable csv.gz",
             root=str(tmp_path / "r3"))


# ---------------------------------------------------------------------------------------- npz

def _npz_graph(path: Path, **extra) -> sp.csr_matrix:
    adj = sp.csr_matrix(np.array([[0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1], [0, 0, 0, 0]],
                                 dtype=np.float32))
    np.savez(path, adj_data=adj.data, adj_indices=adj.indices, adj_indptr=adj.indptr,
             adj_shape=np.array(adj.shape), **extra)
    return adj


def test_npz_with_sparse_attributes_and_labels(tmp_path):
    attr = sp.csr_matrix(np.arange(12, dtype=np.float32).reshape(4, 3))
    _npz_graph(tmp_path / "g.npz", attr_data=attr.data, attr_indices=attr.indices,
               attr_indptr=attr.indptr, attr_shape=np.array(attr.shape),
               labels=np.array([0, 1, 1, 0]))
    g = load_dataset(f"npz:{tmp_path / 'g.npz'}")
    assert g.name == "g.npz" and g.num_nodes == 4 and g.num_classes == 2
    assert_symmetric_simple(g)
    assert g.num_edges == 6
    assert np.array_equal(g.features, attr.toarray())
    assert g.labels.tolist() == [0, 1, 1, 0]
    assert (g.train_mask | g.val_mask | g.test_mask).all()
    assert any("split is seeded random" in n for n in g.notes)
    assert not any("features are seeded" in n for n in g.notes)
    # relative paths are also looked up under root
    h = load_dataset("npz:g.npz", root=str(tmp_path))
    assert np.array_equal(h.labels, g.labels)


def test_npz_dense_attributes_given_split_and_missing_parts(tmp_path):
    _npz_graph(tmp_path / "d.npz", attr_matrix=np.eye(4, dtype=np.float64),
               labels=np.array([2, -1, 0, 1]), idx_train=np.array([0]), idx_val=np.array([2]),
               idx_test=np.array([3]))
    g = load_dataset(f"npz:{tmp_path / 'd.npz'}")
    assert np.array_equal(g.features, np.eye(4)) and g.num_classes == 3
    assert g.train_mask.tolist() == [True, False, False, False]
    assert g.labels[1] == -1 and not any("seeded" in n for n in g.notes)

    _npz_graph(tmp_path / "bare.npz")
    b1 = load_dataset(f"npz:{tmp_path / 'bare.npz'}", seed=3)
    b2 = load_dataset(f"npz:{tmp_path / 'bare.npz'}", seed=3)
    assert b1.num_features == 128 and np.array_equal(b1.features, b2.features)
    assert np.array_equal(b1.labels, b2.labels) and np.array_equal(b1.train_mask, b2.train_mask)
    assert any("features are seeded random" in n for n in b1.notes)
    assert any("degree" in n for n in b1.notes)


def test_npz_bad_inputs(tmp_path):
    p = tmp_path / "g.npz"
    _refused(f"npz:{p}", str(p), "not found")

    _npz_graph(p, labels=np.array([0, 1, 1, 0]))
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])
    _refused(f"npz:{p}", str(p), "not a readable .npz")

    p.write_text("0 1\n1 2\n")
    _refused(f"npz:{p}", str(p), "not a .npz (zip) archive")

    np.savez(p, adj_data=np.ones(1), adj_indices=np.zeros(1, dtype=np.int32))
    _refused(f"npz:{p}", str(p), "adj_indptr")

    np.savez(p, labels=np.zeros(3))
    _refused(f"npz:{p}", str(p), "adj_data")

    feats = np.ones((4, 2))
    feats[2, 1] = np.nan
    _npz_graph(p, attr_matrix=feats)
    _refused(f"npz:{p}", str(p), "NaN")

    _npz_graph(p, labels=np.array([0, 1, -5, 0]))
    _refused(f"npz:{p}", str(p), "labels range over [-5, 1]")

    _npz_graph(p, labels=np.array([0, 1, 2, 0]), class_names=np.array(["a", "b"]))
    _refused(f"npz:{p}", str(p), "[0, 1]")

    _npz_graph(p, attr_matrix=np.ones((3, 2)))
    _refused(f"npz:{p}", str(p), "(3, 2)")


# ---------------------------------------------------------------------------------------- mtx

def test_mtx_general_matrix(tmp_path):
    a = sp.coo_matrix((np.array([2.0, 5.0, 1.0, 7.0]), (np.array([0, 1, 3, 2]),
                                                         np.array([1, 2, 3, 4]))), shape=(5, 5))
    p = tmp_path / "web-tiny.mtx"
    scipy.io.mmwrite(str(p), a)
    g = load_dataset(f"mtx:{p}")
    assert g.name == "web-tiny.mtx" and g.num_nodes == 5
    assert_symmetric_simple(g)
    assert g.num_edges == 6  # 0-1, 1-2, 2-4; (3, 3) self loop dropped
    assert g.num_features == 128 and any("degree" in n for n in g.notes)
    assert (g.labels >= 0).all() and g.num_classes == 4


def test_mtx_symmetric_pattern_file(tmp_path):
    p = tmp_path / "sym.mtx"
    p.write_text("%%MatrixMarket matrix coordinate pattern symmetric\n% a comment\n"
                 "4 4 3\n2 1\n3 2\n4 1\n")
    g = load_dataset(f"mtx:{p}")
    assert g.num_nodes == 4 and g.num_edges == 6
    assert g.adj[0, 1] == 1 and g.adj[1, 0] == 1 and g.adj[0, 3] == 1


def test_mtx_bad_inputs(tmp_path):
    p = tmp_path / "bad.mtx"
    _refused(f"mtx:{p}", str(p), "not found")
    p.write_text("this is not\na matrix market file\n")
    _refused(f"mtx:{p}", str(p), "not a valid Matrix Market file")
    p.write_text("%%MatrixMarket matrix coordinate real general\n3 3 2\n1 2 1.0\n")
    _refused(f"mtx:{p}", str(p), "Matrix Market")  # truncated: promises 2 entries, has 1
    scipy.io.mmwrite(str(tmp_path / "rect.mtx"), sp.coo_matrix(np.ones((2, 3))))
    _refused(f"mtx:{tmp_path / 'rect.mtx'}", "rect.mtx", "2x3", "square")


# ----------------------------------------------------------------------------------- edge list

SNAP_TEXT = """# Directed graph (each unordered pair of nodes is saved once): tiny.txt
# Nodes: 4 Edges: 5
# FromNodeId\tToNodeId
10\t30
30\t10
30\t7
7\t7
1000\t10
"""


def test_edgelist_snap_remaps_ids(tmp_path):
    p = tmp_path / "tiny.txt"
    p.write_text(SNAP_TEXT)
    g = load_dataset(f"edgelist:{p}")
    assert g.name == "tiny.txt" and g.num_nodes == 4  # ids 7, 10, 30, 1000 -> 0, 1, 2, 3
    assert_symmetric_simple(g)
    dense = g.adj.toarray()
    assert dense[1, 2] and dense[2, 0] and dense[3, 1] and g.num_edges == 6
    assert any("remapped" in n for n in g.notes)
    assert any("split is seeded random" in n for n in g.notes)
    # Same graph from a gzipped file with an extra weight column and % comments (KONECT style).
    q = tmp_path / "tiny.tsv.gz"
    with gzip.open(q, "wt") as f:
        f.write("% sym unweighted\n10 30 1\n30 7 1\n7 7 1\n1000 10 2\n")
    h = load_dataset(f"edgelist:{q}")
    assert (h.adj != g.adj).nnz == 0


def test_edgelist_contiguous_ids_not_remapped(tmp_path):
    p = tmp_path / "c.txt"
    p.write_text("0 1\n1 2\n2 3\n")
    g = load_dataset(f"edgelist:{p}", seed=1)
    assert g.num_nodes == 4 and g.num_edges == 6
    assert not any("remapped" in n for n in g.notes)


def test_edgelist_bad_inputs(tmp_path):
    p = tmp_path / "bad.txt"
    _refused(f"edgelist:{p}", str(p), "not found")
    p.write_text("# header\n1 2\n2 3\n3 x7\n")
    _refused(f"edgelist:{p}", str(p), "line 4", "integers", "3 x7")
    p.write_text("1 2\n5\n")
    _refused(f"edgelist:{p}", str(p), "line 2", "src dst")
    p.write_text("# only comments\n\n")
    _refused(f"edgelist:{p}", str(p), "no edges")
    for line in ("１ 2", "1_0 2"):  # int() takes these; a node id is ASCII digits
        p.write_text(f"0 1\n{line}\n")
        _refused(f"edgelist:{p}", str(p), "line 2", "integers")


# ---------------------------------------------------------------------------------------- R-MAT

def test_rmat_deterministic_by_seed():
    spec = "rmat:scale=9,edge_factor=8,features=16,classes=5,seed=7"
    a, b = load_dataset(spec), load_dataset(spec)
    c = load_dataset(spec.replace("seed=7", "seed=8"))
    for name in ("features", "labels", "train_mask", "val_mask", "test_mask"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    assert np.array_equal(a.adj.indptr, b.adj.indptr)
    assert np.array_equal(a.adj.indices, b.adj.indices)
    assert a.adj.shape != c.adj.shape or (a.adj != c.adj).nnz > 0
    assert not np.array_equal(a.features, c.features)
    assert a.num_nodes == 512 and a.num_features == 16 and a.num_classes == 5
    assert_symmetric_simple(a)
    assert 0 < a.num_edges <= 2 * 8 * 512
    assert len(np.unique(a.labels)) == 5
    assert abs(a.train_mask.mean() - 0.6) < 0.01 and not (a.train_mask & a.test_mask).any()
    # skewed degrees, as R-MAT should give
    deg = np.diff(a.adj.indptr)
    assert deg.max() > 8 * deg.mean()


def test_rmat_defaults_and_seed_argument():
    g = load_dataset("rmat:scale=8", seed=3)
    assert g.num_nodes == 256 and g.num_features == 128 and g.num_classes == 8
    h = rmat_graph(scale=8, seed=3)
    assert np.array_equal(g.features, h.features) and (g.adj != h.adj).nnz == 0
    assert load_dataset("rmat:scale=8,seed=3", seed=99).adj.nnz == g.adj.nnz
    assert parse_rmat_params("", seed=5) == {"scale": 16, "edge_factor": 16, "features": 128,
                                             "classes": 8, "a": 0.57, "b": 0.19, "c": 0.19,
                                             "seed": 5}


@pytest.mark.parametrize("params, words", [
    ("scale=abc", ["scale must be an integer", "'abc'"]),
    ("scale=0", ["scale=0 out of range"]),
    ("scale=40", ["scale=40 out of range"]),
    ("edge_factor=0", ["edge_factor=0"]),
    ("classes=1", ["classes=1"]),
    ("features=-3", ["features=-3"]),
    ("colour=red", ["unknown parameter 'colour'", "scale"]),
    ("scale", ["'scale' is not key=value"]),
    ("a=0.9,b=0.2", ["a+b+c <= 1"]),
    ("a=x", ["a must be a number"]),
    ("a=nan", ["a must be a number"]),
    ("scale=１２", ["scale must be an integer"]),
    ("scale=1_2", ["scale must be an integer"]),
])
def test_rmat_bad_parameters(params, words):
    _refused(f"rmat:{params}", f"rmat:{params}", *words)


# ------------------------------------------------------------------------------- spec & helpers

def test_unknown_spec_lists_valid_forms():
    for spec in ("coraa", "foo:bar", ""):
        _refused(spec, "unknown dataset spec", "cora", "ogbn-arxiv", "npz:PATH", "rmat")
    _refused("npz:", "missing path")


def test_gcn_normalize_undirected_by_hand():
    # path 0 - 1 - 2: with self loops degrees are 2, 3, 2
    adj = edges_to_csr([0, 1], [1, 2], 3, symmetrize=True)
    a_hat = gcn_normalize(adj).toarray()
    s2, s3 = 1 / np.sqrt(2), 1 / np.sqrt(3)
    expected = np.array([[s2 * s2, s2 * s3, 0],
                         [s3 * s2, s3 * s3, s3 * s2],
                         [0, s2 * s3, s2 * s2]])
    assert np.allclose(a_hat, expected, atol=1e-6)
    assert a_hat.dtype == np.float32
    # one direction stored only: undirected normalization symmetrizes it
    assert np.allclose(gcn_normalize(edges_to_csr([0, 1], [1, 2], 3)).toarray(), expected)


def test_gcn_normalize_directed_follows_incoming_edges():
    # 0 -> 1, 0 -> 2, 1 -> 2: in-degrees + self loop: 1, 2, 3
    adj = edges_to_csr([0, 0, 1], [1, 2, 2], 3)
    a_hat = gcn_normalize(adj, directed=True).toarray()
    d = 1 / np.sqrt([1.0, 2.0, 3.0])
    m = np.array([[1, 0, 0], [1, 1, 0], [1, 1, 1]], dtype=float)  # row i: i itself + sources j -> i
    assert np.allclose(a_hat, d[:, None] * m * d[None, :], atol=1e-6)
    h = np.array([[1.0], [0.0], [0.0]])
    assert (a_hat @ h)[1, 0] > 0 and (a_hat.T @ h)[1, 0] == 0  # 1 hears from 0, not vice versa


def test_edges_to_csr_collapses_duplicates_and_self_loops():
    adj = edges_to_csr([0, 0, 1, 2, 2], [1, 1, 1, 0, 3], 4)
    assert adj.has_canonical_format and adj.dtype == np.float32
    assert adj.toarray().tolist() == [[0, 1, 0, 0], [0, 0, 0, 0], [1, 0, 0, 1], [0, 0, 0, 0]]
    assert edges_to_csr([], [], 2).nnz == 0


def test_synthetic_labels_and_split():
    adj = edges_to_csr(np.zeros(9, dtype=int), np.arange(1, 10), 12, symmetrize=True)
    labels = degree_bucket_labels(adj, num_classes=3, seed=0)
    assert np.bincount(labels).tolist() == [4, 4, 4]  # balanced despite many equal degrees
    assert labels[0] == 2 and labels[10] == 0 and labels[11] == 0  # hub top, isolated bottom
    tr, va, te = random_split(np.array([0, 1, -1] * 10), seed=0)
    assert not (tr & va).any() and not (va & te).any() and not (tr & te).any()
    assert (tr | va | te).sum() == 20 and not (tr | va | te)[2::3].any()


# ------------------------------------------------------------------ hostile and damaged inputs

class _Payload:
    """Unpickles to a call that creates a marker file (what a crafted cache would do)."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self):
        import os

        return (os.system, (f"touch {self.path}",))


@pytest.fixture
def little_memory(monkeypatch):
    """8 GiB available, whatever this machine has: the size checks are then deterministic."""
    from plexus_datasets import validate

    monkeypatch.setattr(validate, "available_bytes", lambda: 8.0 * 2**30)


@pytest.mark.parametrize("cache", ["processed/data_processed", "split/time/split_dict.pt"])
def test_ogb_crafted_cache_never_runs_code(tmp_path, no_stdin_prompt, cache):
    import torch

    d = _write_ogb_csv(tmp_path, "ogbn-arxiv", "time", "node_year")
    load_dataset("ogbn-arxiv", root=str(tmp_path))  # writes ogb's processed cache
    marker = tmp_path / "PAYLOAD-RAN"
    (d / cache).parent.mkdir(parents=True, exist_ok=True)
    torch.save({"graph": _Payload(marker), "labels": None, "train": _Payload(marker)}, d / cache)
    with pytest.raises(DatasetError) as e:
        load_dataset("ogbn-arxiv", root=str(tmp_path))
    assert not marker.exists()
    assert_one_line(e, str(d / cache), "posix.system refused", "delete it")


def test_ogb_malformed_caches_are_one_line_errors(tmp_path, no_stdin_prompt):
    import torch

    d = _write_ogb_csv(tmp_path, "ogbn-arxiv", "time", "node_year")
    (d / "processed").mkdir()
    good = {"edge_index": np.array(OGB_EDGES).T, "edge_feat": None, "num_nodes": 6,
            "node_feat": np.ones((6, 3), np.float32)}
    cases = [({**good, "num_nodes": "6"}, "num_nodes"), ({**good, "num_nodes": True}, "num_nodes"),
             ({**good, "edge_index": np.array([[0, 9], [1, 2]])}, "outside [0, 5]"),
             ({**good, "edge_index": np.array([[0.5, 1], [1, 2]])}, "edge_index"),
             ({**good, "edge_index": [[0, 1], [1, 2]]}, "edge_index"),
             ({**good, "num_nodes": 10**12}, "10^12"), ([1, 2], "not a dict"),
             ({**good, "node_feat": np.array(["a"] * 6)}, "node_feat")]
    for graph, needle in cases:
        torch.save({"graph": graph, "labels": np.zeros((6, 1))}, d / "processed/data_processed")
        _refused("ogbn-arxiv", str(d), needle.replace("10^12", str(10**12)), root=str(tmp_path))
    torch.save({"graph": good, "labels": np.zeros((6, 1))}, d / "processed/data_processed")
    torch.save({"train": np.array([0]), "valid": "1", "test": np.array([2])},
               d / "split/time/split_dict.pt")
    _refused("ogbn-arxiv", "split 'valid'", root=str(tmp_path))
    torch.save(torch.ones(3), d / "split/time/split_dict.pt")  # a tensor: not what ogb writes
    _refused("ogbn-arxiv", "split_dict.pt", "refused", root=str(tmp_path))


@pytest.mark.parametrize("key, change, needle", [
    ("adj_indptr", lambda a: a.__setitem__(2, 10**6), "indptr"),  # issue 16: a segfault
    ("adj_indptr", lambda a: a.__setitem__(3, 0), "indptr decreases"),
    ("adj_indices", lambda a: a.__setitem__(0, 4), "column indices range over"),
    ("adj_indices", lambda a: a.__setitem__(0, -1), "column indices range over"),
    ("adj_indptr", lambda a: a.__setitem__(-1, 99), "indptr runs from 0 to 99"),
])
def test_npz_inconsistent_csr_is_refused_before_scipy(tmp_path, key, change, needle):
    p = tmp_path / "g.npz"
    adj = sp.csr_matrix(np.array([[0, 1, 0, 0], [1, 0, 1, 0], [0, 1, 0, 1], [0, 0, 1, 0]],
                                 dtype=np.float32))
    parts = dict(adj_data=adj.data, adj_indices=adj.indices, adj_indptr=adj.indptr,
                 adj_shape=np.array(adj.shape))
    parts[key] = parts[key].astype(np.int64)
    change(parts[key])
    np.savez(p, **parts)
    _refused(f"npz:{p}", str(p), "adj_*", needle)


def test_declared_sizes_are_checked_before_allocating(tmp_path, little_memory):
    p = tmp_path / "g.npz"
    attr = sp.csr_matrix(np.ones((4, 2), np.float32))
    _npz_graph(p, attr_data=attr.data, attr_indices=attr.indices, attr_indptr=attr.indptr,
               attr_shape=np.array([4, 2**33]))
    _refused(f"npz:{p}", str(p), "128.0 GiB", "8.0 GiB")  # 4 x 2^33 float32 = 128 GiB
    _npz_graph(p, attr_data=attr.data, attr_indices=attr.indices, attr_indptr=attr.indptr,
               attr_shape=np.array([3, 2**33]))  # the case: 3 rows, not 4
    _refused(f"npz:{p}", str(p), "indptr has 5 entries, expected rows + 1 = 4")
    # a .npy member whose header claims more than it holds is refused before np.load allocates
    np.savez(p, adj_data=np.ones(1), adj_indices=np.zeros(1, np.int32),
             adj_indptr=np.array([0, 1]), adj_shape=np.array([1, 1]))
    raw = p.read_bytes().replace(b"'shape': (1,)", b"'shape': (9999999999,)", 1)
    p.write_bytes(raw)
    _refused(f"npz:{p}", str(p), "cannot read key")

    for n in (10**8, 10**10, 10**12):
        m = tmp_path / f"n{n}.mtx"
        m.write_text(f"%%MatrixMarket matrix coordinate pattern general\n{n} {n} 1\n1 2\n")
        _refused(f"mtx:{m}", str(m), str(n))
    m.write_text("%%MatrixMarket matrix coordinate pattern general\n5 5 100000000000\n1 2\n")
    _refused(f"mtx:{m}", str(m), "100000000000 entries", "GiB")

    d = tmp_path / "p"
    _write_planetoid(d, "toy", [5, 4], n_allx=4, n_train=2)
    (d / "ind.toy.test.index").write_text("9999999999\n4\n")
    _refused(f"planetoid:{d}", "ind.toy.test.index", "10000000000 nodes")


def test_mtx_body_with_stray_bytes_is_an_error_not_a_segfault(tmp_path):
    # scipy.io.mmread (fast_matrix_market) segfaulted on exactly this line
    p = tmp_path / "g.mtx"
    p.write_bytes(b"%%MatrixMarket matrix coordinate real general\n% fuzz\n8 8 3\n1 2 1.0\n"
                  b"2 3 1.\xff\x80\xff\xff\x80\x00\x80.0\n4 5 1.0\n")
    _refused(f"mtx:{p}", str(p), "Matrix Market")


def test_planetoid_sparse_matrices_of_the_wrong_kind_or_shape(tmp_path, little_memory):
    d = tmp_path / "p"
    bad_ptr = sp.csr_matrix(np.ones((4, 4), np.float32))
    bad_ptr.indptr = np.array([0, 10**6, 8, 12, 16], dtype=np.int32)
    float_idx = sp.csr_matrix(np.ones((4, 4), np.float32))
    float_idx.indices = float_idx.indices.astype(np.float64)
    lie = sp.csr_matrix(np.ones((4, 4), np.float32))
    lie._shape = (4, 2**40)
    for obj, needle in ((bad_ptr, "indptr"), (float_idx, "1-D integer array"),
                        (sp.lil_matrix(np.ones((4, 4))), "lil_matrix"),
                        (lie, "GiB"), (np.array(["a", "b"]), "numeric"),
                        ({"a": 1}, "numeric")):
        _write_planetoid(d, "toy", [5, 4], n_allx=4, n_train=2)
        with open(d / "ind.toy.allx", "wb") as f:
            pickle.dump(obj, f, protocol=2)
        _refused(f"planetoid:{d}", "ind.toy.allx", needle)
    # csc and coo are converted (and checked) like csr
    _write_planetoid(d, "toy", [5, 4], n_allx=4, n_train=2)
    with open(d / "ind.toy.allx", "rb") as f:
        allx = pickle.load(f)
    for other in (allx.tocsc(), allx.tocoo()):
        with open(d / "ind.toy.allx", "wb") as f:
            pickle.dump(other, f, protocol=2)
        assert load_dataset(f"planetoid:{d}").num_nodes == 6


def test_planetoid_test_index_takes_ascii_integers_only(tmp_path):
    d = tmp_path / "p"
    for text in ("５\n4\n", "1_0\n4\n", "99999999999999999999\n4\n"):
        _write_planetoid(d, "toy", [5, 4], n_allx=4, n_train=2)
        (d / "ind.toy.test.index").write_text(text)
        _refused(f"planetoid:{d}", "ind.toy.test.index", "line 1")


# ------------------------------------------------------------------------------- edge weights

def test_weighted_graphs_keep_their_weights(tmp_path):
    from types import SimpleNamespace

    from plexus_partition import write_store

    # an undirected edge given in both directions with two weights gets their mean, both ways
    adj = sp.coo_matrix((np.array([2.0, 4.0, 1.0, 5.0]), ([0, 1, 1, 2], [1, 0, 2, 2])),
                        shape=(3, 3))
    g = Graph.from_scipy(adj, np.ones((3, 2)), [0, 1, 0], weighted=True)
    assert g.weighted and g.adj.toarray().tolist() == [[0, 3, 0], [3, 0, 1], [0, 1, 0]]
    assert not Graph.from_scipy(adj, np.ones((3, 2)), [0, 1, 0]).weighted  # default: 1s
    d = Graph.from_scipy(adj, np.ones((3, 2)), [0, 1, 0], directed=True, weighted=True)
    assert d.adj.toarray().tolist() == [[0, 2, 0], [4, 0, 1], [0, 0, 0]]  # self loop dropped
    u = d.to_undirected()
    assert u.weighted and u.adj.toarray().tolist() == [[0, 3, 0], [3, 0, 1], [0, 1, 0]]
    data = SimpleNamespace(edge_index=np.array([[0, 1, 0], [1, 2, 1]]), x=np.ones((3, 2)),
                           y=np.array([0, 1, 0]), edge_weight=np.array([1.0, 3.0, 2.0]))
    p = Graph.from_pyg(data, weighted=True)  # a repeated edge: its weights summed, as GCNConv
    assert p.directed and p.adj.toarray().tolist() == [[0, 3, 0], [0, 0, 3], [0, 0, 0]]
    with pytest.raises(DatasetError, match="edge_weight"):
        Graph.from_pyg(SimpleNamespace(**{**vars(data), "edge_weight": None}), weighted=True)
    with pytest.raises(DatasetError, match="positive and finite"):
        Graph.from_scipy(sp.coo_matrix(([-1.0], ([0], [1])), shape=(2, 2)), np.ones((2, 1)),
                         [0, 0], weighted=True)
    # GCN's weighted degrees: d = 1 + Σ w over in-edges; SAGE's mean ignores the weights
    a_hat = g.normalized("gcn").toarray()
    deg = np.array([1 + 3, 1 + 3 + 1, 1 + 1])
    assert np.allclose(a_hat, (np.diag(1 / np.sqrt(deg)) @ (g.adj.toarray() + np.eye(3))
                               @ np.diag(1 / np.sqrt(deg))))
    assert np.allclose(g.normalized("mean").toarray(), [[0, 1, 0], [0.5, 0, 0.5], [0, 1, 0]])
    with pytest.raises(DatasetError, match="does not carry edge weights") as e:
        write_store(g, tmp_path / "store", {"x": 1, "y": 1, "z": 1}, 2)
    assert_one_line(e)
    assert not (tmp_path / "store").exists()
