"""Joining a job's process group, and proving to its rank 0 who this rank is."""

from __future__ import annotations

import os
from datetime import timedelta

import torch
import torch.distributed as dist
from threadpoolctl import threadpool_limits

from .env import JobEnv, LaunchError, gpu_backend, ranks_per_gpu, threads_per_worker, use_cuda
from .peers import job_secret, prove_peers


# How long a collective may wait for its peers before the job ends (plexus-train --timeout, the
# API's timeout_s): one default for every way into a run.
DEFAULT_TIMEOUT_S = 300.0


def check_master_addr(addr: str) -> None:
    """Raise `LaunchError` (one line, at once) when ``addr`` (MASTER_ADDR) names no host this
    machine can resolve: the rendezvous would otherwise wait its whole timeout for it."""
    import socket  # noqa: PLC0415

    try:
        socket.getaddrinfo(addr, None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError, ValueError) as e:
        why = e.strerror if isinstance(e, socket.gaierror) and e.strerror else str(e)
        raise LaunchError(f"MASTER_ADDR={addr[:60]!r} does not resolve ({why}); export the "
                          "host name or address of rank 0's node") from None


def init_process_group(env: JobEnv, timeout_s: float, cpu: bool = False,
                       device: str | None = None, threads: int | None = None) -> torch.device:
    """Join the job's default process group; return this rank's device.

    Sets the torch and BLAS/OpenMP thread counts first (before any parallel work), so workers
    sharing a node do not oversubscribe its cores (srun, unlike torchrun, sets no
    OMP_NUM_THREADS for its tasks). ``cpu``: a gloo group on the CPU even where GPUs are (for jobs
    that only coordinate, such as the partitioner's). ``device``: "cuda" (NCCL, this local
    rank's GPU; where a node has more local ranks than GPUs, they share the GPUs and talk gloo
    through host memory; `LaunchError` without CUDA), "cpu" (gloo), None: CUDA where it is
    available. The rest of the run is the same code on either. ``threads``: torch threads per
    rank as the user asked (None: ``OMP_NUM_THREADS``, else a share of the node's cores; see
    `threads_per_worker`).
    """
    threads = threads_per_worker(env.local_world_size, requested=threads)
    torch.set_num_threads(threads)
    threadpool_limits(threads)  # numpy's BLAS, for the steps that run in numpy (the partitioner)
    timeout = timedelta(seconds=timeout_s)
    if not cpu and use_cuda(device):
        if torch.cuda.device_count() < 1:
            raise LaunchError(f"local rank {env.local_rank} has no GPU: none is visible")
        device = torch.device("cuda", env.local_rank // ranks_per_gpu(env.local_world_size))
        torch.cuda.set_device(device)
        backend = gpu_backend(env.local_world_size)
    else:
        device, backend = torch.device("cpu"), "gloo"
    check_master_addr(env.master_addr)
    try:
        if env.kind == "torchrun" and "TORCHELASTIC_RUN_ID" in os.environ:
            # env:// lets torchrun's agent share its store with the workers.
            dist.init_process_group(backend, init_method="env://", timeout=timeout)
        else:
            dist.init_process_group(backend,
                                    init_method=f"tcp://{env.master_addr}:{env.master_port}",
                                    rank=env.rank, world_size=env.world_size, timeout=timeout)
    except dist.DistError as e:  # a peer that never came, a port taken, an address unreachable
        if env.rank == 0 and "EADDRINUSE" in str(e):  # its own cause, its own fix
            raise LaunchError(f"rank 0 cannot listen on MASTER_PORT {env.master_port}: another "
                              "process holds it (another job, perhaps another user's); give "
                              "every rank of the job a free MASTER_PORT") from None
        raise LaunchError(f"could not join the job of {env.world_size} ranks at "
                          f"{env.master_addr}:{env.master_port} within {timeout_s:g} s "
                          f"({type(e).__name__}: {' '.join(str(e).split())[:160]}); start "
                          "every rank with the same MASTER_ADDR and MASTER_PORT, or raise "
                          "the timeout") from None
    return device


def prove_job(options: dict[str, str], where: str, stage: str = "") -> None:
    """Prove this rank's secret and ``options`` to rank 0 of the default process group's job
    (`plexus_partition.launch.peers`; rank 0 checks every rank's): `PeerRefused` (one line) on
    a mismatch, `LaunchError` when a rank never answers, before any tensor moves. ``where``
    names the job in the message; ``stage`` the round (`prove_peers`)."""
    store = dist.distributed_c10d._get_default_store()
    try:
        prove_peers(store, dist.get_rank(), dist.get_world_size(), options, job_secret(), where,
                    stage)
    except dist.DistError as e:  # a peer that never answered within the store's timeout
        raise LaunchError(f"{where}: the ranks did not all prove who they are "
                          f"({type(e).__name__}: {' '.join(str(e).split())[:160]})") from None
