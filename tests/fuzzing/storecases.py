"""Mutated stores and exports, one case each: a shard store (members, manifest, swapped or
re-headed files, re-hashed to agree), a graph directory (arrays, header, size bombs, FIFOs), a
weights export for `plexus.load_pyg` (its PyG description, tensors, bytes, a size bomb)."""

from __future__ import annotations

import io
import json
import os
import random
import shutil
import sys
import zipfile
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from plexus_datasets.base import owned
from plexus_partition.model.ops import KINDS as MODEL_KINDS

from .mutate import BIG, ODD_VALUES, json_edit, mutate_bytes, rezip
from .samples import EDGES, N, rehash


def store_case(d: Path, rng: random.Random, marker: Path, base: Path) -> None:
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
        (store / "manifest.json").write_text(json.dumps(json_edit(m, rng)))
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
        np.lib.format.write_array(buf, np.frombuffer(json.dumps(json_edit(header, rng))
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


def graph_case(d: Path, rng: random.Random, marker: Path) -> None:
    """A graph directory with one .npy file or its header damaged (some re-hashed to agree)."""
    from plexus_datasets.diskgraph import header_sha256  # noqa: PLC0415
    from plexus_datasets.diskwrite import write_graph  # noqa: PLC0415
    from plexus_datasets.graph import Graph  # noqa: PLC0415
    from plexus_datasets.npyio import write_header as npy_write_header  # noqa: PLC0415

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
        rows = rng.choice(BIG)
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
        header[key] = rng.choice(BIG + (-1, 0, 3 * 10**9))
        header["content_sha256"] = header_sha256(header)
        (g / "graph.json").write_text(json.dumps(header))
    elif how == "bytes":
        f = g / rng.choice(sorted(p.name for p in g.glob("*.npy")))
        f.write_bytes(mutate_bytes(f.read_bytes(), rng))
    elif how == "dtype":
        f = g / rng.choice(("src.npy", "labels.npy", "train.npy", "features.npy"))
        np.save(f, np.load(f).astype(rng.choice((np.float64, np.int8, np.uint64, np.int64))))
    else:
        header = json_edit(header, rng)
        if isinstance(header, dict) and rng.random() < 0.7:
            header["content_sha256"] = header_sha256(header)
        (g / "graph.json").write_text(json.dumps(header))


def export_case(d: Path, rng: random.Random, bases: dict[str, Path]) -> None:
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
        payload["pyg"] = json_edit(payload["pyg"], rng)
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
            payload[key] = rng.choice(ODD_VALUES)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(20000)  # pickling the nested descriptions
    try:
        torch.save(payload, p)
    finally:
        sys.setrecursionlimit(limit)
