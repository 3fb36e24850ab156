"""The ranks of a local world that has the machine to itself (`run_world(bind=True)`: the shared
worlds, `tests/worlds.py`) and outnumber its cores are bound one core each, round robin over the
launching process's cores (`plexus_partition.launch.env.crowded_core`); ranks with a core each,
and every world without ``bind``, are left to the OS. Checked by hand-written placements in the
session's shared world of 4 ranks (every thread of a rank included) and in a world of 3."""

from __future__ import annotations

import os

import pytest

import worlds
from plexus_partition.launch.env import crowded_core


def test_crowded_ranks_take_one_core_each_round_robin():
    assert [crowded_core(r, 8, [0, 1]) for r in range(8)] == [0, 1, 0, 1, 0, 1, 0, 1]
    assert [crowded_core(r, 3, [2, 5]) for r in range(3)] == [2, 5, 2]
    assert [crowded_core(r, 5, [4]) for r in range(5)] == [4] * 5
    assert [crowded_core(r, 3, [0, 1, 2, 3]) for r in range(3)] == [None] * 3
    # as many ranks as cores: not crowded, the OS places them
    assert [crowded_core(r, 2, [6, 7]) for r in range(2)] == [None, None]
    assert crowded_core(0, 1, [3]) is None


def placement() -> tuple[list[int], list[list[int]]]:
    """This rank's core mask and every one of its threads' (gloo's started after the binding)."""
    tasks = [sorted(os.sched_getaffinity(int(tid))) for tid in os.listdir("/proc/self/task")]
    return sorted(os.sched_getaffinity(0)), tasks


WORLD = 4
worlds.declare("binding", __file__, {WORLD: (placement, ())})


def expected(ranks: int, cores: list[int]) -> list[list[int]]:
    """Written out here: ranks beyond the cores take cores[r mod C] alone, else all of them."""
    if ranks > len(cores):
        return [[cores[r % len(cores)]] for r in range(ranks)]
    return [cores] * ranks


needs_affinity = pytest.mark.skipif(not hasattr(os, "sched_getaffinity")
                                    or not os.path.isdir("/proc/self/task"),
                                    reason="no per-thread affinity masks on this OS")


@pytest.mark.slow
@needs_affinity
def test_the_ranks_of_a_local_world_sit_where_the_rule_puts_them():
    got = worlds.ranks(WORLD, "binding")
    want = expected(WORLD, sorted(os.sched_getaffinity(0)))
    assert [mask for mask, _ in got] == want
    for (mask, threads), rank_want in zip(got, want):
        assert len(threads) > 1, "the rank's process group started no thread"
        assert all(t == rank_want for t in threads), threads


@pytest.mark.slow
@needs_affinity
def test_a_world_left_to_the_os_keeps_the_launching_process_cores():
    """Without ``bind`` (launches and calibrations: other jobs may share the cores) every rank
    keeps the whole mask, even crowded: 3 ranks on two cores."""
    from plexus.testing.localworld import run_world

    saved = os.sched_getaffinity(0)
    cores = sorted(saved)[:2]
    os.sched_setaffinity(0, set(cores))  # the spawned ranks inherit it
    try:
        got = run_world(3, placement)
    finally:
        os.sched_setaffinity(0, saved)
    assert [mask for mask, _ in got] == [cores] * 3
