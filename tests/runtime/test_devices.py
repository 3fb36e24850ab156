"""Which device and backend a rank gets (several ranks may share a GPU), the memory budget of a
step's pieces, and timers that never wait for the device inside a step. The GPU itself is
exercised by benchmarks/gpu_checks.sh on a lent machine (results in benchmarks/results/)."""

from __future__ import annotations

import pytest
import torch

from plexus.engine import pieces
from plexus.engine.comm import staged
from plexus.engine.timing import Timers
from plexus_partition.launch import env
from plexus_partition.launch.env import LaunchError


@pytest.mark.parametrize("gpus,ranks,per,backend", [
    (1, 1, 1, "nccl"), (1, 8, 8, "gloo"), (4, 4, 1, "nccl"), (4, 8, 2, "gloo"), (4, 6, 2, "gloo"),
    (8, 3, 1, "nccl")])
def test_ranks_beyond_the_gpus_share_them_over_gloo(monkeypatch, gpus, ranks, per, backend):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    assert env.ranks_per_gpu(ranks) == per
    assert env.gpu_backend(ranks) == backend
    # every local rank has a GPU: rank r takes GPU r // per, and no GPU holds more than per
    assert max(r // per for r in range(ranks)) < gpus


def test_a_gpu_run_needs_one_visible_gpu_not_one_per_rank(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    env.check_local_devices(8, "cuda")  # 8 ranks on one GPU: shared, not refused
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    with pytest.raises(LaunchError, match="no GPU is visible"):
        env.check_local_devices(2, "cuda")


def test_collectives_of_cpu_tensors_are_never_staged():
    assert not staged(torch.device("cpu"))


def test_the_piece_budget_is_a_share_of_free_memory_split_between_local_ranks(monkeypatch):
    monkeypatch.setattr(pieces, "available_bytes", lambda: 8e9)
    assert pieces.piece_budget(torch.device("cpu"), 1) == pytest.approx(8e9 * pieces.FREE_SHARE)
    assert pieces.piece_budget(torch.device("cpu"), 4) == pytest.approx(2e9 * pieces.FREE_SHARE)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert pieces.piece_budget(torch.device("cpu")) == pytest.approx(4e9 * pieces.FREE_SHARE)


def test_cpu_timers_accumulate_and_reset():
    timers = Timers(torch.device("cpu"))
    for _ in range(3):
        with timers("spmm"):
            torch.ones(10).sum()
    assert timers.seconds["spmm"] > 0 and set(timers.seconds) == {"spmm"}
    timers.reset()
    assert dict(timers.seconds) == {}
    off = Timers(torch.device("cpu"), enabled=False)
    with off("gemm"):
        pass
    assert dict(off.seconds) == {}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_timers_record_events_and_read_them_once():
    timers = Timers(torch.device("cuda"))
    x = torch.randn(2048, 2048, device="cuda")
    with timers("gemm"):
        x @ x
    assert timers._pending  # recorded, not waited for
    assert timers.seconds["gemm"] > 0 and not timers._pending
