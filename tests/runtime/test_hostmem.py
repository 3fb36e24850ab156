"""plexus_partition.launch.hostmem: huge pages cut the page faults of an epoch's large tensors; the
local world hands the setting to its ranks."""

from __future__ import annotations

import resource
import subprocess
import sys

import pytest

from plexus_partition.launch.hostmem import HUGE_PAGES_ENV, huge_pages_available, huge_pages_env
from plexus.testing.localworld import run_world

PAGES = 4 * 64 * 2**20 // 4096  # four 64 MiB tensors in 4 KiB pages
SCRIPT = """
import sys
from plexus_partition.launch.hostmem import enable_huge_pages
import test_hostmem
if sys.argv[1] == "huge":
    enable_huge_pages()
print(test_hostmem.big_allocation_faults())
"""


def big_allocation_faults(warmup: int = 8) -> int:
    """Minor page faults of allocating, filling and freeing four 64 MiB tensors, after
    ``warmup`` such rounds (with a small tensor in between, as real code has)."""
    import torch

    kept = []

    def round_trip() -> None:
        big = torch.ones(16 * 2**20)
        kept.append(torch.ones(3))  # small blocks live on between the big ones, as in training
        del big

    for _ in range(warmup):
        round_trip()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(4):
        round_trip()
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


def faults_in_fresh_process(mode: str) -> int:
    env = {k: v for k, v in __import__("os").environ.items() if k != HUGE_PAGES_ENV}
    env["PYTHONPATH"] = ":".join(sys.path)
    out = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True,
                         check=True, timeout=120, env=env)
    return int(out.stdout.split()[-1])


linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux memory tuning")


@linux
def test_by_default_every_epochs_large_tensors_fault_in_again():
    assert faults_in_fresh_process("default") > PAGES // 2  # the check below could fail


@linux
@pytest.mark.skipif(not huge_pages_available(), reason="transparent huge pages are off")
def test_huge_pages_cut_the_faults_and_reach_the_ranks_of_a_local_world():
    assert faults_in_fresh_process("huge") < PAGES // 20
    rank0, = run_world(1, big_allocation_faults, 1, env=huge_pages_env())
    assert rank0 < PAGES // 20


def test_a_users_own_huge_page_setting_stands(monkeypatch):
    monkeypatch.setenv(HUGE_PAGES_ENV, "0")
    assert huge_pages_env() == {}
    monkeypatch.delenv(HUGE_PAGES_ENV)
    assert huge_pages_env() == {HUGE_PAGES_ENV: "1"}
