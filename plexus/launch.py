"""Where a Plexus job runs: detect the launcher, start local workers, set up torch.distributed.

Three ways to run ``plexus-train``:
- outside any launcher: it starts X·Y·Z local workers itself with torch's elastic launcher
  (`torch.distributed.launcher.api.elastic_launch`, c10d rendezvous on 127.0.0.1, free port);
- under torchrun (or any launcher exporting RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR): each process
  is one rank of the job it is in;
- under srun (SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID): the same, with MASTER_ADDR (and
  optionally MASTER_PORT, default 29500) exported by the batch script.

Workers use NCCL on ``cuda:LOCAL_RANK`` when CUDA is available and gloo on the CPU otherwise;
nothing else differs. Each local worker gets ``max(1, cores // local_workers)`` torch threads.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import re
import signal
import socket
import sys
import tempfile
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable, Mapping

import torch
import torch.distributed as dist

DEFAULT_MASTER_PORT = 29500


class LaunchError(RuntimeError):
    """The job environment is unusable (missing variables, too few GPUs, ...): a user error."""


@dataclass(frozen=True)
class JobEnv:
    """This process's place in the job, as the launcher describes it."""

    kind: str  # "torchrun" (also the local launcher's workers), "slurm", or "single" (1 rank)
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str
    master_port: int


def _int(environ: Mapping[str, str], name: str) -> int:
    value = environ.get(name, "")
    try:
        return int(value)
    except ValueError:
        raise LaunchError(f"environment variable {name}={value!r} is not an integer") from None


def slurm_tasks_on_node(tasks_per_node: str, node_id: int) -> int | None:
    """Tasks on node ``node_id`` from SLURM's compressed list, e.g. "4(x2),3" -> [4, 4, 3]."""
    counts: list[int] = []
    for part in tasks_per_node.split(","):
        m = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if not m:
            return None
        counts += [int(m.group(1))] * int(m.group(2) or 1)
    return counts[node_id] if 0 <= node_id < len(counts) else None


def _in_srun_step(env: Mapping[str, str]) -> bool:
    """Whether this process is a task of an srun step (not the batch script or an extern step,
    whose special step ids are the largest 32-bit values)."""
    step = env.get("SLURM_STEP_ID", env.get("SLURM_STEPID", ""))
    return step.isdigit() and int(step) < 0xFFFFFFF0


def detect_environment(environ: Mapping[str, str] | None = None) -> JobEnv | None:
    """The launcher this process runs under, or None when it runs on its own.

    torchrun's variables win over SLURM's (torchrun inside an srun step is a torchrun job). A
    SLURM allocation alone (salloc, the batch script itself) is not a launcher: only an srun step
    (SLURM_STEP_ID set) makes every task a rank.
    """
    env = os.environ if environ is None else environ
    if "RANK" in env and "WORLD_SIZE" in env:
        world = _int(env, "WORLD_SIZE")
        local_world = _int(env, "LOCAL_WORLD_SIZE") if "LOCAL_WORLD_SIZE" in env else world
        if "MASTER_ADDR" not in env:
            raise LaunchError("RANK and WORLD_SIZE are set but MASTER_ADDR is not; start the job "
                              "with torchrun or export MASTER_ADDR and MASTER_PORT")
        return JobEnv("torchrun", _int(env, "RANK"), world,
                      _int(env, "LOCAL_RANK") if "LOCAL_RANK" in env else 0, local_world,
                      env["MASTER_ADDR"],
                      _int(env, "MASTER_PORT") if "MASTER_PORT" in env else DEFAULT_MASTER_PORT)
    if "SLURM_PROCID" in env and env.get("SLURM_NTASKS", "1") != "1" and _in_srun_step(env):
        # (a one-task step, e.g. an interactive `srun --pty bash`, launches its workers itself)
        if "MASTER_ADDR" not in env:
            raise LaunchError("under srun, export MASTER_ADDR (the first node of the job: "
                              "$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)) "
                              "and MASTER_PORT before srun")
        world = _int(env, "SLURM_NTASKS")
        node_tasks = None
        for key in ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"):
            if key in env:
                node_tasks = slurm_tasks_on_node(env[key], _int(env, "SLURM_NODEID")
                                                 if "SLURM_NODEID" in env else 0)
                if node_tasks:
                    break
        if not node_tasks:  # fall back to an even spread over the step's nodes
            nodes = _int(env, "SLURM_STEP_NUM_NODES") if "SLURM_STEP_NUM_NODES" in env else (
                _int(env, "SLURM_NNODES") if "SLURM_NNODES" in env else 1)
            node_tasks = -(-world // max(nodes, 1))
        return JobEnv("slurm", _int(env, "SLURM_PROCID"), world,
                      _int(env, "SLURM_LOCALID") if "SLURM_LOCALID" in env else 0, node_tasks,
                      env["MASTER_ADDR"],
                      _int(env, "MASTER_PORT") if "MASTER_PORT" in env else DEFAULT_MASTER_PORT)
    return None


def available_cores() -> int:
    """CPU cores this process may run on (its affinity mask where the OS reports one)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def threads_per_worker(local_workers: int, cores: int | None = None) -> int:
    """Torch threads for each of ``local_workers`` processes sharing this node's cores."""
    return max(1, (cores if cores is not None else available_cores()) // max(1, local_workers))


def use_cuda() -> bool:
    """Whether workers run on GPUs (NCCL) rather than CPUs (gloo)."""
    return torch.cuda.is_available()


def check_local_devices(local_workers: int) -> None:
    """On a GPU node every local worker needs its own GPU (NCCL refuses to share one)."""
    if use_cuda() and local_workers > torch.cuda.device_count():
        raise LaunchError(f"{local_workers} workers on this node but only "
                          f"{torch.cuda.device_count()} GPUs; use a grid with at most that many "
                          "ranks per node, or hide the GPUs (CUDA_VISIBLE_DEVICES=) to run on CPUs")


def init_process_group(env: JobEnv, timeout_s: float) -> torch.device:
    """Join the job's default process group; return this rank's device.

    Sets the torch thread count first (before any parallel work), so workers sharing a node do
    not oversubscribe its cores.
    """
    torch.set_num_threads(threads_per_worker(env.local_world_size))
    timeout = timedelta(seconds=timeout_s)
    if use_cuda():
        if env.local_rank >= torch.cuda.device_count():
            raise LaunchError(f"local rank {env.local_rank} has no GPU: this node has "
                              f"{torch.cuda.device_count()}")
        device = torch.device("cuda", env.local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    if env.kind == "torchrun" and "TORCHELASTIC_RUN_ID" in os.environ:
        # env:// lets torchrun's agent share its store with the workers.
        dist.init_process_group(backend, init_method="env://", timeout=timeout)
    else:
        dist.init_process_group(backend, init_method=f"tcp://{env.master_addr}:{env.master_port}",
                                rank=env.rank, world_size=env.world_size, timeout=timeout)
    return device


def die_with_launcher() -> None:
    """Make this locally launched worker end when its launcher does (Linux; elsewhere a no-op).

    The launcher stops its workers itself on errors and signals; this covers a launcher that is
    killed outright (SIGKILL, OOM killer), which would otherwise leave its workers running.
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes  # noqa: PLC0415

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL)
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the launcher died before the request took effect
        os._exit(1)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the rendezvous binds it right after)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@dataclass
class WorkerFailure:
    """A local worker that ended with an exception or a non-zero exit status."""

    rank: int
    exitcode: int
    message: str  # the worker's exception, one line
    traceback: str  # the worker's traceback where it reported one


class LocalJobFailed(RuntimeError):
    """One or more local workers failed; ``failures[0]`` is the root cause."""

    def __init__(self, failures: list[WorkerFailure]) -> None:
        self.failures = failures
        first = failures[0]
        more = f" ({len(failures) - 1} more failed after it)" if len(failures) > 1 else ""
        super().__init__(f"worker rank {first.rank} {first.message}{more}")


def _quiet_elastic_logs() -> None:
    # The elastic agent logs every worker failure with a full traceback, several times over; we
    # report failures ourselves (`WorkerFailure`). LOGLEVEL=INFO/DEBUG brings them back.
    if os.environ.get("LOGLEVEL", "").upper() in ("INFO", "DEBUG"):
        return
    prefixes = ("torch.distributed.elastic", "torch.distributed.launcher", "torch.multiprocessing")
    # elastic sets a level on each of its module loggers, so parents' levels do not reach them
    for name in list(logging.root.manager.loggerDict):
        if name.startswith(prefixes):
            logging.getLogger(name).setLevel(logging.CRITICAL)


def _start_method(entrypoint: Callable[..., Any]) -> str:
    """How local workers are started.

    Importing torch costs each worker seconds of CPU, so on CPUs workers are forked from a fork
    server that has imported torch, torch._dynamo (the optimizer's first construction imports
    it) and the entry point's module once. The server is a fresh single-threaded process: a
    plain fork of this one, whose launcher threads may hold locks, can deadlock. With CUDA,
    spawn: a CUDA context never crosses a fork.
    """
    if use_cuda() or "forkserver" not in mp.get_all_start_methods():
        return "spawn"
    mp.set_forkserver_preload(["torch", "torch._dynamo", entrypoint.__module__])
    return "forkserver"


def launch_local(nprocs: int, entrypoint: Callable[..., Any], *args: Any) -> list[Any]:
    """Run ``entrypoint(*args)`` in ``nprocs`` local worker processes that form one job.

    Returns the workers' return values in rank order. Raises `LocalJobFailed` when a worker
    raises or dies; the elastic agent then stops all the others, so a failure never leaves the
    job hanging.
    """
    from torch.distributed.elastic.multiprocessing.api import DefaultLogsSpecs  # noqa: PLC0415
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError  # noqa: PLC0415
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch  # noqa: PLC0415

    _quiet_elastic_logs()
    start_method = _start_method(entrypoint)
    sys.stdout.flush()  # our own lines first, then the workers'
    sys.stderr.flush()
    with tempfile.TemporaryDirectory(prefix="plexus-launch-") as log_dir:
        config = LaunchConfig(
            min_nodes=1, max_nodes=1, nproc_per_node=nprocs,
            run_id=f"plexus-{uuid.uuid4().hex[:12]}",
            rdzv_backend="c10d", rdzv_endpoint=f"127.0.0.1:{free_port()}",
            local_addr="127.0.0.1",
            max_restarts=0,  # a failed worker fails the job: training is not elastic
            monitor_interval=0.1,
            start_method=start_method,
            # Workers inherit our stdout/stderr (rank 0's progress bar sees the terminal); the
            # directory only holds the agent's error files and disappears with the job.
            logs_specs=DefaultLogsSpecs(log_dir=log_dir))
        try:
            results = elastic_launch(config, entrypoint)(*args)
        except ChildFailedError as e:
            raise LocalJobFailed(_failures(e)) from None
    return [results[r] for r in range(nprocs)]


# Errors a rank sees when a *peer* failed: the consequence, never the root cause.
_PEER_ERRORS = re.compile(r"connection (reset|closed|refused)|broken pipe|timed out|"
                          r"remote (worker|process)|peer", re.IGNORECASE)


#: How long a rank that lost a peer waits before it exits: the launcher reports the first worker
#: it sees fail, which should be the peer that failed, not this consequence of it.
PEER_ERROR_GRACE_S = 1.0


def is_peer_error(error: BaseException) -> bool:
    """Whether ``error`` is what a rank sees when a peer died or stopped answering."""
    return bool(_PEER_ERRORS.search(f"{type(error).__name__}: {error}"))


def _blame(failure: WorkerFailure, signal_name: str) -> int:
    """How likely ``failure`` is the root cause (lower first): killed by a signal (the OOM
    killer, a user), then the worker's own exception, then a broken connection to a failed peer,
    then SIGTERM (the agent stopping the survivors)."""
    if failure.exitcode < 0:
        return 3 if signal_name == "SIGTERM" else 0
    return 2 if _PEER_ERRORS.search(failure.message) else 1


def _failures(error: Any) -> list[WorkerFailure]:
    """Turn the elastic agent's ChildFailedError into `WorkerFailure`s, root cause first (see
    `_blame`; among equals the earliest, then the lowest rank): the peers of a failed worker
    often report their broken connections before it reports its own error."""
    out = []
    for rank, failure in error.failures.items():
        data, tb = failure.message, ""
        if isinstance(data, dict):  # the worker's error file: message + traceback
            tb = str(data.get("extraInfo", {}).get("py_callstack", ""))
            data = data.get("message", "")
        lines = [ln for ln in str(data or "").strip().splitlines() if ln.strip()]
        if failure.exitcode < 0:
            message = f"was killed by signal {failure.signal_name()}"
        elif lines and tb:
            message = f"failed: {lines[-1].strip()}"
        else:
            message = f"exited with status {failure.exitcode}"
        found = WorkerFailure(rank, failure.exitcode, message, tb)
        signal_name = failure.signal_name() if failure.exitcode < 0 else ""
        out.append((_blame(found, signal_name), failure.timestamp, rank, found))
    out.sort(key=lambda item: item[:3])
    return [item[3] for item in out]
