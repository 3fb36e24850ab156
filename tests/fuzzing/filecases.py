"""Mutated graph files, one case each: npz, Matrix Market, edge lists, Planetoid files (the
real Cora's too), an OGB directory with its caches."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from plexus_datasets.base import owned

from .mutate import BIG, ODD_VALUES, flip_bits, mutate_bytes, rezip
from .samples import (EDGES, N, Payload, gz_csv, write_edgelist, write_mtx, write_npz,
                      write_ogb, write_planetoid)


def npz_case(d: Path, rng: random.Random, marker: Path) -> None:
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


def mtx_case(d: Path, rng: random.Random, marker: Path) -> None:
    p = d / "g.mtx"
    write_mtx(p)
    lines = p.read_text().splitlines()
    how = rng.choice(("header", "entry", "banner", "bytes"))
    if how == "header":
        sizes = [str(rng.choice((N, *BIG, -3, 0))) for _ in range(3)]
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


def edgelist_case(d: Path, rng: random.Random, marker: Path) -> None:
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


def planetoid_case(d: Path, rng: random.Random, marker: Path, cora: Path | None) -> None:
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
        write_planetoid(d, objs={key: Payload(marker)})


def ogb_case(d: Path, rng: random.Random, marker: Path) -> None:
    ds = write_ogb(d, processed=rng.random() < 0.6)
    cached = (ds / "processed/data_processed").exists()
    how = rng.choice(("csv", "csv", "cache", "payload", "edit") if cached else ("csv",))
    if how == "csv":
        target = rng.choice(("num-node-list", "num-edge-list", "edge", "node-label",
                             "node-feat", "node_year"))
        path = ds / f"raw/{target}.csv.gz"
        choice = rng.random()
        if choice < 0.5:
            gz_csv(path, [[rng.choice((-1, 10**12, 2**40, "x", 1.5, ""))]] +
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
            torch.save({"graph": Payload(marker), "labels": None},
                       ds / "processed/data_processed")
        else:
            torch.save({"train": Payload(marker)}, ds / "split/time/split_dict.pt")
    else:
        import torch

        graph = {"edge_index": np.array(EDGES, dtype=np.int64).T, "edge_feat": None,
                 "node_feat": np.ones((N, 3), np.float32), "num_nodes": N}
        field = rng.choice(list(graph) + ["labels", "split"])
        value = rng.choice((*ODD_VALUES, np.array([[0, 99], [1, 2]]), np.ones((N, 2)) * np.nan,
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
