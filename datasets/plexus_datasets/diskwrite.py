"""Writing a graph directory (the layout: `plexus_datasets.diskgraph`): `DiskGraphWriter` writes
one array at a time into a directory beside its target and renames it into place when complete,
so an interrupted write never leaves a directory that looks like a graph; `write_graph` writes
an in-memory `Graph`."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np
import scipy.sparse as sp

from plexus_datasets.base.atomic import replace_directory, replaceable_directory

from .diskgraph import (EDGE_FORMS, FEATURE_DTYPES, FORMAT, HEADER, SELF_LOOPS, SPLITS, VERSION,
                        DiskGraph, DiskGraphError, check_header, encode_features,
                        file_data_sha256, header_sha256, is_disk_graph)
from .errors import MAX_NODES
from .graph import Graph
from .npyio import NpyWriter, npy_layout, save_npy
from plexus_datasets.base import owned
from plexus_datasets.base import gate


def check_target(out: Path) -> Path:
    """Refuse a target that exists and is neither an empty directory nor a graph directory this
    user's Plexus wrote, with exactly its files (sealed: `plexus_datasets.base.owned`)."""
    return replaceable_directory(out, lambda p: owned.is_sealed(p, FORMAT, exact=False),
                                 f"a {FORMAT} directory this user's Plexus wrote, with exactly "
                                 "its files (remove it yourself if it is yours)", DiskGraphError)


class DiskGraphWriter:
    """Writes a graph directory: arrays go into ``staging`` (a hidden directory beside ``out``
    unless given; a given one is kept between attempts so that a rerun can resume), and
    `finish` hashes them, writes the header and renames the directory to ``out``."""

    def __init__(self, out: str | os.PathLike, *, name: str, num_nodes: int, num_features: int,
                 num_classes: int, directed: bool, edges: str = "coo", self_loops: str = "drop",
                 feature_dtype: str = "float32", notes: Sequence[str] = (),
                 staging: str | os.PathLike | None = None) -> None:
        self.out = check_target(Path(out).expanduser())
        if edges not in EDGE_FORMS or self_loops not in SELF_LOOPS:
            raise ValueError(f"edges must be one of {EDGE_FORMS}, self_loops one of {SELF_LOOPS}")
        if feature_dtype not in FEATURE_DTYPES:
            raise DiskGraphError(f"feature dtype {feature_dtype!r}: use one of "
                                 f"{', '.join(FEATURE_DTYPES)}")
        if not 0 <= num_nodes <= MAX_NODES:
            raise DiskGraphError(f"{num_nodes} nodes: a graph has between 0 and {MAX_NODES}")
        self.meta = {"name": name, "num_nodes": int(num_nodes),
                     "num_features": int(num_features), "num_classes": int(num_classes),
                     "directed": bool(directed), "edges": edges, "self_loops": self_loops,
                     "feature_dtype": feature_dtype, "notes": list(notes)}
        if staging is None:
            self.staging = gate.temp_folder(self.out.parent, f".{self.out.name}.partial-")
        else:
            self.staging = gate.make_folder(staging)
        self.staging.chmod(0o755)

    def file(self, name: str) -> Path:
        return self.staging / f"{name}.npy"

    def writer(self, name: str, dtype: np.dtype | str, tail: tuple[int, ...] = (),
               rows: int | None = None) -> NpyWriter:
        """A streaming writer of array ``name`` (see `NpyWriter`)."""
        return NpyWriter(self.file(name), dtype, tail, rows)

    def put(self, name: str, arr: np.ndarray) -> None:
        """Write a whole (node-sized) array."""
        save_npy(self.file(name), arr)

    def array_names(self) -> list[str]:
        """The arrays the header lists (written before `finish`)."""
        edges = ["src", "dst"] if self.meta["edges"] == "coo" else ["indptr", "indices"]
        return edges + ["features", "labels", *SPLITS]

    def array_sha256(self, name: str) -> str:
        """sha256 of array ``name``'s data, as the header records it."""
        return file_data_sha256(self.file(name), npy_layout(self.file(name), DiskGraphError))

    def finish(self, notes: Iterable[str] = (),
               hashes: Mapping[str, str] | None = None) -> DiskGraph:
        """Hash the arrays (those not in ``hashes``, name to `array_sha256`, computed before,
        possibly by other processes), write the header, move the directory into place;
        returns it opened."""
        meta = dict(self.meta)
        meta["notes"] = [*meta["notes"], *notes]
        arrays = {}
        names = self.array_names()
        hashes = hashes or {}
        for name in names:
            layout = npy_layout(self.file(name), DiskGraphError)
            dtype = meta["feature_dtype"] if name == "features" else layout.dtype.name
            arrays[name] = {"dtype": dtype, "shape": list(layout.shape),
                            "sha256": hashes.get(name) or
                            file_data_sha256(self.file(name), layout)}
        meta["num_edges"] = arrays["src" if meta["edges"] == "coo" else "indices"]["shape"][0]
        header = {"format": FORMAT, "version": VERSION, **meta, "arrays": arrays}
        header["content_sha256"] = header_sha256(header)
        check_header(header, str(self.staging / HEADER))
        extra = [p.name for p in self.staging.iterdir() if p.name not in
                 {f"{a}.npy" for a in names}]
        for name in extra:  # scratch files of the converter
            target = self.staging / name
            owned.remove_tree(target) if target.is_dir() else owned.remove_file(target)
        with gate.open_stream(self.staging / HEADER, "w") as f:
            f.write(json.dumps(header, indent=2, sort_keys=True) + "\n")
        replace_directory(self.staging, self.out, check_target, seal=FORMAT,
                          describes=(HEADER,))
        return DiskGraph.open(self.out)

    def abort(self) -> None:
        owned.remove_tree(self.staging, quiet=True)


def write_graph(graph: Graph, out: str | os.PathLike, feature_dtype: str = "float32",
                chunk_rows: int = 1 << 20) -> DiskGraph:
    """Write an in-memory `Graph` as a graph directory (edges as it holds them: coo, self loops
    kept). Loading it back (`load_disk_graph`) gives the same graph."""
    if graph.multilabel:
        raise DiskGraphError(f"{graph.name}: a graph directory holds one class per node, not "
                             "multi-label (node×task) labels; partition a multi-label graph "
                             "from memory in one process (--jobs 1)")
    coo = sp.coo_matrix(graph.adj)
    w = DiskGraphWriter(out, name=graph.name, num_nodes=graph.num_nodes,
                        num_features=graph.num_features, num_classes=graph.num_classes,
                        directed=graph.directed, edges="coo", self_loops="keep",
                        feature_dtype=feature_dtype, notes=graph.notes)
    try:
        idx = np.int32 if graph.num_nodes < 2**31 else np.int64
        w.put("src", coo.row.astype(idx))
        w.put("dst", coo.col.astype(idx))
        with w.writer("features", FEATURE_DTYPES[feature_dtype], (graph.num_features,)) as fw:
            for lo in range(0, graph.num_nodes, chunk_rows):
                fw.append(encode_features(graph.features[lo:lo + chunk_rows], feature_dtype))
        w.put("labels", graph.labels.astype(np.int64))
        for name, mask in zip(SPLITS, (graph.train_mask, graph.val_mask, graph.test_mask)):
            w.put(name, np.flatnonzero(mask).astype(np.int64))
        return w.finish()
    except BaseException:
        w.abort()
        raise
