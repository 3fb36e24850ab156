"""Sparse exchanges (issue 45 item 4) on an R-MAT graph at 8x1x1, 1x8x1 and 1x1x8 (there stage 2's
input gradient sums over z as SRS(dH) + AG(dH), issue 55 item 5): results equal the
serial model's (undirected and directed), measured bytes per epoch (the ledger) equal the
performance model's priced with row counts taken from every rank's shard, and sending only
the touched rows moves less than ``--sparse-comm off`` by exactly the factor the model predicts.
One world of 8 ranks runs every check (`tests/exchange_checks.py`)."""

from __future__ import annotations

import pytest

from exchange_checks import CONFIGS, run_exchange_checks
from plexus.testing.localworld import run_world

pytestmark = pytest.mark.slow  # a world of 8 ranks

GRIDS = [(8, 1, 1), (1, 8, 1), (1, 1, 8)]
_results: dict[str, list[str]] = {}


def results() -> dict[str, list[str]]:
    if not _results:
        for rank_result in run_world(8, run_exchange_checks, GRIDS):
            for key, fails in rank_result.items():
                _results.setdefault(key, []).extend(fails)
    return _results


@pytest.mark.parametrize("dims", GRIDS, ids=lambda d: "x".join(map(str, d)))
@pytest.mark.parametrize("graph", ["undirected", "directed"])
@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("check", ["step", "train", "bytes"])
def test_sparse_exchange(dims, graph, config, check):
    key = f"{'x'.join(map(str, dims))}/{graph}/{config}/{check}"
    got = results()
    assert key in got, f"check {key} did not run"
    assert got[key] == [], "\n".join(got[key][:20])
