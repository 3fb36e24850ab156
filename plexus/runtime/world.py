"""Run a Python function on a local gloo world of N processes and collect what every rank returns.

For tests, benchmarks and the performance model's calibration on one machine (the training command
uses torch's elastic launcher, `plexus.runtime.local.launch_local`, instead). Each rank gets
``threads`` torch threads. Starting a world is the slow part (about 30 s for 16 ranks on 2 cores):
run many checks inside one. It lives in the runtime so that the performance model can measure
collectives without depending on the test helpers (`plexus.testing` depends on the model).
"""

from __future__ import annotations

import os
import traceback
from datetime import timedelta

import torch
import torch.multiprocessing as mp

from .local import free_port


def _worker(rank: int, world: int, port: int, threads: int, fn, args, queue,
            env: dict[str, str]) -> None:
    import torch.distributed as dist

    os.environ.update(env)  # before this process's first tensor (see plexus.runtime.hostmem)
    torch.set_num_threads(threads)
    os.environ["OMP_NUM_THREADS"] = str(threads)
    try:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world, timeout=timedelta(seconds=120))
        result = fn(*args)
        queue.put((rank, "ok", result))
        dist.barrier()
        dist.destroy_process_group()
    except BaseException:  # noqa: BLE001 — report everything to the parent
        queue.put((rank, "error", traceback.format_exc()))


def run_world(world: int, fn, *args, timeout: float = 900, threads: int = 1,
              env: dict[str, str] | None = None) -> list:
    """Call ``fn(*args)`` on every rank of a fresh world; return the per-rank results in rank
    order. ``fn`` must be importable (module level). Raises with the failing rank's traceback if
    any rank raises; a rank silent for ``timeout`` seconds fails the call. ``env``: variables
    set in each rank before it does anything else."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_worker, args=(r, world, port, threads, fn, args, queue, env or {}),
                         daemon=True)
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
