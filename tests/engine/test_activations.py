"""Every activation on the grid (issue 59 item 5): the built-in kinds with ELU, LeakyReLU, GELU,
tanh and none (after BatchNorm, inside GIN's MLP, in GAT, before an aggregation that drops its
input, under recompute) equal the serial model, which equals PyG's layers with the same
activation (tests/engine/test_pyg_reference.py); users' `plexus.nn` layers with each activation
equal PyG's GraphConv stack with PyG's own activation module. On 1x1x1 (serial = PyG), 2x1x2
and 2x2x1; one world per size, every check of its grids in it."""

from __future__ import annotations

import pytest

from engine_checks import ACTIVATION_CHECKS, run_activation_checks
import worlds

pytestmark = pytest.mark.slow  # worlds: left out of the fast subset
pytest.importorskip("torch_geometric")

GRIDS = {1: [(1, 1, 1)], 4: [(2, 1, 2), (2, 2, 1)]}
worlds.declare("activations", __file__,
               {world: (run_activation_checks, (grids,)) for world, grids in GRIDS.items()})


def world_results(world: int) -> dict[str, list[str]]:
    """Every check of the grids of this world size (run once, in the session's shared
    world of this size: `tests/worlds.py`); merge the ranks' failures."""
    return worlds.merged(world, "activations")


@pytest.mark.parametrize("dims", [d for ds in GRIDS.values() for d in ds],
                         ids=lambda d: "x".join(map(str, d)))
@pytest.mark.parametrize("check", ACTIVATION_CHECKS)
def test_activation_on_the_grid(dims, check):
    results = world_results(dims[0] * dims[1] * dims[2])
    key = f"{'x'.join(map(str, dims))}/{check}"
    assert key in results, f"check {key} did not run"
    assert results[key] == [], "\n".join(results[key][:20])
