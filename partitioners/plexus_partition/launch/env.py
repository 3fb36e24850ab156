"""Where this process runs: which launcher started it, its rank, and the devices it may use.

Three ways to run a Plexus job:
- on its own: the job starts its local workers itself (`plexus.runtime.local.launch_local`);
- under torchrun (or any launcher exporting RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR): each process
  is one rank of the job it is in;
- under srun (SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID): the same, with MASTER_ADDR (and optionally
  MASTER_PORT, default 29500) exported by the batch script.

Workers use GPUs (NCCL) when CUDA is available and the CPU (gloo) otherwise; nothing else differs.

Detecting the launcher reads environment variables only: torch is imported by the functions
that ask about devices, so the partitioner finds its place in a job without torch
(`tests/partitioners/test_partitioner_without_torch.py`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping

if TYPE_CHECKING:
    import torch

from plexus_partition.model.bounds import BOUNDS, MAX_THREADS, BoundError, check_bound, env_number

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


def _int(environ: Mapping[str, str], name: str, default: int | None = None) -> int:
    """The launcher variable ``name`` as an integer within the one table of bounds
    (`plexus_partition.model.bounds.BOUNDS`), ``default`` when unset; `LaunchError` otherwise."""
    if name not in environ and default is not None:
        return default
    try:
        value = env_number(environ, name)
    except BoundError as e:
        raise LaunchError(str(e)) from None
    if value is None:
        raise LaunchError(f"environment variable {name} is empty; unset it or give "
                          f"{BOUNDS[name].describe()}")
    return value


def _check_place(kind: str, rank: int, world: int, local_rank: int, local_world: int,
                 names: tuple[str, str, str, str]) -> None:
    """A rank inside its world (and a local rank inside its node's), refused up front: a rank
    past the world waits for peers that never come."""
    if rank >= world:
        raise LaunchError(f"{names[0]}={rank} is not a rank of a job of {names[1]}={world} "
                          f"ranks (0..{world - 1}); the {kind} environment is inconsistent")
    if local_rank >= local_world or local_world > world:
        raise LaunchError(f"{names[2]}={local_rank} with {names[3]}={local_world} in a job of "
                          f"{world} ranks is inconsistent; the {kind} environment is wrong")


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
        local_world = _int(env, "LOCAL_WORLD_SIZE", world)
        if "MASTER_ADDR" not in env:
            raise LaunchError("RANK and WORLD_SIZE are set but MASTER_ADDR is not; start the job "
                              "with torchrun or export MASTER_ADDR and MASTER_PORT")
        job = JobEnv("torchrun", _int(env, "RANK"), world, _int(env, "LOCAL_RANK", 0),
                     local_world, env["MASTER_ADDR"], _int(env, "MASTER_PORT", DEFAULT_MASTER_PORT))
        _check_place("torchrun", job.rank, world, job.local_rank, local_world,
                     ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"))
        return job
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
                node_tasks = slurm_tasks_on_node(env[key], _int(env, "SLURM_NODEID", 0))
                if node_tasks:
                    break
        if not node_tasks:  # fall back to an even spread over the step's nodes
            nodes = _int(env, "SLURM_STEP_NUM_NODES", _int(env, "SLURM_NNODES", 1))
            node_tasks = -(-world // max(nodes, 1))
        node_tasks = min(node_tasks, world)
        job = JobEnv("slurm", _int(env, "SLURM_PROCID"), world, _int(env, "SLURM_LOCALID", 0),
                     node_tasks, env["MASTER_ADDR"], _int(env, "MASTER_PORT", DEFAULT_MASTER_PORT))
        _check_place("srun", job.rank, world, job.local_rank, node_tasks,
                     ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "tasks on this node"))
        return job
    return None


def available_cores() -> int:
    """CPU cores this process may run on (its affinity mask where the OS reports one)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def crowded_core(local_rank: int, local_ranks: int, cores: list[int]) -> int | None:
    """The one core of ``cores`` (this machine's, in order) a local rank is bound to when the
    machine's ``local_ranks`` outnumber them, or None when they do not (the OS places ranks
    that have a core each, and two jobs on one machine keep spreading). Round robin: ranks next
    to each other, a ring's neighbours, sit on different cores, so a collective's hops run side by
    side rather than in turns, and a rank that waits leaves its core to a rank of the same core
    instead of being moved (an 8-rank gloo all-reduce on 2 cores: 21 ms unbound, 16 ms with
    ranks in blocks, 9.6 ms round robin; DEVELOPERS.md). `plexus.runtime.world.run_world` binds
    only when asked (``bind``): bound ranks cannot move away from another job's process."""
    if local_ranks <= len(cores):
        return None
    return cores[local_rank % len(cores)]


def bind_crowded_rank(local_rank: int, local_ranks: int) -> int | None:
    """Bind this process to its `crowded_core`: every thread it has (importing torch starts
    some) and, called before the process group, the threads it starts later (they inherit the
    mask). The core, or None (left to the OS)."""
    try:
        cores = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # no affinity masks on this OS: nothing to bind
        return None
    core = crowded_core(local_rank, local_ranks, cores)
    if core is not None:
        try:
            threads = [int(tid) for tid in os.listdir("/proc/self/task")]
        except OSError:  # no /proc: the calling thread, which the later ones copy
            threads = [0]
        for tid in threads:
            try:
                os.sched_setaffinity(tid, {core})
            except ProcessLookupError:  # a thread that ended since the listing
                pass
    return core


#: The variable OpenMP, BLAS and torch read for their thread count; a user's value is kept.
THREADS_ENV = "OMP_NUM_THREADS"


def env_threads(environ: Mapping[str, str] | None = None) -> int | None:
    """The thread count ``OMP_NUM_THREADS`` asks for (None: unset or empty); `LaunchError` for
    a value that is no integer within the table's bounds (`plexus_partition.model.bounds`). OpenMP's
    nested form ("4,2") counts its first level."""
    env = os.environ if environ is None else environ
    text = env.get(THREADS_ENV, "").strip()
    if not text:
        return None
    try:
        return env_number({THREADS_ENV: text.split(",")[0]}, THREADS_ENV)
    except BoundError:
        raise LaunchError(f"environment variable {THREADS_ENV}={text[:40]!r} is not a positive "
                          f"integer (at most {MAX_THREADS}); unset it or give a thread count "
                          "such as 1") from None


def threads_per_worker(local_workers: int, cores: int | None = None,
                       requested: int | None = None,
                       environ: Mapping[str, str] | None = None) -> int:
    """Torch threads for each of ``local_workers`` processes sharing this node's cores: what the
    user asked for (``requested``, e.g. ``--threads``; within `plexus_partition.model.bounds`'s
    table), else ``OMP_NUM_THREADS``, else an even share of the cores (at least one)."""
    if requested is not None:
        try:
            return check_bound("threads", requested, "threads per rank")
        except BoundError as e:
            raise LaunchError(str(e)) from None
    asked = env_threads(environ)
    if asked is not None:
        return asked
    return max(1, (cores if cores is not None else available_cores()) // max(1, local_workers))


#: The devices a job may be asked to run on (None: a GPU where CUDA is available, else the CPU).
DEVICES = ("cpu", "cuda")


def use_cuda(device: str | None = None) -> bool:
    """Whether workers run on GPUs (NCCL) rather than CPUs (gloo): as ``device`` asks ("cpu"
    or "cuda"; `LaunchError` when CUDA is asked for and this machine has none), or, for None,
    wherever CUDA is available."""
    import torch  # noqa: PLC0415 (devices only: launcher detection needs no torch)

    if device is None:
        return torch.cuda.is_available()
    if device not in DEVICES:
        raise LaunchError(f"device {device!r}: expected one of {', '.join(DEVICES)}")
    if device == "cuda" and not torch.cuda.is_available():
        why = ("this torch is a CPU build" if torch.version.cuda is None
               else "no GPU is visible (CUDA_VISIBLE_DEVICES, drivers)")
        raise LaunchError(f"device cuda asked for, but CUDA is not available: {why}; run on the "
                          "CPU (device cpu) or install a CUDA build of torch")
    return device == "cuda"


def ranks_per_gpu(local_workers: int) -> int:
    """How many of a node's ``local_workers`` ranks share each GPU: one each where there are
    enough GPUs (NCCL), else as few per GPU as cover them all (gloo, through host memory:
    `plexus.engine.comm.staged`), so a one-GPU workstation runs every grid."""
    import torch  # noqa: PLC0415 (devices only: launcher detection needs no torch)

    gpus = torch.cuda.device_count()
    return max(1, -(-local_workers // gpus)) if gpus else 1


def gpu_backend(local_workers: int) -> str:
    """The collective backend of ``local_workers`` ranks per node on GPUs: NCCL with a GPU per
    rank, gloo where ranks share GPUs."""
    return "nccl" if ranks_per_gpu(local_workers) == 1 else "gloo"


def check_local_devices(local_workers: int, device: str | None = None) -> None:
    """Workers on GPUs need at least one visible GPU (several ranks may share one)."""
    import torch  # noqa: PLC0415 (devices only: launcher detection needs no torch)

    if use_cuda(device) and local_workers > 0 and torch.cuda.device_count() < 1:
        raise LaunchError("no GPU is visible on this node; hide nothing (CUDA_VISIBLE_DEVICES) "
                          "or run on the CPU (device cpu)")


def default_device(device: str | None = None) -> torch.device:
    """The device a rank of this machine runs on: ``device`` as `use_cuda` reads it; for None a
    GPU if CUDA is available (each local rank then takes ``cuda:LOCAL_RANK``), else the CPU."""
    import torch  # noqa: PLC0415 (devices only: launcher detection needs no torch)

    return torch.device("cuda" if use_cuda(device) else "cpu")


def local_world_size(device: str | None = None) -> int:
    """How many ranks a job started on this machine alone runs when nobody said: one per GPU
    where the workers use CUDA (`use_cuda`), else one per CPU core this process may use."""
    import torch  # noqa: PLC0415 (devices only: launcher detection needs no torch)

    return torch.cuda.device_count() if use_cuda(device) else available_cores()
