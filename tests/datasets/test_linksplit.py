"""The random edge split (PyG's RandomLinkSplit's counts): every pair in exactly one split, an
undirected pair's two directions together, the message graph the training pairs only, the
negatives no edge, seeded; bad fractions refused in one line."""

from __future__ import annotations

import numpy as np
import pytest

from plexus_datasets.errors import DatasetError
from plexus_datasets.linksplit import parse_fractions, random_edge_split
from plexus_datasets.toy import directed_toy_graph, toy_graph


def _edges(adj) -> set[tuple[int, int]]:
    coo = adj.tocoo()
    return set(zip(coo.row.tolist(), coo.col.tolist()))


@pytest.mark.parametrize("directed", [False, True], ids=["undirected", "directed"])
def test_split_partitions_the_pairs(directed):
    g = directed_toy_graph() if directed else toy_graph()
    edges = {(u, v) for u, v in _edges(g.adj) if u != v}  # a self loop is no pair
    pairs = edges if directed else {(u, v) for u, v in edges if u < v}
    split = random_edge_split(g, "0.7,0.1,0.2", seed=4)
    parts = {s: [tuple(map(int, p)) for p in split.pos[s].T] for s in ("train", "val", "test")}
    e = len(pairs)
    assert len(parts["val"]) == int(0.1 * e) and len(parts["test"]) == int(0.2 * e)
    every = parts["train"] + parts["val"] + parts["test"]
    assert len(every) == len(set(every)) == e and set(every) == pairs
    train = set(parts["train"])
    want = train if directed else train | {(v, u) for u, v in train}
    assert _edges(split.graph.adj) == want  # no validation or test edge carries a message
    for s in ("val", "test"):
        neg = [tuple(map(int, p)) for p in split.neg[s].T]
        assert len(neg) == len(parts[s]) == len(set(neg))
        assert all(u != v and (u, v) not in edges and (v, u) not in edges or directed
                   and u != v and (u, v) not in edges for u, v in neg)
    again = random_edge_split(g, (0.7, 0.1, 0.2), seed=4)
    other = random_edge_split(g, (0.7, 0.1, 0.2), seed=5)
    assert all(np.array_equal(again.pos[s], split.pos[s]) for s in split.pos)
    assert not np.array_equal(other.pos["test"], split.pos["test"])
    eg = split.encoder_graph(9)
    assert eg.num_classes == 9 and eg.adj is split.graph.adj


@pytest.mark.parametrize("text", ["0.8,0.1", "0.9,0.2,0.1", "a,b,c", "0,0.5,0.5", "1.2,-0.1,-0.1"])
def test_bad_fractions_refused(text):
    with pytest.raises(DatasetError) as e:
        parse_fractions(text)
    assert "\n" not in str(e.value)
