"""A stand-in for ogbn-proteins in its exact raw layout, for tests and benchmarks (the real
download is not reachable here).

`write_proteins_standin` writes what OGB's ``proteins.zip`` unpacks to (the files
``ogb.io.read_csv_graph_raw`` and ``NodePropPredDataset.get_idx_split`` read), at any size::

    <root>/ogbn_proteins/RELEASE_v1.txt
    <root>/ogbn_proteins/raw/edge.csv.gz           src,dst per line: each undirected edge once
                                                   (ogb adds the reverse: add_inverse_edge)
    <root>/ogbn_proteins/raw/edge-feat.csv.gz      8 floats per edge, in (0, 1]
    <root>/ogbn_proteins/raw/node-label.csv.gz     112 labels (0/1) per node; an empty field is
                                                   a missing label (NaN in ogb), with ``missing``
    <root>/ogbn_proteins/raw/node_species.csv.gz   the species (NCBI taxon id) of every node
    <root>/ogbn_proteins/raw/num-node-list.csv.gz  N
    <root>/ogbn_proteins/raw/num-edge-list.csv.gz  E
    <root>/ogbn_proteins/split/species/{train,valid,test}.csv.gz   node ids, one per line

As in the real graph (132,534 nodes, 39.6M undirected edges: average degree ~600), nodes are
proteins of 8 species, numbered species by species; edges are associations mostly within one
species, with a skewed degree distribution; an edge's 8 features are confidence scores that are
0.001 where that kind of evidence is absent; the split is by species (the real one's sizes:
65% train, 16% valid, 19% test). Proteins form functional modules (64 consecutive ids) that
associate among themselves more often and with their own odds of each kind of evidence; labels
depend on a protein's module and its own mean edge features, so a GNN learns them from the
features the loader derives (ROC-AUC well above 0.5). Everything is a function of the
arguments: the same seed writes the same bytes.
"""

from __future__ import annotations

import gzip
import io
from pathlib import Path

import numpy as np

from plexus_datasets.base import gate

NAME = "ogbn-proteins"
TASKS = 112
EDGE_FEATURES = 8
#: The real graph's size (for the benchmark's full-size stand-in)
REAL_NODES, REAL_DEGREE = 132_534, 597
#: NCBI taxon ids of the 8 species; the last two are the valid and the test species here
SPECIES = (3702, 4932, 6239, 7227, 10090, 511145, 7955, 9606)
_SPECIES_SHARE = (0.16, 0.05, 0.13, 0.10, 0.13, 0.085, 0.16, 0.185)  # valid 16%, test 18.5%
_ABSENT = 0.001  # a feature's value where the evidence is absent, as in the real files
_FEATURE_ODDS = (0.08, 0.05, 0.35, 0.03, 0.55, 0.12, 0.25, 0.6)  # how often each one is present
_EDGES_PER_PIECE = 1 << 22  # edges drawn and written per piece (memory stays bounded)
_MODULE = 64  # proteins per functional module (consecutive ids)


def _write_csv(path: Path, pieces) -> None:
    """Write gzip'd text pieces (str or bytes; mtime 0: the same content, the same bytes)."""
    with gate.open_stream(path, "wb") as raw, gzip.GzipFile(
            filename=str(path), fileobj=raw, mode="wb", compresslevel=1, mtime=0) as f:
        for piece in pieces:
            f.write(piece.encode("ascii") if isinstance(piece, str) else piece)


def _rows(values: np.ndarray, fmt: str) -> str:
    """``values`` (2-D) as CSV lines with numpy's formatter (faster than pandas')."""
    buf = io.StringIO()
    np.savetxt(buf, values, fmt=fmt, delimiter=",")
    return buf.getvalue()


def _scores(values: np.ndarray) -> bytes:
    """Rows of scores in [0.001, 1] with 3 decimals as CSV ("0.154,1.000,..."), built as fixed
    width bytes without a per-value format call (tens of millions of rows)."""
    k = np.rint(values * 1000).astype(np.int64)
    m, c = k.shape
    out = np.empty((m, c, 6), dtype=np.uint8)
    for i, place in enumerate((1000, None, 100, 10, 1)):
        out[:, :, i] = ord(".") if place is None else ord("0") + (k // place) % 10
    out[:, :, 5] = ord(",")
    out[:, -1, 5] = ord("\n")
    return out.tobytes()


def _species_blocks(n: int) -> np.ndarray:
    """Start of each species' id range (and N at the end)."""
    sizes = np.floor(np.asarray(_SPECIES_SHARE) * n).astype(np.int64)
    sizes[-1] = n - sizes[:-1].sum()
    return np.concatenate([[0], np.cumsum(sizes)])


def _edges(n: int, num_edges: int, bounds: np.ndarray, rng: np.random.Generator
           ) -> np.ndarray:
    """``num_edges`` distinct undirected edges (src < dst): the source skewed towards a few hub
    proteins of its species, the target in the source's module (60%), elsewhere in its species
    (38%) or anywhere (2%)."""
    sizes = np.diff(bounds)
    species = np.repeat(np.arange(len(sizes)), sizes)
    keys = np.zeros(0, dtype=np.int64)
    rate = 1.0  # the share of the last draw that was new: module pairs saturate on dense graphs
    while keys.size < num_edges:
        # enough draws for the missing edges at the last draw's rate (a fixed 1.1x needed a
        # hundred rounds, each a sort of every edge so far, at ogbn-proteins' size)
        m = int((num_edges - keys.size) * 1.1 / max(rate, 0.05)) + 16
        s = species[rng.integers(0, n, m)]  # a species in proportion to its size
        src = bounds[s] + (rng.random(m) ** 2 * sizes[s]).astype(np.int64)  # hubs first
        dst = bounds[s] + (rng.random(m) * sizes[s]).astype(np.int64)
        del s
        near = rng.random(m) < 0.6
        first = src[near] // _MODULE * _MODULE
        dst[near] = np.minimum(first + rng.integers(0, _MODULE, int(near.sum())), n - 1)
        cross = rng.random(m) < 0.02
        dst[cross] = rng.integers(0, n, int(cross.sum()))
        a, b = np.minimum(src, dst), np.maximum(src, dst)
        del src, dst, cross, near
        keep = a != b
        before = keys.size
        keys = np.unique(np.concatenate([keys, a[keep] * n + b[keep]]))
        rate = (keys.size - before) / m
    keys = keys[rng.permutation(keys.size)[:num_edges]]
    return np.stack([keys // n, keys % n])


def _edge_features(module: np.ndarray, odds: np.ndarray, rng: np.random.Generator
                   ) -> np.ndarray:
    """(m, 8) confidence scores of edges whose sources lie in ``module``: 3 decimals in
    [0.15, 1] where present (with that module's odds of each kind of evidence), 0.001 where
    absent."""
    m = len(module)
    present = rng.random((m, EDGE_FEATURES)) < odds[module]
    scores = np.round(0.15 + 0.85 * rng.random((m, EDGE_FEATURES)), 3)
    return np.where(present, scores, _ABSENT).astype(np.float32)


def _labels(edges: np.ndarray, feats: np.ndarray, odds: np.ndarray, n: int,
            rng: np.random.Generator) -> np.ndarray:
    """(n, 112) 0/1 labels from each node's module's odds of evidence (its function), its own
    mean edge features and noise, each task with its own base rate (2% to 40% positive)."""
    src, dst = edges
    deg = np.maximum(np.bincount(src, minlength=n) + np.bincount(dst, minlength=n), 1)
    own = np.stack([(np.bincount(src, feats[:, k], n) + np.bincount(dst, feats[:, k], n))
                    for k in range(EDGE_FEATURES)], axis=1) / deg[:, None]
    own = (own - own.mean(axis=0)) / np.maximum(own.std(axis=0), 1e-9) / EDGE_FEATURES**0.5
    logodds = np.log(odds)
    logodds = ((logodds - logodds.mean(axis=0)) / np.maximum(logodds.std(axis=0), 1e-9)
               / EDGE_FEATURES**0.5)
    score = ((logodds @ rng.standard_normal((EDGE_FEATURES, TASKS)))[np.arange(n) // _MODULE]
             + own @ rng.standard_normal((EDGE_FEATURES, TASKS)) * 0.7
             + rng.standard_normal((n, TASKS)))
    rate = 0.02 + 0.38 * rng.random(TASKS)
    rank = ((1 - rate) * (n - 1)).astype(np.int64)
    threshold = np.sort(score, axis=0)[rank, np.arange(TASKS)]
    return (score > threshold).astype(np.int8)


def write_proteins_standin(root: str | Path, num_nodes: int = 2000, avg_degree: float = 30,
                           missing: float = 0.0, seed: int = 0) -> Path:
    """Write the stand-in under ``root`` (``<root>/ogbn_proteins``); returns that directory.

    ``avg_degree`` counts both directions, as the real graph's ~600 does; ``missing`` is the
    fraction of (node, task) labels left empty (the real graph has none; other OGB tasks do).
    """
    n = int(num_nodes)
    if n < 2 * len(SPECIES):
        raise ValueError(f"a proteins stand-in needs at least {2 * len(SPECIES)} nodes")
    rng = np.random.default_rng(seed)
    num_edges = min(int(n * avg_degree / 2), n * (n - 1) // 2 // 2)
    bounds = _species_blocks(n)
    edges = _edges(n, num_edges, bounds, rng)
    ds = Path(root) / NAME.replace("-", "_")
    raw, split = ds / "raw", ds / "split" / "species"
    gate.make_folder(raw)
    gate.make_folder(split)
    # each module (its function) has its own odds of each kind of evidence
    odds = np.clip(np.asarray(_FEATURE_ODDS) * np.exp(rng.standard_normal(
        ((n - 1) // _MODULE + 1, EDGE_FEATURES))), 0.01, 0.95)
    feats = np.empty((num_edges, EDGE_FEATURES), dtype=np.float32)
    pieces = range(0, num_edges, _EDGES_PER_PIECE)
    for start in pieces:
        stop = min(start + _EDGES_PER_PIECE, num_edges)
        feats[start:stop] = _edge_features(edges[0, start:stop] // _MODULE, odds, rng)
    _write_csv(raw / "edge.csv.gz", (_rows(edges[:, a:a + _EDGES_PER_PIECE].T, "%d")
                                     for a in pieces))
    _write_csv(raw / "edge-feat.csv.gz", (_scores(feats[a:a + _EDGES_PER_PIECE])
                                          for a in pieces))
    labels = _labels(edges, feats, odds, n, rng)
    del feats
    text = _rows(labels, "%d")
    if missing > 0:  # empty fields: NaN when pandas reads them, as ogb does
        lines = [line.split(",") for line in text.splitlines()]
        gone = rng.random(labels.shape) < missing
        for i, j in zip(*np.nonzero(gone)):
            lines[i][j] = ""
        text = "".join(",".join(line) + "\n" for line in lines)
    _write_csv(raw / "node-label.csv.gz", [text])
    species = np.repeat(np.asarray(SPECIES), np.diff(bounds))
    _write_csv(raw / "node_species.csv.gz", [_rows(species[:, None], "%d")])
    _write_csv(raw / "num-node-list.csv.gz", [f"{n}\n"])
    _write_csv(raw / "num-edge-list.csv.gz", [f"{num_edges}\n"])
    ids = np.arange(n)
    for part, (lo, hi) in (("train", (0, len(SPECIES) - 2)), ("valid", (len(SPECIES) - 2,
                                                                         len(SPECIES) - 1)),
                           ("test", (len(SPECIES) - 1, len(SPECIES)))):
        _write_csv(split / f"{part}.csv.gz", [_rows(ids[bounds[lo]:bounds[hi], None], "%d")])
    gate.save_text(ds / "RELEASE_v1.txt", "")
    return ds


def main(argv: list[str] | None = None) -> int:
    """``python -m plexus_datasets.proteins_standin ROOT [--nodes N] ...``: write a stand-in."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m plexus_datasets.proteins_standin",
                                description="Write an ogbn-proteins stand-in in OGB's raw "
                                            "layout under ROOT (for --dataset ogbn-proteins "
                                            "--root ROOT).")
    p.add_argument("root")
    p.add_argument("--nodes", type=int, default=2000, help="node count (real: 132534)")
    p.add_argument("--degree", type=float, default=30,
                   help="average degree, both directions (real: ~600)")
    p.add_argument("--missing", type=float, default=0.0, help="fraction of labels left empty")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    if a.nodes < 2 * len(SPECIES) or a.degree <= 0 or not 0 <= a.missing < 1:
        p.error("needs --nodes >= 16, --degree > 0 and 0 <= --missing < 1")
    print(write_proteins_standin(a.root, a.nodes, a.degree, a.missing, a.seed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
