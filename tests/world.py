"""Run a function on a local gloo world of N processes (one torch thread each) and collect what
every rank returns. Each world is started once and runs many checks: starting one is the slow
part (about 30 s for 16 ranks on 2 cores)."""

from __future__ import annotations

import os
import socket
import traceback
from datetime import timedelta

import torch
import torch.multiprocessing as mp


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, port: int, fn, args, queue) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    os.environ["OMP_NUM_THREADS"] = "1"
    try:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world, timeout=timedelta(seconds=120))
        result = fn(*args)
        queue.put((rank, "ok", result))
        dist.barrier()
        dist.destroy_process_group()
    except BaseException:  # noqa: BLE001 — report everything to the parent
        queue.put((rank, "error", traceback.format_exc()))


def run_world(world: int, fn, *args, timeout: float = 900) -> list:
    """Call ``fn(*args)`` on every rank of a fresh world; return the per-rank results in rank
    order. Raises with the failing rank's traceback if any rank raises."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_worker, args=(r, world, port, fn, args, queue), daemon=True)
             for r in range(world)]
    for p in procs:
        p.start()
    results: dict[int, object] = {}
    try:
        for _ in range(world):
            rank, status, value = queue.get(timeout=timeout)
            if status == "error":
                raise RuntimeError(f"rank {rank} failed:\n{value}")
            results[rank] = value
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    return [results[r] for r in range(world)]
