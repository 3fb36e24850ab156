"""Running the partitioner's phases on several processes, with the launchers there already.

- `PoolRunner`: ``plexus-partition --jobs N`` on one machine: a pool of N worker processes
  (``concurrent.futures``) takes the tasks of each phase as they come; a worker that dies (a
  signal, the OOM killer) ends the run with an error, and workers die with the launching process
  (``kill -9`` included) rather than write on behind a rerun.
- `GroupRunner`: the same command under torchrun or srun: every process is one rank (from the
  variables the launcher sets, `plexus_partition.launch.env`) and takes the tasks whose index is its
  rank modulo the world size, on a filesystem all ranks share; a barrier of a gloo process group
  closes each phase, and steps that run once (the permutation, the manifest) run on rank 0.

Both read every task's result from the marker its process wrote (`plexus_datasets.work`), so a
rerun after a crash skips what was finished, whichever process finished it.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from concurrent.futures import FIRST_EXCEPTION, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable, Sequence

from threadpoolctl import threadpool_limits

from plexus_datasets.base.tasks import marker_path, run_task
from plexus_datasets.work import Runner

from .streamjob import PartitionError, PartitionInterrupted


def _start_worker() -> None:
    from plexus_partition.launch.lifeline import set_parent_death_signal  # noqa: PLC0415

    set_parent_death_signal()
    # N workers already keep N cores busy: BLAS threads on top of them only wait on each other
    # (R-MAT's projection, a small matmul per task, ran 6.7x slower with two of each)
    threadpool_limits(1)


class PoolRunner(Runner):
    """Tasks of each phase spread over ``jobs`` worker processes of this machine."""

    def __init__(self, work: str | os.PathLike, jobs: int, progress: bool | None = None) -> None:
        super().__init__(work, progress)
        self.width = int(jobs)
        # fork: the workers start now, before any progress bar's thread, as children of this
        # process (so that the parent-death signal reaches them)
        self._pool = ProcessPoolExecutor(max_workers=self.width, mp_context=mp.get_context("fork"),
                                         initializer=_start_worker)
        self._pool.submit(os.getpid).result()

    def _execute(self, fn: Callable[..., Any], tasks: Sequence[Sequence[Any]], todo: list[int],
                 phase: str, done: Callable[[int], None]) -> None:
        futures = {self._pool.submit(run_task, str(marker_path(self.work, phase, i)), fn,
                                     tasks[i]): i for i in todo}
        pending = set(futures)
        try:
            while pending:
                finished, pending = wait(pending, return_when=FIRST_EXCEPTION)
                for fut in finished:
                    fut.result()
                    done(futures[fut])
        except BrokenProcessPool:
            raise PartitionInterrupted(f"a worker process died during phase {phase} (killed, or "
                                       "out of memory: try fewer --jobs); run the same command "
                                       "again to resume") from None
        finally:
            for fut in pending:
                fut.cancel()
            # running tasks finish before an error propagates: none writes behind a clean-up
            wait(pending)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


class GroupRunner(Runner):
    """Tasks of each phase shared among the ranks of a torchrun/srun job (``env``: this
    process's `plexus_partition.launch.env.JobEnv`); ``timeout_s`` bounds how long a rank waits for
    the others at the end of a phase."""

    def __init__(self, work: str | os.PathLike, env: Any, timeout_s: float,
                 progress: bool | None = None) -> None:
        super().__init__(work, progress)
        try:
            import torch.distributed as dist  # noqa: PLC0415

            from plexus_partition.launch.group import init_process_group  # noqa: PLC0415
        except ImportError:  # the partitioner project installed alone, started by srun
            raise PartitionError(
                f"this is rank {env.rank} of {env.world_size} of a torchrun/srun job, and joining "
                "their group needs torch, which this environment lacks: install torch, or run "
                "plexus-partition as one process (--jobs N uses N processes of this machine)"
            ) from None

        self._dist = dist
        init_process_group(env, timeout_s, cpu=True)
        self.width = env.world_size
        self.rank = env.rank
        self.leader = env.rank == 0
        self._timeout = timedelta(seconds=timeout_s)

    def _execute(self, fn: Callable[..., Any], tasks: Sequence[Sequence[Any]], todo: list[int],
                 phase: str, done: Callable[[int], None]) -> None:
        for i in todo:
            if i % self.width == self.rank:
                run_task(str(marker_path(self.work, phase, i)), fn, tasks[i])
                done(i)
        self._dist.monitored_barrier(timeout=self._timeout, wait_all_ranks=True)
        missing = [i for i in todo if not marker_path(self.work, phase, i).exists()]
        if missing:
            raise PartitionError(f"phase {phase}: tasks {missing[:5]} have no result after every "
                                 f"rank finished; is {Path(self.work)} on a filesystem all "
                                 "ranks share?")

    def _sync(self) -> None:
        self._dist.monitored_barrier(timeout=self._timeout, wait_all_ranks=True)

    def close(self) -> None:
        if self._dist.is_initialized():
            self._dist.destroy_process_group()


def launcher_env() -> Any:
    """This process's place in a torchrun/srun job, or None when it runs on its own."""
    from plexus_partition.launch.env import detect_environment  # noqa: PLC0415 (imports torch)

    env = detect_environment()
    return env if env is not None and env.world_size > 1 else None


def launched() -> bool:
    """Whether a launcher may have started this process (cheap, so that torch is imported only
    then; `launcher_env` decides)."""
    return "RANK" in os.environ or os.environ.get("SLURM_NTASKS", "1") != "1"
