"""Link prediction on the grid equals the serial model on every grid (1x1x1, 2x1x2, 2x2x1,
2x2x2), with dropout, on an undirected and a directed graph, with both decoders; the ledger's
pair collectives equal their declaration, and every rank's tracked tensor peak is the memory
model's within 15 % (tests/link_checks.py). One world per world size."""

from __future__ import annotations

import pytest

from helpers import merged_world
from link_checks import DECODERS, run_link_checks

pytestmark = pytest.mark.slow  # multi-rank worlds

GRIDS = {1: [(1, 1, 1)], 4: [(2, 1, 2), (2, 2, 1)], 8: [(2, 2, 2)]}
CHECKS = [f"{g}/{d}/{c}" for g in ("undirected", "directed") for d in DECODERS
          for c in ("step", "train", "ledger")] + [f"memory/{d}" for d in DECODERS]
_results: dict[int, dict[str, list[str]]] = {}


def world_results(world: int) -> dict[str, list[str]]:
    """Run (once) every check of this world size's grids; the ranks' failures merged."""
    if world not in _results:
        _results[world] = merged_world(world, run_link_checks, GRIDS[world])
    return _results[world]


@pytest.mark.parametrize("dims", [d for ds in GRIDS.values() for d in ds],
                         ids=lambda d: "x".join(map(str, d)))
@pytest.mark.parametrize("check", CHECKS)
def test_link_prediction_on_the_grid_equals_serial(dims, check):
    results = world_results(dims[0] * dims[1] * dims[2])
    key = f"{'x'.join(map(str, dims))}/{check}"
    assert key in results, f"check {key} did not run"
    assert results[key] == [], "\n".join(results[key][:20])
