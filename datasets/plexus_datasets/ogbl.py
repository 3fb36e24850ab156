"""OGB's link datasets (ogbl-collab, ogbl-ppa, ogbl-ddi) from their raw files in a local root,
as a `LinkSplit`; no download, no ogb dataset class, no torch.

The layout is OGB's (``master.csv`` of ``ogb.linkproppred`` says which dataset has features and
inverse edges, and its split's folder)::

    <root>/ogbl_collab/raw/num-node-list.csv.gz   the node count
    <root>/ogbl_collab/raw/node-feat.csv.gz       N × F features (where the dataset has them)
    <root>/ogbl_collab/split/time/{train,valid,test}.pt

The split files are torch pickles: the engine's side reads them (`plexus.api.linkdata`, with
``torch.load(weights_only=True)``) and hands their arrays here as numpy, where `split_arrays`
checks them: "edge" (E × 2 node ids) in each, "edge_neg" in valid and test, ids in [0, N). The
message graph holds the training edges (both directions where OGB adds inverse edges): no
validation or test edge carries a message. A dataset without node features (ogbl-ddi) gets
seeded random ones, as `ogb_to_disk` gives its node datasets.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import numpy as np

from .errors import RootMissing, DatasetError
from .graph import Graph, edges_to_csr
from .linksplit import LinkSplit, check_pairs
from .ogb_raw import csv_count, csv_node_features, master_meta
from .synthetic import DEFAULT_FEATURES, random_features

SPLIT_FILES = {"train": "train", "val": "valid", "test": "test"}
FORMATS = ("ogbl-collab", "ogbl-ppa", "ogbl-ddi")  # edge / edge_neg splits, Hits@K


def link_meta(name: str) -> dict[str, str]:
    """The column of ``ogb.linkproppred``'s ``master.csv`` for ``name`` (read as text, without
    importing ogb); one of `FORMATS`."""
    if name not in FORMATS:
        raise DatasetError(f"{name}: not an OGB link dataset read here; use one of "
                           f"{', '.join(FORMATS)}")
    return master_meta(name, "linkproppred")


def dataset_dir(name: str, root: str | Path | None) -> Path:
    """``<root>/<name with _ for ->``, refused (one line) where it is missing."""
    if root is None:
        raise RootMissing(name, "its raw files (raw/, split/)")
    ds = Path(root) / name.replace("-", "_")
    if not ds.is_dir():
        raise DatasetError(f"{ds}: missing; {name}'s raw files (raw/, split/) are read from "
                           "there, nothing is downloaded")
    return ds


def split_paths(name: str, root: str | Path | None) -> dict[str, Path]:
    """The three split files of ``name`` under ``root`` ({"train": ..., "val": ..., "test":
    ...}), each refused where it is not a file."""
    ds = dataset_dir(name, root)
    folder = ds / "split" / link_meta(name)["split"]
    out = {s: folder / f"{f}.pt" for s, f in SPLIT_FILES.items()}
    for path in out.values():
        if not path.is_file():
            raise DatasetError(f"{path}: missing (a split file of {name})")
    return out


def split_arrays(splits: Mapping[str, Any], n: int, paths: Mapping[str, Path]
                 ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The positive and negative pairs (2 × E each) of the split files' contents ``splits``
    ({split: the dict a file held, its tensors as numpy arrays}), checked: a dict with "edge",
    and "edge_neg" in "val" and "test"."""
    pos, neg = {}, {}
    for s in SPLIT_FILES:
        d, where = splits[s], str(paths[s])
        if not isinstance(d, dict):
            raise DatasetError(f"{where}: must hold a dict of arrays, got {type(d).__name__}")
        keys = ("edge", "edge_neg") if s != "train" else ("edge",)
        for k in keys:
            if k not in d:
                raise DatasetError(f"{where}: no {k!r} array (keys: {', '.join(map(str, d))})")
        pos[s] = check_pairs(d["edge"], n, where, "edge")
        if s != "train":
            neg[s] = check_pairs(d["edge_neg"], n, where, "edge_neg")
        if pos[s].shape[1] == 0:
            raise DatasetError(f"{where}: no positive pair")
    return pos, neg


def ogbl_split(name: str, root: str | Path, splits: Mapping[str, Any]) -> LinkSplit:
    """``name``'s `LinkSplit` from its raw files under ``root`` and its split files' contents
    ``splits`` (`split_arrays`)."""
    meta = link_meta(name)
    ds = dataset_dir(name, root)
    raw = ds / "raw"
    n_file = raw / "num-node-list.csv.gz"
    if not n_file.is_file():
        raise DatasetError(f"{n_file}: missing (the node count of {name})")
    n = csv_count(n_file, "num-node-list")
    pos, neg = split_arrays(splits, n, split_paths(name, root))
    directed = meta["add_inverse_edge"] != "True"
    if meta["has_node_attr"] == "True":
        x, notes = csv_node_features(raw, n), []
    else:
        x, notes = random_features(n, DEFAULT_FEATURES), ["features are seeded random"]
    train = pos["train"]
    adj = edges_to_csr(train[0], train[1], n, symmetrize=not directed)
    every = np.ones(n, dtype=bool)
    graph = Graph(f"{name}-train-edges", adj, x, np.zeros(n, dtype=np.int64), every,
                  np.zeros(n, bool), np.zeros(n, bool), num_classes=1, directed=directed,
                  notes=notes).validate(str(ds))
    return LinkSplit(name, graph, pos, neg, directed)
