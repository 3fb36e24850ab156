"""Sparse exchanges (issue 45 item 4) on an R-MAT graph at 8x1x1, 1x8x1 and 1x1x8 (there stage 2's
input gradient sums over z as SRS(dH) + AG(dH), issue 55 item 5): results equal the
serial model's (undirected and directed), measured bytes per epoch (the ledger) equal the
performance model's priced with row counts taken from every rank's shard, and sending only
the touched rows moves less than ``--sparse-comm off`` by exactly the factor the model predicts.
One world of 8 ranks (the session's shared one, `tests/worlds.py`) runs every check
(`tests/exchange_checks.py`)."""

from __future__ import annotations

import pytest

import worlds
from exchange_checks import CONFIGS, run_exchange_checks

pytestmark = pytest.mark.slow  # a world of 8 ranks

GRIDS = [(8, 1, 1), (1, 8, 1), (1, 1, 8)]
worlds.declare("sparse-exchange", __file__, {8: (run_exchange_checks, (GRIDS,))})


def results() -> dict[str, list[str]]:
    """Every check, run once in the session's shared world of 8 ranks (`tests/worlds.py`)."""
    return worlds.merged(8, "sparse-exchange")


@pytest.mark.parametrize("dims", GRIDS, ids=lambda d: "x".join(map(str, d)))
@pytest.mark.parametrize("graph", ["undirected", "directed"])
@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("check", ["step", "train", "bytes"])
def test_sparse_exchange(dims, graph, config, check):
    key = f"{'x'.join(map(str, dims))}/{graph}/{config}/{check}"
    got = results()
    assert key in got, f"check {key} did not run"
    assert got[key] == [], "\n".join(got[key][:20])
