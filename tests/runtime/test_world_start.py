"""A local world whose ranks are forked from the fork server (`run_world(preload=...)`: the
session's shared worlds, `tests/worlds.py`) starts each rank as a fresh interpreter would: with
the caller's environment and core mask of the moment (not the server's, from its start), SIGINT
back to Python's handler (the server ignores it), and the caller's ``env`` on top."""

from __future__ import annotations

import os
import signal
import sys

import pytest

pytestmark = pytest.mark.slow  # worlds

VAR, GONE = "PLEXUS_TEST_WORLD_START", "PLEXUS_TEST_WORLD_GONE"


def probe() -> dict:
    """What this rank was started with."""
    return {"var": os.environ.get(VAR), "gone": os.environ.get(GONE),
            "extra": os.environ.get("PLEXUS_TEST_WORLD_EXTRA"),
            "cores": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
            "sigint": signal.getsignal(signal.SIGINT) is signal.default_int_handler,
            "parent": os.getppid(), "preloaded": "plexus.testing.exactness" in sys.modules}


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="no core masks on this OS")
def test_forked_ranks_get_the_callers_environment_and_cores_of_the_moment(monkeypatch):
    from multiprocessing import forkserver

    from plexus.testing.localworld import run_world

    server_started_here = forkserver._forkserver._forkserver_pid is None  # noqa: SLF001
    monkeypatch.setenv(GONE, "at the server's start")
    monkeypatch.setenv(VAR, "before")
    first = run_world(2, probe, preload=["plexus.testing.exactness"])  # starts it if none runs
    assert [r["var"] for r in first] == ["before"] * 2
    # after the server started: a new value, a removed variable, one core fewer
    monkeypatch.setenv(VAR, "after")
    monkeypatch.delenv(GONE)
    saved = os.sched_getaffinity(0)
    cores = sorted(saved)[:1]
    os.sched_setaffinity(0, set(cores))
    try:
        got = run_world(2, probe, env={"PLEXUS_TEST_WORLD_EXTRA": "x"}, preload=[])
    finally:
        os.sched_setaffinity(0, saved)
    assert [r["var"] for r in got] == ["after"] * 2
    assert [r["gone"] for r in got] == [None] * 2
    assert [r["extra"] for r in got] == ["x"] * 2
    assert [r["cores"] for r in got] == [cores] * 2
    assert all(r["sigint"] for r in got)
    # forked from one server, not spawned by this process, the preloaded module imported there
    assert len({r["parent"] for r in got}) == 1 and got[0]["parent"] != os.getpid()
    if server_started_here:  # (a launch earlier in this process may have started it)
        assert all(r["preloaded"] for r in first)
