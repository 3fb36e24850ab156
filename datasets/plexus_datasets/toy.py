"""Small random graphs for exactness checks (the test suite, ``plexus-bench check``,
`plexus.nn.check_layer`): node, feature and class counts are primes, so no grid axis divides
them and every cut is padded."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .graph import Graph


def toy_graph(n: int = 37, f: int = 11, c: int = 5, seed: int = 1) -> Graph:
    """A small random undirected graph whose N, feature and class counts are primes (no axis
    divides them), with unlabelled nodes and all three masks."""
    rng = np.random.default_rng(seed)
    a = sp.random(n, n, density=0.12, random_state=seed, format="csr")
    a = sp.csr_matrix(((a + a.T) > 0).astype(np.float32))
    labels = rng.integers(0, c, n).astype(np.int64)
    labels[:3] = -1
    order = rng.permutation(np.arange(3, n))
    masks = [np.zeros(n, bool) for _ in range(3)]
    masks[0][order[:17]] = True
    masks[1][order[17:25]] = True
    masks[2][order[25:]] = True
    feats = rng.standard_normal((n, f)).astype(np.float32)
    return Graph("toy", a, feats, labels, *masks, num_classes=c).validate()


def directed_toy_graph(n: int = 41, f: int = 7, c: int = 3, seed: int = 2) -> Graph:
    """Like `toy_graph` but directed (Â not symmetric: a broken transpose path shows), with a
    node that has no in-neighbour."""
    g = toy_graph(n, f, c, seed)
    a = sp.random(n, n, density=0.1, random_state=seed + 7, format="csr")
    keep = np.ones(n, np.float32)
    keep[5] = 0  # node 5 has no in-neighbour: mean aggregation over nothing is 0
    a = sp.csr_matrix((a > 0).astype(np.float32) @ sp.diags(keep))
    a.eliminate_zeros()
    return Graph("toy-directed", a, g.features, g.labels, g.train_mask, g.val_mask, g.test_mask,
                 num_classes=c, directed=True).validate()
