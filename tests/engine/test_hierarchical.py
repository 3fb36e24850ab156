"""Collectives in two levels on virtual nodes (`plexus.engine.twolevel`, `EngineConfig.gpus_per_node`
and ``collectives``): worlds of 4 gloo ranks on 2 nodes and of 8 on 4 and on 2 nodes, each world
started once for every check of its grids (`hier_checks`; shared with other files: `tests/worlds.py`): each two-level collective against the
flat one and values made by hand (fp32 all-gathers bit for bit, sums of integers exactly, other
sums to rounding; bf16 payloads against their hand rounding), GCN, GraphSAGE, GAT and GIN steps
and training runs against the serial model on an undirected and a directed graph, the ledger
against the schedule and, per link class, against the ring formulas worked out by hand."""

from __future__ import annotations

import pytest

import worlds
from hier_checks import WORLD_CONFIGS, check_names, run_hier_checks

pytestmark = pytest.mark.slow  # worlds: left out of the fast subset

EPOCHS = {4: 8, 8: 4}
worlds.declare("hierarchical", __file__, {
    world: (run_hier_checks, (WORLD_CONFIGS[world], EPOCHS[world])) for world in WORLD_CONFIGS})


def world_results(world: int) -> dict[str, list[str]]:
    """Every check of this world size's grids (run once, in the session's shared world of
    that size: `tests/worlds.py`); the ranks' failures merged."""
    return worlds.merged(world, "hierarchical")


@pytest.mark.parametrize("world,name", [(w, n) for w, configs in WORLD_CONFIGS.items()
                                        for config in configs for n in check_names(*config)])
def test_two_level_collectives(world, name):
    results = world_results(world)
    assert name in results, f"check {name} did not run"
    assert results[name] == [], "\n".join(results[name][:20])
