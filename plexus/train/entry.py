"""The entry points of a ``plexus-train`` job: what each rank runs from joining the process
group to the summary (`run_rank`), and how the launching process starts local workers and turns
their failures into one line (`run_local`, `run_single`)."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
import traceback
from dataclasses import replace

import torch
import torch.distributed as dist

from plexus.core.timing import process_start_time
from plexus_partition.launch.env import JobEnv, LaunchError, detect_environment, threads_per_worker
from plexus_partition.launch.group import init_process_group
from plexus_partition.launch.hostmem import enable_huge_pages
from plexus.runtime.progress import lagging_rank
from plexus.runtime.local import (PEER_ERROR_GRACE_S, LaunchInterrupted, LocalJobFailed,
                                  free_port, is_peer_error, launch_local)

from .cache import join_cached_store
from .errors import PROG, OutputFailed, RunStopped, error_line
from .jobfacts import JobFacts
from .peercheck import check_peers
from .plan import ResolvedRun, RunRequest
from .prepare import LocalSetup, agree_on_failure, load_local
from .resolve import resolved_by_rank_0
from .report import finish
from .runlog import console_line
from .session import build_run


def reserve_standard_fds() -> None:
    """Open /dev/null on stdin, stdout or stderr where it is closed (``>&-``): otherwise the next
    file or socket this process (or a worker) opens gets that number, and whatever is meant for
    the console lands in it. Python has already set the closed stream to None, and the run
    reports to it as to a lost console."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)


def run_rank(plan: RunRequest, env: JobEnv, facts: JobFacts = JobFacts(), *,
             join_failure_ends_job: bool = False) -> int:
    """Everything one rank does, from joining the job to the summary; returns the exit status.

    ``plan``: the `ResolvedRun` the launching process resolved, or the `RunRequest` rank 0
    resolves once the ranks have joined (under torchrun/srun; a big graph the launching
    process did not load), every rank receiving the run. ``facts``: what the launching process
    knows beside it (`JobFacts`: when the command started, the cache's store, a test's fault).

    ``join_failure_ends_job``: a rank that cannot join the job ends its process with status 2
    instead of returning it (`local_worker`: the local launcher waits for every worker's
    return value, so peers stuck in the rendezvous would otherwise hold the job forever)."""
    started = time.perf_counter()
    # start-up: from the command's start (or this rank's own, under torchrun/srun) to here
    origin = facts.launched_at or process_start_time()
    startup_s = max(time.time() - origin, 0.0) if origin is not None else 0.0
    if plan.engine.huge_pages:
        enable_huge_pages()  # before this process's first CPU tensor
    try:
        device = init_process_group(env, plan.timeout_s, device=plan.device,
                                    threads=plan.threads)
        check_peers(plan, env)  # the job's secret and this run, proved before a tensor moves
        joined = time.perf_counter()
    except LaunchError as e:  # e.g. a local rank without a GPU: the same on every such rank
        print(error_line(f"rank {env.rank}: {e}"), file=sys.stderr, flush=True)
        if join_failure_ends_job:  # no peer to agree with: the launcher stops the others
            raise SystemExit(2) from None
        return 2
    error: BaseException | None = None
    setup = None
    hold = None  # rank 0's hold on the cached store against eviction, for the whole run
    try:
        graph = None
        if not isinstance(plan, ResolvedRun):  # rank 0 resolves it; every rank receives it
            if plan.uses_cache(dist.get_world_size()):
                # launched by torchrun/srun: rank 0 provides the store (no launcher of ours did)
                (plan, cached), hold = join_cached_store(
                    plan, lambda text: None if plan.quiet else console_line(f"{PROG}: {text}"))
                facts = replace(facts, cache=cached)
            found = resolved_by_rank_0(plan, env.local_world_size)
            plan, graph = found.run, found.graph
        setup = load_local(plan, dist.get_rank(), dist.get_world_size(), device,
                           env.local_world_size, graph, cached=facts.cache is not None)
    except Exception as e:  # noqa: BLE001 — every rank must learn of it, see agree_on_failure
        error = e
    graph = None  # the shard is cut: the whole graph may go
    # where this rank's set-up went, for the summary: the process group, its shard (the store
    # opened and read, or the graph cut), then the model (`_train`)
    phases = {"process_group_s": joined - started, "load_s": time.perf_counter() - joined}
    try:
        return _train(plan, facts, setup, error, device, started, startup_s, phases)
    finally:
        if setup is not None:
            setup.release()  # the checkpoint directory's lock, on every path out
        if hold is not None:
            hold.release()


def _train(plan: RunRequest, facts: JobFacts, setup: LocalSetup | None,
           error: BaseException | None,
           device: torch.device, started: float, startup_s: float,
           phases: dict[str, float]) -> int:
    """Agree on set-up failures, then train (the second half of `run_rank`, which began at
    ``started``, ``startup_s`` after the command)."""
    code = agree_on_failure(error, device)
    if code:
        if setup is not None and setup.json_log is not None:
            setup.json_log.discard()
        for sink in setup.sinks if setup is not None else ():
            getattr(sink, "discard", sink.close)()  # the run never started
        dist.destroy_process_group()
        return code
    assert setup is not None and isinstance(plan, ResolvedRun)
    built = time.perf_counter()
    run = build_run(plan, setup, device, facts)
    try:
        start = time.perf_counter()
        phases["build_s"] = start - built
        with run.tracker or contextlib.nullcontext():
            history = run.trainer.fit(callback=run.on_epoch)
        run.agree(None)  # an output the last epoch could not write stops every rank here
        finish(run, history, time.perf_counter() - start, setup_s=start - started,
               startup_s=startup_s, phases=phases)
    except RunStopped as e:  # on every rank at the same epoch (or rank 0 alone, after the last
        if run.log is not None:  # collective): a clean stop, one line
            run.log.abandon(discard=isinstance(e, OutputFailed))
            print(error_line(e), file=sys.stderr, flush=True)
        dist.destroy_process_group()
        return 1
    except BaseException as e:
        # Other ranks may be waiting in a collective: leave without tearing the group down; the
        # launcher ends them when this process exits with an error.
        if run.log is not None:
            run.log.abandon()
        if is_peer_error(e):  # let the launcher see the peer's failure first: it is the cause
            time.sleep(PEER_ERROR_GRACE_S)
        raise
    dist.destroy_process_group()
    return 0


def local_worker(plan: RunRequest, facts: JobFacts) -> int:
    """Entry point of a worker started by `launch_local` (torchrun-style environment; it has
    already tied its life to the launcher's)."""
    env = detect_environment()
    if env is None:
        raise LaunchError("worker started without RANK/WORLD_SIZE in its environment")
    return run_rank(plan, env, facts, join_failure_ends_job=True)


def run_local(plan: RunRequest, facts: JobFacts = JobFacts()) -> int:
    """Start X·Y·Z local workers and wait for them; the job's exit status. ``plan``: resolved,
    or the request every worker resolves (its grid given); ``facts``: handed to every worker."""
    assert plan.grid is not None
    nprocs = plan.grid.world_size
    if nprocs == 1:
        return run_single(plan, facts)
    try:
        # one thread per worker (ranks at least the cores, the usual case): forked from this
        # process, which has imported everything a worker needs
        codes = launch_local(nprocs, local_worker, plan, facts,
                             fork=threads_per_worker(nprocs, requested=plan.threads) == 1)
    except LocalJobFailed as e:
        root = e.failures[0]
        if root.exitcode == 2 and not root.traceback:  # a rank that could not join: it said why
            return 2
        if "timed out" in root.message.lower():  # not a bug: a peer stopped answering
            stuck = lagging_rank(e.progress, nprocs)
            which = ("" if stuck is None else
                     f"; rank {stuck} is the stuck one (it stopped after "
                     f"{e.progress[stuck]} collectives, its peers went on)")
            print(error_line(f"{e}; a collective waited longer than --timeout "
                             f"{plan.timeout_s:g} s: a peer is stuck or dead{which}"),
                  file=sys.stderr, flush=True)
            return 1
        if root.traceback:  # a bug or a crash inside the worker: show where
            print(root.traceback.rstrip(), file=sys.stderr)
        print(error_line(e), file=sys.stderr, flush=True)
        return 1
    except LaunchInterrupted as e:  # the agent stopped the workers on a signal: one line
        print(error_line(e.message), file=sys.stderr, flush=True)
        return int(e.code)
    except KeyboardInterrupt:  # before the agent took over the signal (starting the workers)
        print(error_line(f"the launcher (pid {os.getpid()}) was interrupted (SIGINT) while "
                         "starting the workers; the job stopped"), file=sys.stderr, flush=True)
        return 128 + signal.SIGINT
    except Exception as e:  # noqa: BLE001 — the agent's signal exception, rendezvous failures
        signum = getattr(e, "sigval", None)
        if signum is not None:  # the launcher was told to stop (SIGTERM from a scheduler, ...)
            print(error_line(f"the launcher (pid {os.getpid()}) was stopped by signal "
                             f"{signal.Signals(int(signum)).name}; its workers were ended"),
                  file=sys.stderr, flush=True)
            return 128 + int(signum)
        raise
    return max((int(c or 0) for c in codes), default=0)


def run_single(plan: RunRequest, facts: JobFacts = JobFacts()) -> int:
    """A one-rank job runs in this process: a worker process would only add start-up time."""
    env = JobEnv("single", 0, 1, 0, 1, "127.0.0.1", free_port())
    try:
        return run_rank(plan, env, facts)
    except KeyboardInterrupt:
        print(error_line(f"interrupted (SIGINT) (pid {os.getpid()}); the job stopped"),
              file=sys.stderr, flush=True)
        return 128 + signal.SIGINT
    except Exception as e:  # noqa: BLE001 — a bug: show where, then the usual one line
        traceback.print_exc()
        print(error_line(f"{type(e).__name__}: {e}"), file=sys.stderr, flush=True)
        return 1
