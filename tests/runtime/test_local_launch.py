"""The local launcher's forked workers: none joins the job before the last one is forked (a
fork while the agent's store thread held glibc's resolver lock left a worker blocked forever)."""

from __future__ import annotations

import time
from multiprocessing import popen_fork

import pytest

from plexus.runtime.local import launch_local


@pytest.mark.slow
def test_forked_workers_start_only_after_the_last_one_is_forked(monkeypatch):
    forks: list[float] = []
    launch = popen_fork.Popen._launch

    def slow_launch(self, process_obj):  # each fork 0.3 s after the one before
        time.sleep(0.3)
        forks.append(time.monotonic())
        return launch(self, process_obj)

    monkeypatch.setattr(popen_fork.Popen, "_launch", slow_launch)
    starts = launch_local(3, time.monotonic, fork=True)  # each worker: when its entry ran
    assert len(forks) == 3 and len(starts) == 3
    # CLOCK_MONOTONIC is the machine's: comparable across the processes
    assert min(starts) >= max(forks), (starts, forks)
