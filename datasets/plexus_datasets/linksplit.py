"""Link prediction's data: a graph's edges split into training, validation and test pairs
(`random_edge_split`, PyG's ``RandomLinkSplit``), and the message graph an encoder runs on.

An undirected graph's edge is one pair {u, v} (its two stored directions stay together: both go
to the same split, and the message graph holds both of a training pair's); a directed graph's
edge u -> v is its own pair. Validation and test get as many negative pairs as positives, drawn
once, uniformly among the node pairs that are no edge of the graph (in either direction for an
undirected graph) and no self loop. The message graph holds the training pairs only: no
validation or test edge carries a message. No torch here: the arrays are numpy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import DatasetError
from .graph import Graph, edges_to_csr
from .npyio import load_npy

SPLITS = ("train", "val", "test")
#: The edge split of a graph without its own (PyG's RandomLinkSplit counts): plexus-train's
#: --edge-split default, and the training pairs plexus-model --task link prices by default.
DEFAULT_EDGE_SPLIT = "0.85,0.05,0.1"


@dataclass(frozen=True)
class LinkSplit:
    """A graph's edges as link prediction's splits.

    ``pos[s]`` and, for "val" and "test", ``neg[s]`` are int64 (2, P) arrays of (source,
    destination) node ids; ``graph`` is the message graph (the training pairs' edges, the
    original features, every node in the training mask, one class); ``directed``: whether a
    pair u -> v is one direction only."""

    name: str
    graph: Graph
    pos: dict[str, np.ndarray]
    neg: dict[str, np.ndarray]
    directed: bool

    @property
    def num_nodes(self) -> int:
        """Nodes of the graph (every pair's ends are below it)."""
        return self.graph.num_nodes

    def encoder_graph(self, out_channels: int) -> Graph:
        """The message graph as the engine's input for an encoder of ``out_channels`` output
        columns (the class count a node model's last layer would have)."""
        g = self.graph
        return Graph(g.name, g.adj, g.features, g.labels, g.train_mask, g.val_mask, g.test_mask,
                     num_classes=int(out_channels), directed=g.directed, notes=list(g.notes),
                     weighted=g.weighted).validate()


def parse_fractions(text: str) -> tuple[float, float, float]:
    """``"0.85,0.05,0.1"`` -> (train, val, test) fractions: three numbers in [0, 1] summing to
    1 (within 1e-6), validation and test not both 0. Raises `DatasetError` (one line)."""
    try:
        parts = tuple(float(p) for p in str(text).split(","))
    except ValueError:
        parts = ()
    if (len(parts) != 3 or not all(0.0 <= p <= 1.0 for p in parts)
            or abs(sum(parts) - 1.0) > 1e-6):
        raise DatasetError(f"edge split {text!r}: give three fractions train,val,test in "
                           "[0, 1] summing to 1, e.g. 0.85,0.05,0.1")
    if parts[0] == 0.0:
        raise DatasetError(f"edge split {text!r}: the training fraction must be above 0")
    return parts  # type: ignore[return-value]


def graph_pairs(graph: Graph) -> np.ndarray:
    """The graph's pairs (2, E) in CSR order: every edge of a directed graph, each undirected
    edge once as (smaller id, larger id)."""
    coo = graph.adj.tocoo()
    src, dst = coo.row.astype(np.int64), coo.col.astype(np.int64)
    keep = src != dst
    if not graph.directed:
        keep &= src < dst
    return np.vstack([src[keep], dst[keep]])


def sample_negatives(num_nodes: int, count: int, taken: np.ndarray, directed: bool,
                     rng: np.random.Generator) -> np.ndarray:
    """``count`` distinct uniform pairs (2, count) with u != v and no key in ``taken`` (sorted
    int64 keys u·N + v of the graph's edges, both directions of an undirected one); undirected
    pairs are drawn as (smaller, larger)."""
    n = int(num_nodes)
    possible = n * (n - 1) // (1 if directed else 2) - (taken.size if directed else taken.size // 2)
    if count > possible:
        raise DatasetError(f"{count} negative pairs asked for, but only {possible} node pairs "
                           "are no edge")
    out = np.zeros(0, dtype=np.int64)
    while out.size < count:
        want = 2 * (count - out.size) + 16
        u, v = rng.integers(0, n, want), rng.integers(0, n, want)
        if not directed:
            u, v = np.minimum(u, v), np.maximum(u, v)
        keys = u * n + v
        fine = (u != v) & ~np.isin(keys, taken, assume_unique=False)
        keys = keys[fine]
        _, first = np.unique(keys, return_index=True)
        keys = keys[np.sort(first)]  # first draws in order
        keys = keys[~np.isin(keys, out)]
        out = np.concatenate([out, keys])[:count]
    return np.vstack([out // n, out % n]) if n else np.zeros((2, 0), dtype=np.int64)


def random_edge_split(graph: Graph, fractions: tuple[float, float, float] | str = (0.85, 0.05, 0.1),
                      seed: int = 0) -> LinkSplit:
    """The pairs of ``graph`` split at random into training, validation and test (``fractions``,
    or their text as `parse_fractions` reads it), seeded by ``seed`` alone: validation and test
    take ⌊f·E⌋ of the E pairs each (PyG's ``RandomLinkSplit``), training the rest, and each gets
    as many negative pairs (`sample_negatives`). Raises `DatasetError` where a split would be
    empty."""
    f = parse_fractions(fractions) if isinstance(fractions, str) else parse_fractions(
        ",".join(map(str, fractions)))
    pairs = graph_pairs(graph)
    e = pairs.shape[1]
    n_val, n_test = int(f[1] * e), int(f[2] * e)
    n_train = e - n_val - n_test
    for split, count, frac in (("train", n_train, f[0]), ("val", n_val, f[1]),
                               ("test", n_test, f[2])):
        if count == 0 and frac > 0:
            raise DatasetError(f"{graph.name}: {e} edges leave no {split} pair at fraction "
                               f"{frac}")
    rng = np.random.default_rng(seed)
    order = rng.permutation(e)
    parts = {"val": pairs[:, order[:n_val]], "test": pairs[:, order[n_val:n_val + n_test]],
             "train": pairs[:, order[n_val + n_test:]]}
    n = graph.num_nodes
    keys = pairs[0] * n + pairs[1]
    if not graph.directed:
        keys = np.concatenate([keys, pairs[1] * n + pairs[0]])
    taken = np.sort(keys)
    neg = {s: sample_negatives(n, parts[s].shape[1], taken, graph.directed, rng)
           for s in ("val", "test")}
    train = parts["train"]
    adj = edges_to_csr(train[0], train[1], n, symmetrize=not graph.directed)
    every = np.ones(n, dtype=bool)
    message = Graph(f"{graph.name}-train-edges", adj, graph.features,
                    np.zeros(n, dtype=np.int64), every, np.zeros(n, bool), np.zeros(n, bool),
                    num_classes=1, directed=graph.directed,
                    notes=[*graph.notes, f"training edges of a {f} edge split, seed {seed}"])
    return LinkSplit(graph.name, message.validate(), parts, neg, graph.directed)


def check_pairs(value: Any, n: int, where: str, key: str) -> np.ndarray:
    """An E × 2 array of node ids in [0, n) (OGB's layout of pairs) as int64 (2, E), or a
    one-line `DatasetError`."""
    a = np.asarray(value) if isinstance(value, np.ndarray) else None
    if a is None or a.ndim != 2 or a.shape[1] != 2 or a.dtype.kind not in "iu":
        got = f"{a.dtype} {a.shape}" if a is not None else type(value).__name__
        raise DatasetError(f"{where}: {key!r} must be an E×2 integer array of node ids, got {got}")
    if a.size and (int(a.min()) < 0 or int(a.max()) >= n):
        raise DatasetError(f"{where}: {key!r} has node ids in [{int(a.min())}, {int(a.max())}], "
                           f"outside [0, {n - 1}]")
    return np.ascontiguousarray(a.T.astype(np.int64))


def load_pairs(path: str, n: int) -> np.ndarray:
    """A user's pairs to score: a .npy file of P × 2 integer node ids in [0, n) (no pickle),
    as int64 (2, P); a one-line `DatasetError` for anything else."""
    return check_pairs(load_npy(path, dtype_kinds="iu", shape=(None, 2)), n, path, "pairs")
