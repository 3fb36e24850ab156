"""Run a Python function on a local world of N processes (gloo, or NCCL with one GPU per rank) and
collect what every rank returns.

For tests, benchmarks and the performance model's calibration on one machine (the training command
uses torch's elastic launcher, `plexus.runtime.local.launch_local`, instead). Each rank gets
``threads`` torch threads. Starting a world is the slow part (23 s for 16 fresh interpreters
on 2 cores, each importing torch): run many checks inside one, or have the ranks forked from a
fork server that imported torch once (``preload``: a world of 16 then starts in under a second
here; callers that start several worlds use it). It lives in the runtime so that the
performance model can measure collectives without depending on the test helpers
(`plexus.testing` depends on the model).
"""

from __future__ import annotations

import os
import signal
import time
import traceback
from datetime import timedelta
from queue import Empty

import torch
import torch.multiprocessing as mp

from plexus_partition.launch.env import bind_crowded_rank, ranks_per_gpu
from .local import free_port, preload_forkserver, start_forkserver


def _worker(rank: int, world: int, port: int, threads: int, fn, args, queue,
            env: dict[str, str], backend: str, per_gpu: int, bind: bool,
            caller: tuple[dict[str, str], set[int] | None] | None) -> None:
    import torch.distributed as dist

    if caller is not None:  # forked from the fork server: the caller's, as a spawned rank has
        environ, cores = caller
        os.environ.clear()
        os.environ.update(environ)
        if cores is not None:
            os.sched_setaffinity(0, cores)
        signal.signal(signal.SIGINT, signal.default_int_handler)  # the server ignores it
    os.environ.update(env)  # before this process's first tensor (see plexus_partition.launch.hostmem)
    if bind:
        bind_crowded_rank(rank, world)  # before the process group's threads: they inherit it
    torch.set_num_threads(threads)
    os.environ["OMP_NUM_THREADS"] = str(threads)
    reported = False
    try:
        if per_gpu:  # as plexus_partition.launch.group does: a GPU per rank (NCCL) or shared (gloo)
            torch.cuda.set_device(rank // per_gpu)
        dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world, timeout=timedelta(seconds=120))
        result = fn(*args)
        queue.put((rank, "ok", result))
        reported = True
        dist.barrier()
        dist.destroy_process_group()
    except BaseException:  # noqa: BLE001 — report everything to the parent
        if not reported:  # one report per rank: a peer's death after it is not this rank's
            queue.put((rank, "error", traceback.format_exc()))


def run_world(world: int, fn, *args, timeout: float = 900, threads: int = 1,
              env: dict[str, str] | None = None, backend: str = "gloo",
              cuda: bool = False, bind: bool = False,
              preload: list[str] | None = None) -> list:
    """Call ``fn(*args)`` on every rank of a fresh world; return the per-rank results in rank
    order. ``fn`` must be importable (module level). Raises with the failing rank's traceback if
    any rank raises; a rank silent for ``timeout`` seconds fails the call. ``env``: variables
    set in each rank before it does anything else. ``backend`` "nccl" gives rank r the GPU
    ``cuda:r`` (one per rank; the caller checks there are enough); ``cuda`` with "gloo": the
    ranks share the GPUs, as few per GPU as cover them
    (`plexus_partition.launch.env.ranks_per_gpu`). ``bind``: ranks that outnumber the cores take one
    each, round robin (`plexus_partition.launch.env.crowded_core`), for a world that has the
    machine to itself (twice as fast collectives then; bound ranks cannot move away from
    another job's process, so the default leaves placement to the OS, as launches do).
    ``preload`` (CPU worlds; None: each rank a fresh interpreter): the ranks are forked from
    this process's fork server, which imports torch and these modules once, at its first use
    (`plexus.runtime.local.preload_forkserver`; from its own ``sys.path``: the installed
    packages); each rank gets this process's
    environment and core mask, as a fresh interpreter would (torch was imported under the
    server's environment: variables torch reads at import are the server's)."""
    per_gpu = 1 if backend == "nccl" else (ranks_per_gpu(world) if cuda else 0)
    caller = None
    if preload is not None and not per_gpu and "forkserver" in mp.get_all_start_methods():
        preload_forkserver(list(preload))
        start_forkserver()
        ctx = mp.get_context("forkserver")
        caller = (dict(os.environ),
                  os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None)
    else:
        ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_worker, args=(r, world, port, threads, fn, args, queue, env or {},
                                           backend, per_gpu, bind, caller), daemon=True)
             for r in range(world)]
    for p in procs:
        p.start()
    results: dict[int, object] = {}
    try:
        while len(results) < world:
            rank, status, value = _next_report(queue, procs, results, timeout)
            if status == "error":
                raise RuntimeError(f"rank {rank} failed:\n{value}")
            results[rank] = value
    finally:
        # after a failure the others may wait on the failed rank: no grace period then
        grace = 30 if len(results) == world else 0.5
        for p in procs:
            p.join(timeout=grace)
            if p.is_alive():
                p.kill()
    return [results[r] for r in range(world)]


def _next_report(queue, procs, reported: dict, timeout: float) -> tuple:
    """The next rank's report; a rank that died without one (a signal, an error before its
    first line of work) ends the wait at once instead of after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return queue.get(timeout=min(1.0, max(0.0, deadline - time.monotonic())))
        except Empty:
            dead = [r for r, p in enumerate(procs) if r not in reported and p.exitcode is not None]
            if dead:
                try:  # its report may have arrived just before it exited
                    return queue.get(timeout=1.0)
                except Empty:
                    raise RuntimeError(f"rank {dead[0]} exited with status "
                                       f"{procs[dead[0]].exitcode} without reporting") from None
            if time.monotonic() >= deadline:
                raise RuntimeError(f"no rank reported for {timeout:.0f} s") from None
