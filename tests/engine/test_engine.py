"""The 3D engine equals the serial reference on every grid.

One world per world size runs every check of every grid of that size (worlds are slow to start:
the session's shared world of that size, `tests/worlds.py`, which other files' checks share);
each check is then reported as its own test. The GCN checks run on every grid; every model kind
and option (BatchNorm, residual, GraphSAGE, GIN, dense layers) on the grids of `MODEL_GRIDS`, on an
undirected and a directed graph.
"""

from __future__ import annotations

import pytest

import worlds
from engine_checks import (KIND2_CHECKS, KIND2_GRIDS, MODEL_CHECKS, OPCOUNT_CHECKS,
                           OPCOUNT_GRIDS, WIRE_CHECKS, WIRE_GRIDS, run_all_checks)

pytestmark = pytest.mark.slow  # worlds or end-to-end runs: left out of the fast subset

GRIDS = {1: [(1, 1, 1)], 2: [(2, 1, 1), (1, 2, 1), (1, 1, 2)], 3: [(1, 3, 1)],
         4: [(2, 2, 1), (2, 1, 2), (1, 2, 2)], 6: [(3, 1, 2)], 8: [(2, 2, 2)], 16: [(2, 2, 4)]}
MODEL_GRIDS = {(1, 1, 1), (2, 1, 1), (1, 3, 1), (2, 2, 2), (2, 2, 4)}
# The GCN family's layer counts per world size: the worlds of 8 and 16 ranks (the slowest on a
# small machine) check 2 and 4 layers; 1 and 3 layers are checked on every smaller grid.
def layer_counts(world: int) -> tuple[int, ...]:
    return (2, 4) if world >= 8 else (1, 2, 3, 4)


# Epochs of every training check: 20 below 8 ranks; fewer on the two largest worlds, whose
# epochs cost the most here (16 processes on 2 cores). Their step checks still compare every
# gradient with the serial model's; the shorter curves still take Adam and new dropout masks
# through several steps.
def train_epochs(world: int) -> int:
    return 20 if world < 8 else (8 if world < 16 else 5)


def checks(dims: tuple[int, int, int]) -> list[str]:
    return [f"L{l}/{kind}" for l in layer_counts(dims[0] * dims[1] * dims[2])
            for kind in ("step", "train-dropout", "train-no-dropout")] + [
        "orders/step-mixed", "orders/step-combine-learnable", "orders/train-auto",
        "features/step-learnable-nobias", "engine/chunked-overlap-scipy",
        "engine/tuned-gemms-chunked", "ledger/agg", "ledger/mixed-learnable", "comm/mixed-layouts"]

worlds.declare("engine", __file__, {
    world: (run_all_checks, (GRIDS[world], MODEL_GRIDS, layer_counts(world), train_epochs(world)))
    for world in GRIDS})


def world_results(world: int) -> dict[str, list[str]]:
    """Every check of the grids of this world size (run once, in the shared world); the ranks'
    failures merged."""
    return worlds.merged(world, "engine")


def _check(dims: tuple[int, int, int], check: str) -> None:
    results = world_results(dims[0] * dims[1] * dims[2])
    key = f"{'x'.join(map(str, dims))}/{check}"
    assert key in results, f"check {key} did not run"
    assert results[key] == [], "\n".join(results[key][:20])


@pytest.mark.parametrize("dims,check", [(d, c) for ds in GRIDS.values() for d in ds
                                         for c in checks(d)],
                         ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else v)
def test_distributed_equals_serial(dims, check):
    _check(dims, check)


@pytest.mark.parametrize("dims", sorted(MODEL_GRIDS), ids=lambda d: "x".join(map(str, d)))
@pytest.mark.parametrize("check", MODEL_CHECKS)
def test_models_equal_serial(dims, check):
    _check(dims, check)


@pytest.mark.parametrize("dims", sorted(WIRE_GRIDS), ids=lambda d: "x".join(map(str, d)))
@pytest.mark.parametrize("check", WIRE_CHECKS)
def test_bf16_payloads_equal_serial_within_their_rounding(dims, check):
    """bf16 payloads (``comm_dtype``): every kind's step against the float32 serial model at
    `engine_checks.WIRE_FLOOR`' derived bound, its ledger against the schedule per
    collective (2 bytes per payload element, 4 per statistic), the collectives themselves
    against hand-rounded values."""
    _check(dims, check)


@pytest.mark.parametrize("dims", sorted(KIND2_GRIDS), ids=lambda d: "x".join(map(str, d)))
@pytest.mark.parametrize("check", KIND2_CHECKS)
def test_new_kinds_equal_serial(dims, check):
    """APPNP, GCNII and GATv2 (issue 57): a step's logits, loss and gradients and the loss
    curve with dropout on (losses within 1e-5), and the ledger against the schedule."""
    _check(dims, check)


@pytest.mark.parametrize("dims", sorted(OPCOUNT_GRIDS), ids=lambda d: "x".join(map(str, d)))
@pytest.mark.parametrize("check", OPCOUNT_CHECKS)
def test_operators_per_step_do_not_grow_with_the_graph(dims, check):
    """Every kind with feature and attention dropout: the same operators per training step on
    graphs 16x apart (a GPU launches a kernel per operator)."""
    _check(dims, check)
