"""Seeded fuzzing of every input file kind Plexus reads: npz, Matrix Market, edge lists, Planetoid
files, an OGB directory (raw CSVs and ogb's pickled caches), a shard store and a graph directory
(`plexus.datasets.diskgraph`); and of the Python API's graph inputs (kind ``api``, `plexus.testing.fuzz_api`). The study folders of plexus-sweep
and plexus-report have their cases in `plexus.studies.fuzzcases`, run by the same harness.

`make_cases` writes small valid inputs and, from a seed, mutated copies of them: bit flips,
truncations, field and type edits, size lies, crafted pickles whose payload would create a
marker file, store files swapped or altered along with their manifest. `run_cases` loads each
case in a child process (a segfault must be seen, not suffered) exactly as the command lines do
(`plexus.datasets.load_dataset`, `plexus.partitioners.read_shard`, `plexus.load_pyg` for a weights
export) and sorts the outcomes:

- ``ok``: loaded (and, for a graph, GCN-normalized without trouble);
- ``error``: a typed one-line error, what the command lines print as ``error:`` with exit 2;
- ``traceback``: any other exception (a command line would print a traceback);
- ``signal``: the process died (segfault, abort, OOM kill);
- ``payload``: the marker file appeared (a pickle ran code);
- ``hang``: the case ran longer than `CASE_LIMIT_S` (e.g. blocked on a FIFO).

Only the first two are acceptable. ``tests/datasets/test_fuzz_inputs.py`` runs a bounded set in the
test suite; ``benchmarks/fuzz_inputs.py`` a larger one. The readers of graph directories and exports
(`READER_KINDS`, size bombs included) also run one process per case (`run_cases_forked`), so
each case's peak RSS is its own: ``benchmarks/fuzz_readers.py`` holds it to `RSS_LIMIT_KB`.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import os
import pickle
import random
import shutil
import signal
import subprocess
import sys
import zipfile
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import scipy.sparse as sp
from plexus.core import owned

from plexus.core.ops import KINDS as MODEL_KINDS

KINDS = ("npz", "mtx", "edgelist", "planetoid", "ogb", "store", "graph", "export", "api")
#: The readers' kinds whose every case runs in a process of its own, its peak RSS measured
READER_KINDS = ("graph", "export")
RSS_LIMIT_KB = 1 << 20  # 1 GiB: what one case of a reader may take at its peak
GOOD = ("ok", "error")
OUTCOMES = ("ok", "error", "traceback", "signal", "payload", "hang")
MARKER_NAME = "PAYLOAD-RAN"
CASE_LIMIT_S = 60  # a case that runs longer hangs


@dataclass
class Case:
    """One input to load: ``spec``/``root`` for `load_dataset`, or a store directory."""

    kind: str
    name: str
    spec: str = ""
    root: str | None = None
    store: str | None = None
    coords: tuple[int, int, int] = (0, 0, 0)
    #: for testing the harness itself: "signal" kills the loading process, "payload" creates
    #: the marker file, as a segfault or a crafted pickle would
    selftest: str | None = None


# ------------------------------------------------------------------------- mutations of bytes


def flip_bits(data: bytes, rng: random.Random, count: int | None = None) -> bytes:
    """``data`` with 1-4 (or ``count``) random bits flipped."""
    out = bytearray(data)
    for _ in range(count or rng.randint(1, 4)):
        if out:
            out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
    return bytes(out)


def truncate(data: bytes, rng: random.Random) -> bytes:
    return data[:rng.randrange(max(1, len(data)))]


def overwrite(data: bytes, rng: random.Random) -> bytes:
    """A few bytes at a random place set to boundary values (0x00, 0xff, 0x7f, 0x80)."""
    out = bytearray(data)
    at = rng.randrange(max(1, len(out)))
    for i in range(rng.randint(1, 8)):
        if at + i < len(out):
            out[at + i] = rng.choice((0x00, 0xFF, 0x7F, 0x80))
    return bytes(out)


def mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    return rng.choice((flip_bits, flip_bits, truncate, overwrite))(data, rng)


def rezip(path: Path, rng: random.Random, member_filter: Callable[[str], bool] = lambda n: True
          ) -> None:
    """Mutate the bytes of one zip member and rewrite the archive with valid CRCs, so that the
    damage reaches the reader instead of zipfile's checksum."""
    with zipfile.ZipFile(path) as zf:
        members = [(info, zf.read(info)) for info in zf.infolist()]
    target = rng.choice([i for i, (info, _) in enumerate(members) if member_filter(info.filename)]
                        or [0])
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zf:
        for i, (info, data) in enumerate(members):
            zf.writestr(info.filename, mutate_bytes(data, rng) if i == target else data)


# ----------------------------------------------------------------------------- valid inputs

EDGES = [(0, 1), (1, 2), (2, 0), (3, 4), (4, 5), (5, 3), (0, 3), (1, 0), (6, 2), (7, 6)]
N = 8


def _gz_csv(path: Path, rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        for row in rows:
            f.write(",".join(str(v) for v in np.atleast_1d(row)) + "\n")


class _Payload:
    """Unpickles to a call that creates ``path``: what a crafted cache would do."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


def write_npz(path: Path, **edit) -> None:
    adj = sp.csr_matrix((np.ones(len(EDGES), np.float32), np.array(EDGES).T), shape=(N, N))
    attr = sp.csr_matrix(np.arange(N * 3, dtype=np.float32).reshape(N, 3) % 4)
    parts = dict(adj_data=adj.data, adj_indices=adj.indices, adj_indptr=adj.indptr,
                 adj_shape=np.array(adj.shape), attr_data=attr.data, attr_indices=attr.indices,
                 attr_indptr=attr.indptr, attr_shape=np.array(attr.shape),
                 labels=np.arange(N) % 3, idx_train=np.array([0, 1]), idx_val=np.array([2]),
                 idx_test=np.array([3, 4]))
    for key, value in edit.items():
        if value is None:
            parts.pop(key, None)
        else:
            parts[key] = value
    with open(path, "wb") as f:
        np.savez(f, **parts)


def write_mtx(path: Path) -> None:
    lines = [f"{s + 1} {d + 1} 1.0" for s, d in EDGES]
    path.write_text("%%MatrixMarket matrix coordinate real general\n% fuzz\n"
                    f"{N} {N} {len(lines)}\n" + "\n".join(lines) + "\n")


def write_edgelist(path: Path) -> None:
    path.write_text("# fuzz\n" + "".join(f"{10 * s}\t{10 * d}\n" for s, d in EDGES))


def write_planetoid(d: Path, name: str = "toy", objs: dict | None = None,
                    test_index: str | None = None) -> None:
    """Small ind.<name>.* files: 6 allx rows, test nodes 6 and 7."""
    d.mkdir(parents=True, exist_ok=True)
    feats = sp.csr_matrix(np.eye(N, 4, dtype=np.float32) + 0.5)
    onehot = np.eye(3, dtype=np.int64)[np.arange(N) % 3]
    base = {"x": feats[:2], "y": onehot[:2], "allx": feats[:6], "ally": onehot[:6],
            "tx": feats[6:], "ty": onehot[6:],
            "graph": {v: [u for s, u in EDGES if s == v] for v in range(N)}}
    base.update(objs or {})
    for key, obj in base.items():
        with open(d / f"ind.{name}.{key}", "wb") as f:
            pickle.dump(obj, f, protocol=2)
    (d / f"ind.{name}.test.index").write_text("7\n6\n" if test_index is None else test_index)


def write_ogb(root: Path, processed: bool = True) -> Path:
    """ogbn-arxiv's raw layout for a tiny graph, plus ogb's caches (``processed``)."""
    d = root / "ogbn_arxiv"
    _gz_csv(d / "raw/edge.csv.gz", EDGES)
    _gz_csv(d / "raw/num-node-list.csv.gz", [N])
    _gz_csv(d / "raw/num-edge-list.csv.gz", [len(EDGES)])
    _gz_csv(d / "raw/node-feat.csv.gz", np.arange(N * 3).reshape(N, 3) * 0.5)
    _gz_csv(d / "raw/node-label.csv.gz", [[i % 3] for i in range(N)])
    _gz_csv(d / "raw/node_year.csv.gz", [[2000 + i] for i in range(N)])
    for part, ids in (("train", [0, 1, 2]), ("valid", [3]), ("test", [4, 5])):
        _gz_csv(d / f"split/time/{part}.csv.gz", ids)
    (d / "RELEASE_v1.txt").touch()
    if processed:
        import torch

        graph = {"edge_index": np.array(EDGES, dtype=np.int64).T, "edge_feat": None,
                 "node_feat": (np.arange(N * 3).reshape(N, 3) * 0.5).astype(np.float32),
                 "num_nodes": N, "node_year": np.arange(N)[:, None] + 2000}
        (d / "processed").mkdir(exist_ok=True)
        torch.save({"graph": graph, "labels": (np.arange(N) % 3)[:, None]},
                   d / "processed/data_processed", pickle_protocol=4)
        torch.save({"train": np.array([0, 1, 2]), "valid": np.array([3]),
                    "test": np.array([4, 5])}, d / "split/time/split_dict.pt")
    return d


def write_store(out: Path, grid=(2, 1, 1)) -> None:
    from plexus.datasets import load_dataset
    from plexus.partitioners import write_store as _write

    graph = load_dataset("rmat:scale=6,edge_factor=4,features=4,classes=3,seed=1")
    _write(graph, out, grid, 2, "agg", "double", 0)


def rehash(store: Path) -> None:
    """Make the manifest agree with the files' current sizes and sha256 (a forged store)."""
    from plexus.partitioners.store import file_sha256

    manifest = json.loads((store / "manifest.json").read_text())
    for entry in manifest["ranks"]:
        f = store / entry["file"]
        if f.is_file():
            entry["size"], entry["sha256"] = f.stat().st_size, file_sha256(f)
    (store / "manifest.json").write_text(json.dumps(manifest))


# ----------------------------------------------------------------------------- mutated cases

_ODD_VALUES = (None, True, -1, 0, 2**63, 1e308, "12", "", [], {}, [[1]], {"x": 1}, 3.5)
_BIG = (2**31, 2**33, 10**8, 10**10, 10**12, 2**62)


def _npz_case(d: Path, rng: random.Random, marker: Path) -> None:
    p = d / "g.npz"
    keys = ["adj_data", "adj_indices", "adj_indptr", "adj_shape", "attr_data", "attr_indices",
            "attr_indptr", "attr_shape", "labels", "idx_train", "idx_val", "idx_test"]
    how = rng.choice(("value", "dtype", "shape", "drop", "lie", "rezip", "bytes"))
    key = rng.choice(keys)
    write_npz(p)
    with np.load(p) as z:
        arr = z[key].copy()
    if how == "value" and arr.size:
        arr = arr.astype(np.int64) if arr.dtype.kind != "f" else arr
        arr.flat[rng.randrange(arr.size)] = rng.choice((-1, 10**6, 2**31, -(2**40), N, 0))
        write_npz(p, **{key: arr})
    elif how == "dtype":
        write_npz(p, **{key: arr.astype(rng.choice((np.float64, np.int8, np.uint64, np.bool_,
                                                    np.complex64, "U3")))})
    elif how == "shape":
        write_npz(p, **{key: rng.choice((arr.reshape(1, -1), np.zeros(0, arr.dtype),
                                         np.concatenate([arr, arr]), arr[:-1]))})
    elif how == "drop":
        write_npz(p, **{key: None})
    elif how == "lie":
        k = rng.choice(("adj_shape", "attr_shape"))
        write_npz(p, **{k: np.array(rng.choice(([3, 2**33], [2**40, 2**40], [N, 2**40],
                                                [10**12, 10**12], [-1, N], [N, N, N])))})
    elif how == "rezip":
        rezip(p, rng)
    else:
        p.write_bytes(mutate_bytes(p.read_bytes(), rng))


def _mtx_case(d: Path, rng: random.Random, marker: Path) -> None:
    p = d / "g.mtx"
    write_mtx(p)
    lines = p.read_text().splitlines()
    how = rng.choice(("header", "entry", "banner", "bytes"))
    if how == "header":
        sizes = [str(rng.choice((N, *_BIG, -3, 0))) for _ in range(3)]
        lines[2] = " ".join(sizes)
    elif how == "entry":
        i = rng.randrange(3, len(lines))
        lines[i] = rng.choice(("0 1 1.0", f"{N + 1} 1 1.0", "-5 2 1", "1 2", "a b c",
                               "1 2 nan", "99999999999999999999 1 1", "１ 2 1.0"))
    elif how == "banner":
        lines[0] = rng.choice(("%%MatrixMarket matrix array real general",
                               "%%MatrixMarket matrix coordinate complex hermitian",
                               "%%MatrixMarket matrix coordinate pattern skew-symmetric",
                               "%%MatrixMarket vector coordinate real general", "%%junk"))
    p.write_text("\n".join(lines) + "\n")
    if how == "bytes":
        p.write_bytes(mutate_bytes(p.read_bytes(), rng))


def _edgelist_case(d: Path, rng: random.Random, marker: Path) -> None:
    p = d / "g.txt"
    write_edgelist(p)
    lines = p.read_text().splitlines()
    if rng.random() < 0.5:
        lines.insert(rng.randrange(len(lines) + 1), rng.choice((
            "1", "1 2 3 4", "x y", "-5 -7", "99999999999999999999 1", f"{2**62} 0",
            "１ ２", "1_0 2", "0x10 1", "1e3 2", "\x00\x01 2")))
        p.write_text("\n".join(lines) + "\n")
    else:
        p.write_bytes(mutate_bytes(p.read_bytes(), rng))


def _planetoid_case(d: Path, rng: random.Random, marker: Path, cora: Path | None) -> None:
    how = rng.choice(("bytes", "bytes", "object", "index", "payload", "cora"))
    if how == "cora" and cora is not None:
        for f in cora.glob("ind.cora.*"):
            shutil.copy(f, d / f.name)
        target = d / f"ind.cora.{rng.choice(('allx', 'tx', 'x', 'graph', 'ally', 'ty'))}"
        target.write_bytes(flip_bits(target.read_bytes(), rng, rng.randint(1, 2)))
        return
    write_planetoid(d)
    key = rng.choice(("x", "y", "tx", "ty", "allx", "ally", "graph"))
    if how in ("bytes", "cora"):
        f = d / f"ind.toy.{key}"
        f.write_bytes(mutate_bytes(f.read_bytes(), rng))
    elif how == "object":
        good = sp.csr_matrix(np.ones((2, 4), np.float32))
        lie = sp.csr_matrix(np.ones((2, 4), np.float32))
        lie._shape = rng.choice(((2, 2**40), (2**40, 4), (-1, 4)))
        bad_ptr = sp.csr_matrix(np.ones((2, 4), np.float32))
        bad_ptr.indptr = np.array([0, 10**6, 8], dtype=np.int32)
        bad_idx = sp.csr_matrix(np.ones((2, 4), np.float32))
        bad_idx.indices = bad_idx.indices.astype(np.float64)
        obj = rng.choice((good.tocsc(), good.tocoo(), good.tolil(), good.todok(), lie,
                          bad_ptr, bad_idx, [[1, 2]], "text", 7, None, {"a": 1},
                          np.array(["a", "b"]), np.ones((2, 4, 1))))
        write_planetoid(d, objs={key: obj})
    elif how == "index":
        write_planetoid(d, test_index=rng.choice((
            "9999999999\n6\n", "7\n-6\n", "7\n7\n", "７\n6\n", "1_0\n6\n", "7\n6\n" * 3,
            "\n", "99999999999999999999999\n6\n", "7\n6\n1000\n")))
    else:
        write_planetoid(d, objs={key: _Payload(marker)})


def _ogb_case(d: Path, rng: random.Random, marker: Path) -> None:
    ds = write_ogb(d, processed=rng.random() < 0.6)
    cached = (ds / "processed/data_processed").exists()
    how = rng.choice(("csv", "csv", "cache", "payload", "edit") if cached else ("csv",))
    if how == "csv":
        target = rng.choice(("num-node-list", "num-edge-list", "edge", "node-label",
                             "node-feat", "node_year"))
        path = ds / f"raw/{target}.csv.gz"
        choice = rng.random()
        if choice < 0.5:
            _gz_csv(path, [[rng.choice((-1, 10**12, 2**40, "x", 1.5, ""))]] +
                    [[v] for v in range(rng.randint(0, N))])
        else:
            path.write_bytes(mutate_bytes(path.read_bytes(), rng))
        owned.remove_tree(ds / "processed", quiet=True)
        owned.remove_file(ds / "split/time/split_dict.pt")
    elif how == "cache":
        path = ds / rng.choice(("processed/data_processed", "split/time/split_dict.pt"))
        if rng.random() < 0.5:
            rezip(path, rng, lambda n: n.endswith("data.pkl"))
        else:
            path.write_bytes(mutate_bytes(path.read_bytes(), rng))
    elif how == "payload":
        import torch

        if rng.random() < 0.5:
            torch.save({"graph": _Payload(marker), "labels": None},
                       ds / "processed/data_processed")
        else:
            torch.save({"train": _Payload(marker)}, ds / "split/time/split_dict.pt")
    else:
        import torch

        graph = {"edge_index": np.array(EDGES, dtype=np.int64).T, "edge_feat": None,
                 "node_feat": np.ones((N, 3), np.float32), "num_nodes": N}
        field = rng.choice(list(graph) + ["labels", "split"])
        value = rng.choice((*_ODD_VALUES, np.array([[0, 99], [1, 2]]), np.ones((N, 2)) * np.nan,
                            np.array(["a"] * N), 10**12))
        labels = (np.arange(N) % 3)[:, None]
        split = {"train": np.array([0]), "valid": np.array([1]), "test": np.array([2])}
        if field == "labels":
            labels = value
        elif field == "split":
            split["valid"] = value
        else:
            graph[field] = value
        torch.save({"graph": graph, "labels": labels}, ds / "processed/data_processed")
        torch.save(split, ds / "split/time/split_dict.pt")


def _json_edit(obj, rng: random.Random, depth: int = 0):
    """``obj`` with one field somewhere replaced by an odd value (or deleted)."""
    if isinstance(obj, dict) and obj:
        key = rng.choice(sorted(obj))
        if depth > 0 and rng.random() < 0.4 or not isinstance(obj[key], (dict, list)):
            if rng.random() < 0.2:
                del obj[key]
            else:
                obj[key] = rng.choice(_ODD_VALUES + _BIG)
        else:
            obj[key] = _json_edit(obj[key], rng, depth + 1)
    elif isinstance(obj, list) and obj:
        i = rng.randrange(len(obj))
        obj[i] = _json_edit(obj[i], rng, depth + 1) if isinstance(obj[i], (dict, list)) and \
            rng.random() < 0.6 else rng.choice(_ODD_VALUES + _BIG)
    return obj


def _store_case(d: Path, rng: random.Random, marker: Path, base: Path) -> None:
    store = d / "s"
    shutil.copytree(base, store)
    how = rng.choice(("member", "member", "manifest", "swap", "header", "nested", "bytes"))
    files = sorted(store.glob("rank-*.npz"))
    if how == "member":  # damage inside a member, with CRCs and the manifest made consistent
        rezip(rng.choice(files), rng)
        rehash(store)
    elif how == "bytes":
        f = rng.choice(files)
        f.write_bytes(mutate_bytes(f.read_bytes(), rng))
        if rng.random() < 0.5:
            rehash(store)
    elif how == "manifest":
        m = json.loads((store / "manifest.json").read_text())
        (store / "manifest.json").write_text(json.dumps(_json_edit(m, rng)))
    elif how == "swap":
        a, b = files[0], files[1]
        tmp = a.with_suffix(".tmp")
        owned.move(a, tmp)
        owned.move(b, a)
        owned.move(tmp, b)
        rehash(store)
    elif how == "header":  # the JSON header inside a shard file, re-hashed
        f = rng.choice(files)
        with zipfile.ZipFile(f) as zf:
            members = {i.filename: zf.read(i) for i in zf.infolist()}
        with np.load(f) as z:
            header = json.loads(z["header"].tobytes())
        buf = io.BytesIO()
        np.lib.format.write_array(buf, np.frombuffer(json.dumps(_json_edit(header, rng))
                                                     .encode(), dtype=np.uint8))
        members["header.npy"] = buf.getvalue()
        with zipfile.ZipFile(f, "w") as zf:
            for name, data in members.items():
                zf.writestr(name, data)
        rehash(store)
    else:
        depth = rng.choice((1000, 100000))
        (store / "manifest.json").write_text('{"format": "plexus-shard-store", "version": 1, '
                                             '"x": ' + "[" * depth + "]" * depth + "}")


def _graph_case(d: Path, rng: random.Random, marker: Path) -> None:
    """A graph directory with one .npy file or its header damaged (some re-hashed to agree)."""
    from plexus.datasets.diskgraph import header_sha256  # noqa: PLC0415
    from plexus.datasets.diskwrite import write_graph  # noqa: PLC0415
    from plexus.datasets.graph import Graph  # noqa: PLC0415
    from plexus.datasets.npyio import write_header as npy_write_header  # noqa: PLC0415

    adj = sp.csr_matrix((np.ones(len(EDGES), np.float32), np.array(EDGES).T), shape=(N, N))
    g = d / "g"
    write_graph(Graph("fuzz", adj, np.ones((N, 2), np.float32), np.arange(N) % 3,
                      np.arange(N) < 3, np.arange(N) == 3, np.arange(N) == 4, 3,
                      directed=bool(rng.random() < 0.5)), g,
                rng.choice(("float32", "float16", "bfloat16")))
    header = json.loads((g / "graph.json").read_text())
    how = rng.choice(("bytes", "bytes", "header", "header", "dtype", "bomb", "special",
                      "nested", "sizes"))
    if how == "bomb":  # an array whose header declares far more than the file holds
        f = g / rng.choice(sorted(p.name for p in g.glob("*.npy")))
        arr = np.load(f)
        rows = rng.choice(_BIG)
        with open(f, "wb") as out:
            npy_write_header(out, arr.dtype, (rows, *arr.shape[1:]))
            out.write(arr.tobytes())
        if rng.random() < 0.5:  # and the graph header agreeing with it
            name = f.stem
            if name in header.get("arrays", {}):
                header["arrays"][name]["shape"] = [rows, *arr.shape[1:]]
                header["content_sha256"] = header_sha256(header)
                (g / "graph.json").write_text(json.dumps(header))
    elif how == "special":  # a FIFO or a device where a file should be
        f = g / rng.choice(sorted(p.name for p in g.glob("*.npy")) + ["graph.json"])
        owned.remove_file(f)
        if rng.random() < 0.5:
            os.mkfifo(f)
        else:
            f.symlink_to(rng.choice(("/dev/zero", "/dev/null", "/dev/urandom")))
    elif how == "nested":
        depth = rng.choice((1000, 100000))
        (g / "graph.json").write_text('{"format": "plexus-graph", "x": ' + "[" * depth +
                                      "]" * depth + "}")
    elif how == "sizes":  # the header lies about the sizes, re-hashed to agree
        key = rng.choice(("num_nodes", "num_edges", "num_features", "num_classes"))
        header[key] = rng.choice(_BIG + (-1, 0, 3 * 10**9))
        header["content_sha256"] = header_sha256(header)
        (g / "graph.json").write_text(json.dumps(header))
    elif how == "bytes":
        f = g / rng.choice(sorted(p.name for p in g.glob("*.npy")))
        f.write_bytes(mutate_bytes(f.read_bytes(), rng))
    elif how == "dtype":
        f = g / rng.choice(("src.npy", "labels.npy", "train.npy", "features.npy"))
        np.save(f, np.load(f).astype(rng.choice((np.float64, np.int8, np.uint64, np.int64))))
    else:
        header = _json_edit(header, rng)
        if isinstance(header, dict) and rng.random() < 0.7:
            header["content_sha256"] = header_sha256(header)
        (g / "graph.json").write_text(json.dumps(header))


def write_export(path: Path, kind: str = "gcn", features: int = 6) -> None:
    """A valid weights export (``plexus.load_pyg``'s input) of a small ``kind`` model."""
    import torch  # noqa: PLC0415

    from plexus.core.model import ModelConfig  # noqa: PLC0415
    from plexus.engine.pygmodel import PygModel, pyg_spec  # noqa: PLC0415

    cfg = ModelConfig(kind=kind, num_layers=2, hidden=4,
                      **({"norm": "batch"} if kind == "sage" else {}))
    spec = pyg_spec(cfg, features, 3)
    torch.manual_seed(0)
    torch.save({"format": "plexus-weights/2", "kind": kind,
                "state_dict": PygModel(spec).state_dict(), "config": dataclasses_dict(cfg),
                "pyg": spec}, path)


def dataclasses_dict(obj) -> dict:  # noqa: ANN001
    from dataclasses import asdict as _asdict  # noqa: PLC0415

    return _asdict(obj)


def write_bomb(path: Path, base: Path, nbytes: int = 1 << 30) -> None:
    """``base`` (an export) with a tensor of ``nbytes`` zeros added, its members deflated: a
    ~1 MB file that inflates to ``nbytes``."""
    import torch  # noqa: PLC0415

    payload = torch.load(base, weights_only=True)
    payload["features"] = torch.zeros(nbytes // 4)
    buf = io.BytesIO()
    torch.save(payload, buf)
    del payload
    with zipfile.ZipFile(buf) as zin, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, zin.read(info))


def _export_case(d: Path, rng: random.Random, bases: dict[str, Path]) -> None:
    """An export (load_pyg) edited: its PyG description, its tensors, its bytes, or a size bomb."""
    import torch  # noqa: PLC0415

    p = d / "w.pt"
    kind = rng.choice(tuple(MODEL_KINDS))  # every kind the registry declares
    how = rng.choice(("spec", "spec", "spec", "width", "tensor", "bytes", "rezip", "bomb",
                      "special", "nest", "keys"))
    if how == "bomb":
        shutil.copy(bases["bomb"], p)
        return
    shutil.copy(bases[kind], p)
    if how == "special":
        owned.remove_file(p)
        if rng.random() < 0.5:
            os.mkfifo(p)
        else:
            p.symlink_to(rng.choice(("/dev/zero", "/dev/null")))
        return
    if how == "bytes":
        p.write_bytes(mutate_bytes(p.read_bytes(), rng))
        return
    if how == "rezip":
        rezip(p, rng, lambda n: n.endswith("data.pkl"))
        return
    payload = torch.load(p, weights_only=True)
    layers = payload["pyg"]["layers"]
    conv = layers[rng.randrange(len(layers))]["conv"]
    if how == "spec":
        payload["pyg"] = _json_edit(payload["pyg"], rng)
    elif how == "width":  # a declared width: huge, negative, or a placement
        target = conv["nn"][0] if "nn" in conv else conv
        key = rng.choice([k for k in target if k != "class"] or ["class"])
        target[key] = rng.choice((65536, 1 << 20, 1 << 40, -3, 0, "meta", float("nan"),
                                  float("inf"), True))
        if rng.random() < 0.3:
            target[rng.choice(("device", "dtype"))] = rng.choice(("meta", "cuda", "float64"))
    elif how == "tensor":
        sd = payload["state_dict"]
        name = rng.choice(sorted(sd))
        sd[name] = rng.choice((torch.zeros(0), torch.ones(3, 5), sd[name].double(),
                               sd[name].T.contiguous() if sd[name].dim() == 2 else sd[name][:1],
                               torch.full_like(sd[name], float("nan")), "x", None))
    elif how == "nest":
        inner = {"class": "Linear", "in_features": 2, "out_features": 2}
        for _ in range(rng.choice((50, 3000))):
            inner = {"class": rng.choice(("GINConv", "Linear")), "nn": [inner]}
        layers[0]["conv"] = inner
    else:
        for key in rng.sample(sorted(payload), rng.randint(1, 2)):
            payload[key] = rng.choice(_ODD_VALUES)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(20000)  # pickling the nested descriptions
    try:
        torch.save(payload, p)
    finally:
        sys.setrecursionlimit(limit)


def make_cases(work: Path, seed: int, per_kind: int, kinds=KINDS,
               cora: Path | None = None, bomb_bytes: int = 1 << 30) -> list[Case]:
    """``per_kind`` mutated inputs of each kind under ``work`` (seeded), as `Case` records.

    ``cora`` is a directory holding the real ``ind.cora.*`` files, bit-flipped by some of the
    Planetoid cases; ``bomb_bytes``: what the exports' deflated size bomb inflates to.
    """
    rng = random.Random(seed)
    marker = work / MARKER_NAME
    cases: list[Case] = []
    base_store = work / "base-store"
    if "store" in kinds:
        write_store(base_store)
    bases: dict[str, Path] = {}
    if "export" in kinds:
        (work / "base-export").mkdir()
        for kind in MODEL_KINDS:
            bases[kind] = work / "base-export" / f"{kind}.pt"
            write_export(bases[kind], kind)
        bases["bomb"] = work / "base-export" / "bomb.pt"
        write_bomb(bases["bomb"], bases["gcn"], bomb_bytes)
    for kind in kinds:
        for i in range(per_kind):
            d = work / f"{kind}-{i:04d}"
            d.mkdir(parents=True)
            r = random.Random(rng.getrandbits(64))
            name = f"{kind}-{i:04d}"
            if kind == "npz":
                _npz_case(d, r, marker)
                cases.append(Case(kind, name, f"npz:{d / 'g.npz'}"))
            elif kind == "mtx":
                _mtx_case(d, r, marker)
                cases.append(Case(kind, name, f"mtx:{d / 'g.mtx'}"))
            elif kind == "edgelist":
                _edgelist_case(d, r, marker)
                cases.append(Case(kind, name, f"edgelist:{d / 'g.txt'}"))
            elif kind == "planetoid":
                _planetoid_case(d, r, marker, cora)
                sets = sorted(p.name[4:-2] for p in d.glob("ind.*.x"))
                cases.append(Case(kind, name, f"planetoid:{d}/ind.{sets[0] if sets else 'toy'}"))
            elif kind == "ogb":
                _ogb_case(d, r, marker)
                cases.append(Case(kind, name, "ogbn-arxiv", root=str(d)))
            elif kind == "graph":
                _graph_case(d, r, marker)
                cases.append(Case(kind, name, f"graph:{d / 'g'}"))
            elif kind == "export":
                _export_case(d, r, bases)
                cases.append(Case(kind, name, str(d / "w.pt")))
            elif kind == "store":
                _store_case(d, r, marker, base_store)
                cases.append(Case(kind, name, store=str(d / "s"),
                                  coords=r.choice(((0, 0, 0), (1, 0, 0)))))
            elif kind == "api":
                from .fuzz_api import make_case  # noqa: PLC0415

                make_case(d / "case.pkl", r)
                cases.append(Case(kind, name, str(d / "case.pkl")))
    return cases


def cora_flip_cases(work: Path, cora: Path, count: int, seed: int) -> list[Case]:
    """``count`` copies of the real Cora files with one bit flipped in ``allx`` or ``tx`` (the
    flips that made scipy segfault in issue 16)."""
    rng = random.Random(seed)
    cases = []
    for i in range(count):
        d = work / f"cora-{i:04d}"
        d.mkdir(parents=True)
        for f in cora.glob("ind.cora.*"):
            shutil.copy(f, d / f.name)
        target = d / f"ind.cora.{rng.choice(('allx', 'tx'))}"
        target.write_bytes(flip_bits(target.read_bytes(), rng, 1))
        cases.append(Case("planetoid", f"cora-{i:04d}", f"planetoid:{d}/ind.cora"))
    return cases


# ------------------------------------------------------------------------------- running them


def run_one(case: Case) -> tuple[str, str]:
    """(outcome, detail) of loading one case in this process (no ``signal``/``payload`` here)."""
    from plexus.datasets import DatasetError, gcn_normalize, load_dataset
    from plexus.partitioners import ShardStoreError, read_shard

    if case.kind == "api":
        return _run_api(case)
    if case.selftest == "signal":
        os.kill(os.getpid(), signal.SIGSEGV)
    if case.selftest == "payload":
        Path(case.spec).touch()
        return "ok", ""
    if case.kind == "export":
        return _run_export(case)
    try:
        if case.store is not None:
            x, y, z = case.coords
            read_shard(case.store, {"x": x, "y": y, "z": z}, shape={"x": 2, "y": 1, "z": 1},
                       num_layers=2, orders="agg")
        else:
            graph = load_dataset(case.spec, case.root)
            gcn_normalize(graph.adj, graph.directed)
    except (DatasetError, ShardStoreError) as e:
        msg = str(e)
        if "\n" in msg or not msg.strip():
            return "traceback", f"{type(e).__name__} message is not one line: {msg[:300]!r}"
        return "error", msg[:300]
    except Exception as e:  # noqa: BLE001 - anything untyped would be a traceback in the CLI
        return "traceback", f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
    return "ok", ""


def _run_export(case: Case) -> tuple[str, str]:
    """`plexus.load_pyg` of a case: an `ExportError` on one line is the refusal; a model that
    loads must hold real weights (on the CPU, not "meta": never loaded)."""
    from plexus.api.export import ExportError, load_pyg  # noqa: PLC0415

    try:
        model = load_pyg(case.spec)
        tensors = list(model.state_dict().values())
        if any(t.device.type != "cpu" for t in tensors):
            return "traceback", "loaded a model whose weights are not on the CPU (never loaded)"
    except ExportError as e:
        msg = str(e)
        if "\n" in msg or not msg.strip():
            return "traceback", f"ExportError message is not one line: {msg[:300]!r}"
        return "error", msg[:300]
    except Exception as e:  # noqa: BLE001 - anything untyped would be a traceback
        return "traceback", f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
    return "ok", ""


def _own_raise(error: BaseException) -> bool:
    """Whether ``error`` was raised by the project's own code (a deliberate check), not by a
    library it called (numpy, scipy, torch: an input that slipped past the checks)."""
    import plexus  # noqa: PLC0415
    import plexus.datasets  # noqa: PLC0415
    import plexus.partitioners  # noqa: PLC0415

    roots = {str(Path(m.__file__).resolve().parent) for m in (plexus, plexus.datasets,
                                                               plexus.partitioners)}
    tb = error.__traceback__
    last = None
    while tb is not None:
        last = tb.tb_frame.f_code.co_filename
        tb = tb.tb_next
    return last is not None and any(str(Path(last).resolve()).startswith(r + os.sep)
                                    for r in roots)


def _run_api(case: Case) -> tuple[str, str]:
    """An API call (`plexus.testing.fuzz_api`): a `ValueError` (`DatasetError` included) or
    `TypeError` raised by the project's own checks, on one line, is the typed refusal a
    library user gets; one escaping from numpy, scipy or torch is a ``traceback``."""
    from .fuzz_api import run_case  # noqa: PLC0415

    try:
        run_case(Path(case.spec))
    except (ValueError, TypeError) as e:
        msg = str(e)
        if _own_raise(e) and msg.strip() and "\n" not in msg:
            return "error", f"{type(e).__name__}: {msg[:300]}"
        return "traceback", f"{type(e).__name__}: {' '.join(msg.split())[:300]}"
    except Exception as e:  # noqa: BLE001 - anything else is a bug
        return "traceback", f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
    return "ok", ""


class _Hang(BaseException):
    """Raised by the alarm when a case runs past `CASE_LIMIT_S`."""


def _on_alarm(signum, frame):  # noqa: ARG001
    raise _Hang()


def child_main(run: Callable[[Case], tuple[str, str]], cases_file: Path, start: int) -> None:
    """Run cases from ``start`` with ``run``, printing ``START i`` before and a JSON result
    after each (a case still running after `CASE_LIMIT_S` is a ``hang``)."""
    import warnings

    warnings.simplefilter("ignore")
    cases = [Case(**{**c, "coords": tuple(c["coords"])})
             for c in json.loads(cases_file.read_text())]
    marker = cases_file.parent / MARKER_NAME
    signal.signal(signal.SIGALRM, _on_alarm)
    for i in range(start, len(cases)):
        print(f"START {i}", flush=True)
        signal.alarm(CASE_LIMIT_S)
        try:
            outcome, detail = run(cases[i])
        except _Hang:
            outcome, detail = "hang", f"still running after {CASE_LIMIT_S} s"
        finally:
            signal.alarm(0)
        if marker.exists():
            outcome, detail = "payload", f"{MARKER_NAME} created"
            owned.remove_file(marker)
        print(json.dumps({"i": i, "outcome": outcome, "detail": detail}), flush=True)


def run_cases(cases: list[Case], work: Path, timeout: float = 600,
              runner: str = "plexus.testing.fuzz") -> list[tuple[Case, str, str]]:
    """Run every case in child processes (``python -m RUNNER --child``; the runner's
    ``run_one`` makes the call); a child that dies is restarted after its case."""
    cases_file = work / "cases.json"
    cases_file.write_text(json.dumps([asdict(c) for c in cases]))
    results: dict[int, tuple[str, str]] = {}
    start = 0
    while start < len(cases):
        proc = subprocess.run([sys.executable, "-m", runner, "--child", str(cases_file),
                               str(start)], capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
        current = None
        for line in proc.stdout.splitlines():
            if line.startswith("START "):
                current = int(line.split()[1])
            elif line.startswith("{"):
                rec = json.loads(line)
                results[rec["i"]] = (rec["outcome"], rec["detail"])
        if proc.returncode == 0:
            break
        if current is None or current in results:  # died outside a case
            raise RuntimeError(f"fuzz child failed: {proc.stderr[-2000:]}")
        results[current] = ("signal", f"exit status {proc.returncode}: {proc.stderr[-300:]}")
        start = current + 1
    return [(c, *results[i]) for i, c in enumerate(cases)]


def forked_main(run: Callable[[Case], tuple[str, str]], cases_file: Path) -> None:
    """Run every case in a child forked from this process (the imports paid once), printing
    one JSON line per case with its outcome and the child's peak RSS in kB (``os.wait4``'s
    ``ru_maxrss``: what the case took, the inherited interpreter included)."""
    import select  # noqa: PLC0415
    import warnings  # noqa: PLC0415

    import torch  # noqa: PLC0415, F401 - imported here, once, not in every child

    import plexus.api.export  # noqa: PLC0415, F401
    import plexus.datasets  # noqa: PLC0415, F401

    warnings.simplefilter("ignore")
    cases = [Case(**{**c, "coords": tuple(c["coords"])})
             for c in json.loads(cases_file.read_text())]
    marker = cases_file.parent / MARKER_NAME
    for i, case in enumerate(cases):
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the case's own process
            os.close(read_end)
            signal.signal(signal.SIGALRM, _on_alarm)
            signal.alarm(CASE_LIMIT_S)
            try:
                outcome, detail = run(case)
            except _Hang:
                outcome, detail = "hang", f"still running after {CASE_LIMIT_S} s"
            except BaseException as e:  # noqa: BLE001 - reported, not raised
                outcome, detail = "traceback", f"{type(e).__name__}: {str(e)[:300]}"
            os.write(write_end, json.dumps([outcome, detail]).encode())
            os._exit(0)
        os.close(write_end)
        ready, _, _ = select.select([read_end], [], [], CASE_LIMIT_S + 30)
        if not ready:  # stuck where the alarm cannot reach (in C, signals blocked)
            os.kill(pid, signal.SIGKILL)
        with os.fdopen(read_end, "rb") as f:
            data = f.read() if ready else b""
        _, status, usage = os.wait4(pid, 0)
        if not ready:
            outcome, detail = "hang", f"killed after {CASE_LIMIT_S + 30} s"
        elif os.WIFSIGNALED(status) or not data:
            outcome, detail = "signal", f"wait status {status}"
        else:
            outcome, detail = json.loads(data)
        if marker.exists():
            outcome, detail = "payload", f"{MARKER_NAME} created"
            owned.remove_file(marker)
        print(json.dumps({"i": i, "outcome": outcome, "detail": detail,
                          "rss_kb": int(usage.ru_maxrss)}), flush=True)


def run_cases_forked(cases: list[Case], work: Path, timeout: float = 3600
                     ) -> list[tuple[Case, str, str, int]]:
    """Every case in a process of its own (`forked_main`): (case, outcome, detail, peak RSS
    in kB) each."""
    cases_file = work / "cases-forked.json"
    cases_file.write_text(json.dumps([asdict(c) for c in cases]))
    proc = subprocess.run([sys.executable, "-m", "plexus.testing.fuzz", "--forked",
                           str(cases_file)], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)
    found = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            rec = json.loads(line)
            found[rec["i"]] = (rec["outcome"], rec["detail"], rec["rss_kb"])
    if len(found) != len(cases):
        raise RuntimeError(f"fuzz runner ended early (status {proc.returncode}): "
                           f"{proc.stderr[-2000:]}")
    return [(c, *found[i]) for i, c in enumerate(cases)]


def summarize(results: list[tuple[Case, str, str]]) -> dict[str, Counter]:
    """Outcome counts per input kind."""
    out: dict[str, Counter] = {}
    for case, outcome, *_ in results:
        out.setdefault(case.kind, Counter())[outcome] += 1
    return out


def main(run: Callable[[Case], tuple[str, str]]) -> None:
    """The child's command line: ``--child CASES START``."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", nargs=2, metavar=("CASES", "START"))
    parser.add_argument("--forked", metavar="CASES")
    args = parser.parse_args()
    if args.forked:
        forked_main(run, Path(args.forked))
    else:
        child_main(run, Path(args.child[0]), int(args.child[1]))


if __name__ == "__main__":
    main(run_one)
