"""Link prediction on the grid equals the serial model on every grid (1x1x1, 2x1x2, 2x2x1,
2x2x2), with dropout, on an undirected and a directed graph, with both decoders; the ledger's
pair collectives equal their declaration, and every rank's tracked tensor peak is the memory
model's within 15 % (tests/link_checks.py). One world per world size."""

from __future__ import annotations

import pytest

import worlds
from link_checks import DECODERS, run_link_checks

pytestmark = pytest.mark.slow  # multi-rank worlds

GRIDS = {1: [(1, 1, 1)], 4: [(2, 1, 2), (2, 2, 1)], 8: [(2, 2, 2)]}
CHECKS = [f"{g}/{d}/{c}" for g in ("undirected", "directed") for d in DECODERS
          for c in ("step", "train", "ledger", "bytes")] + [f"memory/{d}" for d in DECODERS]
worlds.declare("link", __file__,
               {world: (run_link_checks, (grids,)) for world, grids in GRIDS.items()})


def world_results(world: int) -> dict[str, list[str]]:
    """Every check of this world size's grids (run once, in the session's shared
    world of this size: `tests/worlds.py`); the ranks' failures merged."""
    return worlds.merged(world, "link")


@pytest.mark.parametrize("dims", [d for ds in GRIDS.values() for d in ds],
                         ids=lambda d: "x".join(map(str, d)))
@pytest.mark.parametrize("check", CHECKS)
def test_link_prediction_on_the_grid_equals_serial(dims, check):
    results = world_results(dims[0] * dims[1] * dims[2])
    key = f"{'x'.join(map(str, dims))}/{check}"
    assert key in results, f"check {key} did not run"
    assert results[key] == [], "\n".join(results[key][:20])
