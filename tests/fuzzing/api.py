"""Fuzz cases for the Python API's graph inputs (`fuzzing.inputs` kind ``api``).

Each case is a call a library user could make with arrays of their own: `Graph.from_scipy`
(every scipy sparse format, dense and torch inputs) and `Graph.from_pyg`, a `Graph` built field
by field and then validated, `gcn_normalize`/`normalize` and `make_permutation` on an adjacency,
with one or more of the inputs damaged (a crafted ``indptr`` or ``indices``, a shape that lies,
fractional or NaN labels, masks of the wrong kind, features of the wrong dtype, odd option
values). A graph that is accepted is then cut into a shard as `plexus.distributed_model` would
cut it. Acceptable outcomes: accepted, or a one-line `DatasetError`; never a signal.

The case is pickled by the harness itself (this module writes and reads it; nothing a user
gave is unpickled).
"""

from __future__ import annotations

import pickle
import random
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

N = 8
EDGES = [(0, 1), (1, 2), (2, 0), (3, 4), (4, 5), (5, 3), (0, 3), (1, 0), (6, 2), (7, 6)]
ODD = (None, True, -1, 0, 2**63, 1e308, float("nan"), "12", "", [], {}, [[1]], 3.5, b"x",
       np.int64(3), np.float32(2.0), object())
_BIG = (2**31, 2**33, 10**12, 2**62, -(2**40))


def _adjacency() -> sp.csr_matrix:
    rows, cols = np.array(EDGES).T
    return sp.csr_matrix((np.ones(len(EDGES), np.float32), (rows, cols)), shape=(N, N))


def _damaged_compressed(m: Any, rng: random.Random) -> Any:
    """A CSR/CSC/BSR matrix whose arrays no longer form one (set behind scipy's back)."""
    which = rng.choice(("indptr", "indptr", "indices", "data", "shape"))
    if which == "indptr":
        ptr = m.indptr.astype(np.int64)
        how = rng.choice(("value", "end", "decrease", "length", "dtype"))
        if how == "value" and ptr.size:
            ptr[rng.randrange(ptr.size)] = rng.choice((*_BIG, -1, 10**6, ptr[-1] + 1))
        elif how == "end":
            ptr[-1] = rng.choice((4000000, 50, ptr[-1] - 1, 0))
        elif how == "decrease" and ptr.size > 2:
            i = rng.randrange(1, ptr.size - 1)
            ptr[i] = ptr[i - 1] + 5
        elif how == "length":
            ptr = ptr[:-1] if rng.random() < 0.5 else np.concatenate([ptr, ptr[-1:]])
        else:
            ptr = ptr.astype(rng.choice((np.float64, np.int8, np.uint64)))
        m.indptr = ptr.astype(m.indptr.dtype) if how in ("value", "end", "decrease") and \
            rng.random() < 0.5 else ptr
    elif which == "indices":
        idx = m.indices.astype(np.int64)
        if idx.size:
            idx[rng.randrange(idx.size)] = rng.choice((*_BIG, -1, N, 10**6))
        m.indices = idx if rng.random() < 0.5 else idx.astype(rng.choice((np.int32,
                                                                           np.float64)))
    elif which == "data":
        m.data = rng.choice((m.data[:-1], np.concatenate([m.data, m.data]),
                             m.data.astype(np.complex64), m.data.astype("U3"),
                             np.zeros(0, np.float32)))
    else:
        m._shape = rng.choice(((N, N + 3), (N + 3, N), (-1, N), (2**40, 2**40), (N,), (0, 0)))
    return m


def _adjacency_input(rng: random.Random) -> Any:
    """An adjacency in some format a user might hand over, often damaged."""
    fmt = rng.choice(("csr", "csr", "csc", "coo", "coo", "bsr", "lil", "dok", "dia", "dense",
                      "torch", "torch-sparse", "other"))
    base = _adjacency()
    damage = rng.random() < 0.5
    if fmt in ("csr", "csc", "bsr"):
        m = {"csr": base, "csc": base.tocsc(), "bsr": base.tobsr(blocksize=(2, 2))}[fmt]
        return _damaged_compressed(m, rng) if damage else m
    if fmt == "coo":
        m = base.tocoo()
        if damage:
            which = rng.choice(("row", "col", "data", "shape"))
            if which in ("row", "col"):
                arr = getattr(m, which).astype(np.int64)
                arr[rng.randrange(arr.size)] = rng.choice((*_BIG, -1, N))
                m.coords = (arr, m.col) if which == "row" else (m.row, arr)
            elif which == "data":
                m.data = m.data[:-2]
            else:
                m._shape = rng.choice(((N, N + 1), (-3, N), (2**40, 2**40)))
        return m
    if fmt == "lil":
        m = base.tolil()
        if damage:
            if rng.random() < 0.5:
                m.rows[rng.randrange(N)] = [rng.choice((*_BIG, -1, N)), 0]
            else:
                m.rows = m.rows[:-1]
        return m
    if fmt == "dok":  # a dict of entries: scipy checks them as they are set
        return base.todok()
    if fmt == "dia":
        m = base.todia()
        if damage:
            m.offsets = m.offsets[:-1] if rng.random() < 0.5 else m.offsets * 1000
        return m
    if fmt == "dense":
        return rng.choice((base.toarray(), base.toarray()[:, :-1], base.toarray().astype(bool),
                           np.ones((N, N, 2)), base.toarray().astype("U1"), [[0, 1], [1]]))
    if fmt in ("torch", "torch-sparse"):
        import torch

        t = torch.from_numpy(base.toarray())
        if fmt == "torch":
            return t if not damage else t[:, :-1]
        s = t.to_sparse()
        if damage:  # indices past the size, set without torch's checks
            idx = s._indices().clone()  # noqa: SLF001 - building the damage
            idx[0, 0] = rng.choice((N, 10**6, -1))
            s = torch.sparse_coo_tensor(idx, s._values(), (N, N), check_invariants=False)  # noqa: SLF001
        return s
    return rng.choice(ODD)


def _features(rng: random.Random) -> Any:
    good = np.arange(N * 3, dtype=np.float32).reshape(N, 3) % 5
    if rng.random() < 0.8:
        return good
    return rng.choice((good.astype(np.float64) * 1e300, good[:-1], good.reshape(-1),
                       good.astype("U2"), good.astype(np.complex64), np.full((N, 3), np.nan),
                       [[1, 2], [3]] * 4, good.astype(np.int64) * 2**62, sp.csr_matrix(good),
                       _damaged_compressed(sp.csr_matrix(good), rng), np.zeros((N, 0)),
                       good.astype(bool), *ODD))


def _labels(rng: random.Random) -> Any:
    good = np.arange(N) % 3
    if rng.random() < 0.75:
        return good
    return rng.choice((good + 0.7, np.where(good == 1, np.nan, good), good.astype(np.float32),
                       good.reshape(-1, 1), good.reshape(2, -1), good[:-1], good - 5,
                       good.astype(np.uint64) + 2**63, good.astype("U1"), good.astype(bool),
                       np.full(N, 10**12), np.full(N, -1), *ODD))


def _mask(rng: random.Random) -> Any:
    if rng.random() < 0.8:
        return rng.choice(([0, 1], np.array([2]), None, np.arange(N) < 2))
    return rng.choice((np.array([0.0, 1.0]), np.array([1, 0, 1, 0, 1, 0, 1, 0]),
                       np.array([N]), np.array([-1]), np.ones(N - 1, bool), np.ones(N, np.int8),
                       np.array([2**40]), [[0], [1, 2]], "0,1", np.array(["a"]), *ODD))


class _Data:
    """A PyG-like ``Data``: attributes only (PyG is not needed to build one)."""

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)


def make_case(path: Path, rng: random.Random) -> None:
    """Write one API call to ``path`` (a pickle this module reads back in `run_case`)."""
    call = rng.choice(("from_scipy", "from_scipy", "from_scipy", "from_pyg", "from_pyg",
                       "graph", "normalize", "permutation"))
    kwargs: dict[str, Any] = {}
    if call == "from_scipy":
        args = [_adjacency_input(rng), _features(rng), _labels(rng)]
        for key in ("train", "val", "test"):
            kwargs[key] = _mask(rng)
        if rng.random() < 0.3:
            kwargs[rng.choice(("num_classes", "directed", "name"))] = rng.choice(
                (*ODD, 3, 10**15, 1, False))
    elif call == "from_pyg":
        import torch

        ei = torch.tensor(np.array(EDGES).T, dtype=torch.int64)
        fields = {"edge_index": ei, "x": torch.ones(N, 3), "y": torch.arange(N) % 3,
                  "train_mask": torch.arange(N) < 2}
        key = rng.choice((*fields, "num_nodes", "val_mask", "edge_index", "edge_index"))
        if rng.random() < 0.7:
            fields[key] = rng.choice((ei.float(), ei[:1], ei.T, ei * 1000, ei - 5,
                                      torch.zeros(2, 0), torch.ones(N, 3, dtype=torch.float16),
                                      torch.ones(N, 3, dtype=torch.bfloat16), N + 5, 10**12, -1,
                                      torch.tensor([0.5] * N),
                                      np.array(EDGES).T.astype(np.float64), *ODD))
        if rng.random() < 0.2:
            fields.pop(rng.choice(("edge_index", "x", "y")))
        args = [_Data(**fields)]
        if rng.random() < 0.2:
            kwargs["directed"] = rng.choice(ODD)
    elif call == "graph":  # a Graph built field by field
        good = rng.random() < 0.4
        args = [_adjacency() if good else _adjacency_input(rng),
                np.ones((N, 3), np.float32) if good else _features(rng),
                np.arange(N) % 3 if good else _labels(rng),
                np.arange(N) < 2 if good else _mask(rng),
                rng.choice((np.arange(N) == 2, *ODD)) if not good else np.arange(N) == 2,
                3 if good else rng.choice((3, 0, -1, 2**40, *ODD))]
    elif call == "normalize":
        args = [_adjacency_input(rng), rng.choice((False, True)),
                rng.choice(("gcn", "mean", "sum", "max"))]
    else:
        args = [_adjacency_input(rng), rng.choice(("none", "single", "double", "balanced")),
                rng.randrange(3), rng.choice((1, 2, 4, 0, -1))]
    with open(path, "wb") as f:
        pickle.dump({"call": call, "args": args, "kwargs": kwargs}, f)


def run_case(path: Path) -> None:
    """Make the call of the case at ``path``; a graph that is accepted is cut into shards of a
    1x1x1 and a 2x1x1 grid (rank 0), as `plexus.distributed_model` would. Raises what the API
    raises."""
    from plexus_partition.model.grid import GridShape
    from plexus_partition.model.layout import grid_misfit
    from plexus_datasets import Graph, normalize
    from plexus_partition.model.model import ModelConfig
    from plexus_partition import make_permutation, shard_graph

    with open(path, "rb") as f:
        case = pickle.load(f)  # noqa: S301 - written by make_case, never by a user
    call, args, kwargs = case["call"], case["args"], case["kwargs"]
    graph = None
    if call == "from_scipy":
        graph = Graph.from_scipy(*args, **kwargs)
    elif call == "from_pyg":
        graph = Graph.from_pyg(*args, **kwargs)
    elif call == "graph":
        adj, x, y, train, val, classes = args
        graph = Graph("hand-made", adj, x, y, train, val, np.zeros(N, bool), classes)
        graph.validate()
    elif call == "normalize":
        normalize(*args)
    else:
        make_permutation(*args)
    if graph is not None:
        model = ModelConfig(num_layers=2, hidden=4)
        graph.check_structure()  # what cut_shard checks before shard_graph
        for shape in (GridShape(1, 1, 1), GridShape(2, 1, 1)):
            f, c = graph.num_features, graph.num_classes
            if grid_misfit(shape, model.plans(f, c), graph.num_nodes, model.widths(f, c)):
                continue  # cut_shard refuses it in one line first
            shard_graph(graph, shape, {"x": 0, "y": 0, "z": 0}, model.num_stages,
                        model.orders(f, c), "double", seed=0)
