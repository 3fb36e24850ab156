"""Start a job's workers on this machine with torch's elastic launcher, and name why one failed.

`launch_local` runs X·Y·Z worker processes (a static rendezvous listening on 127.0.0.1 only, a
free port, a secret of the job's own handed to its workers); when a
worker raises or dies, the agent stops the others and `LocalJobFailed` names the root cause
first (a killed worker before its peers' broken connections).
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import multiprocessing.forkserver
import multiprocessing.util
import os
import re
import signal
import socket
import sys
import tempfile
import threading
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from plexus_partition.launch.env import use_cuda
from plexus_partition.launch.lifeline import Lifeline
from plexus_partition.launch.peers import SECRET_ENV, new_secret
from .loopback import BACKEND as LOOPBACK, loopback_listener, register as register_loopback
from .progress import PROGRESS_DIR_ENV, read_progress
from plexus_datasets.base import owned
from plexus_datasets.base import gate


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
    pid: int | None = None


class LocalJobFailed(RuntimeError):
    """One or more local workers failed; ``failures[0]`` is the root cause. ``progress`` maps
    each rank to the collectives it had entered (see `plexus.runtime.progress`)."""

    def __init__(self, failures: list[WorkerFailure],
                 progress: dict[int, int] | None = None) -> None:
        self.failures = failures
        self.progress = dict(progress or {})
        first = failures[0]
        more = f" ({len(failures) - 1} more failed after it)" if len(failures) > 1 else ""
        pid = f" (pid {first.pid})" if first.pid else ""
        super().__init__(f"worker rank {first.rank} {first.message}{pid}{more}")


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


def _start_method(entrypoint: Callable[..., Any], fork: bool) -> str:
    """How local workers are started.

    Importing torch costs each worker seconds of CPU. Where the caller says it is safe
    (``fork``: one torch thread per worker, so no worker enters an OpenMP region that a fork
    would leave broken), CPU workers are forked from this process, which has imported torch and
    the entry point already: they start with nothing to import. Otherwise they are forked from a
    fork server that has imported torch and the entry point's module once (not torch._dynamo:
    `plexus.engine.optim`'s optimizers never import it), a fresh single-threaded process.
    With CUDA, spawn: a CUDA context never crosses a fork.
    """
    if use_cuda():
        return "spawn"
    if fork and "fork" in mp.get_all_start_methods():
        return "fork"
    if "forkserver" not in mp.get_all_start_methods():
        return "spawn"
    preload_forkserver([entrypoint.__module__])
    return "forkserver"


def preload_forkserver(modules: list[str]) -> None:
    """What the fork server imports once when it starts: torch, the start-up hook
    (`plexus.runtime.bootstrap`) and ``modules``. One server per process, whoever starts it
    (a launch, `plexus.runtime.world.run_world`); a worker imports what it lacks itself."""
    mp.set_forkserver_preload(["torch", "plexus.runtime.bootstrap", *modules])


def start_forkserver() -> None:
    """Start the fork server with SIGINT ignored: it imports torch first (seconds), and a
    Ctrl-C then would print its traceback; the launcher handles the interrupt alone. The
    workers it forks take SIGINT back (`_worker`)."""
    if threading.current_thread() is not threading.main_thread():
        return  # signal dispositions belong to the main thread; the server starts on demand
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        multiprocessing.forkserver.ensure_running()
    finally:
        signal.signal(signal.SIGINT, previous)


@contextmanager
def _temporary_files_in(directory: str) -> Iterator[None]:
    """Make this process's temporary files go to ``directory`` for a while: torch's process
    starter leaves one ``pytorch-errorfile-*.pickle`` in the temporary directory for every worker
    that raised, and never removes it; in the job's directory it goes with the job."""
    saved = tempfile.tempdir
    tempfile.tempdir = directory
    try:
        yield
    finally:
        tempfile.tempdir = saved


#: How long a forked worker waits for the launcher to fork the last of its peers.
FORKED_PEERS_TIMEOUT_S = 120.0


class LaunchInterrupted(SystemExit):
    """The launcher got a signal (Ctrl-C, SIGTERM) and stopped its workers; ``message`` says so
    in one line (the caller prints it, named as its tool); the exit status is 128 + the
    signal's number, as a shell reports a signal."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(code)
        self.message = message


class WorkerStartError(RuntimeError):
    """A forked worker's peers were not all started in time (the launcher stalled or died)."""


def _worker(lifeline: Lifeline, progress_dir: str, forked: Any, secret: str,
            entrypoint: Callable[..., Any], *args: Any) -> Any:
    """What a local worker runs: first tie its life to the launcher's, then the entry point.

    SIGINT ends a worker at once, by the signal: the launcher then names it ("worker rank 1
    (pid N) was killed by signal SIGINT") rather than a peer's broken connection, and no
    traceback is printed (Ctrl-C reaches every process of the job).

    ``forked`` (workers forked from the launcher): a barrier of all the workers, passed before
    any of them joins the job. A worker joining connects to the agent's store, whose thread
    then takes glibc's resolver lock (getnameinfo); a worker forked at that moment inherited
    the lock taken and blocked on it forever (1 start of 40 of a 2x2x2 job hung). No worker
    connects until the last one is forked.

    ``secret``: the job's secret, which the launcher made (`plexus_partition.launch.peers`): a
    worker proves it before any tensor moves (handed over with the arguments, never on a
    command line or in the launcher's environment)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        if callable(signal.getsignal(sig)):  # the agent's handler, inherited by a fork
            signal.signal(sig, signal.SIG_DFL)
    lifeline.hold()  # first: a launcher that dies while this worker waits below ends it
    if forked is not None:
        try:
            forked.wait(FORKED_PEERS_TIMEOUT_S)
        except threading.BrokenBarrierError:
            raise WorkerStartError(f"the launcher did not start every worker within "
                                   f"{FORKED_PEERS_TIMEOUT_S:g} s") from None
    os.environ[PROGRESS_DIR_ENV] = progress_dir
    os.environ[SECRET_ENV] = secret  # the job's own secret, proved to rank 0 (`peers`)
    return entrypoint(*args)


def launch_local(nprocs: int, entrypoint: Callable[..., Any], *args: Any,
                 fork: bool = False) -> list[Any]:
    """Run ``entrypoint(*args)`` in ``nprocs`` local worker processes that form one job.

    Returns the workers' return values in rank order. Raises `LocalJobFailed` when a worker
    raises or dies; the elastic agent then stops all the others, so a failure never leaves the
    job hanging. Workers end (and remove the job's temporary files) when this process dies,
    even by SIGKILL (`plexus_partition.launch.lifeline`). ``fork``: every worker runs one torch
    thread, so CPU workers may be forked from this process (`_start_method`).
    """
    from torch.distributed.elastic.multiprocessing.api import DefaultLogsSpecs  # noqa: PLC0415
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError  # noqa: PLC0415
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch  # noqa: PLC0415

    if getattr(mp.current_process(), "_inheriting", False):
        # a worker importing the user's script again, which called the launch at its top level
        # (no ``if __name__ == "__main__":`` guard): starting workers here would recurse
        print("plexus: error: a worker process imported your script and reached its call to "
              "plexus.launch again; put that call under if __name__ == \"__main__\":",
              file=sys.stderr, flush=True)
        raise SystemExit(2)
    _quiet_elastic_logs()
    start_method = _start_method(entrypoint, fork)
    if start_method == "forkserver":
        start_forkserver()
    for stream in (sys.stdout, sys.stderr):  # our own lines first, then the workers'
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):  # closed or full: nothing to order
            pass
    # multiprocessing's own directory (the fork server's socket), made now so that it stays
    # where it is; a killed launcher's workers remove it with the job's directory.
    mp_dir = multiprocessing.util.get_temp_dir()
    log_dir = str(gate.temp_folder(None, "plexus-launch-"))
    progress_dir = os.path.join(log_dir, "progress")
    gate.make_folder(progress_dir)
    lifeline = Lifeline(os.getpid(), (log_dir, mp_dir))
    forked = mp.get_context("fork").Barrier(nprocs) if start_method == "fork" else None
    register_loopback()
    try:
        with loopback_listener() as (port, listen_fd):
            config = LaunchConfig(
                min_nodes=1, max_nodes=1, nproc_per_node=nprocs,
                run_id=f"plexus-{uuid.uuid4().hex[:12]}",
                # one node: the static rendezvous (a TCP store, no more; the dynamic one records
                # events with inspect.stack(), seconds of a small job's start), its store on
                # 127.0.0.1 only (`plexus.runtime.loopback`)
                rdzv_backend=LOOPBACK, rdzv_configs={"rank": 0, "listen_fd": listen_fd},
                rdzv_endpoint=f"127.0.0.1:{port}",
                local_addr="127.0.0.1",
                max_restarts=0,  # a failed worker fails the job: training is not elastic
                monitor_interval=0.1,
                start_method=start_method,
                # Workers inherit our stdout/stderr (rank 0's progress bar sees the terminal); the
                # directory only holds the agent's error files and disappears with the job.
                logs_specs=DefaultLogsSpecs(log_dir=log_dir))
            try:
                with _temporary_files_in(log_dir):
                    results = elastic_launch(config, _worker)(lifeline, progress_dir, forked,
                                                              new_secret(), entrypoint, *args)
            except ChildFailedError as e:
                raise LocalJobFailed(_failures(e), read_progress(progress_dir)) from None
            except Exception as e:  # noqa: BLE001 — a signal, however it surfaced, or re-raised
                sigval = signal_of(e)
                if sigval is None:
                    raise
                # the agent stopped the workers: one line, no stack
                name = signal.Signals(sigval).name
                raise LaunchInterrupted(128 + int(sigval), f"stopped by {name}: the job's "
                                        f"{nprocs} workers were stopped with it") from None
    finally:
        owned.remove_tree(log_dir, quiet=True)
    return [results[r] for r in range(nprocs)]


def signal_of(error: BaseException) -> int | None:
    """The signal number of the elastic agent's SignalException that ``error`` is or was raised
    while handling, else None. A signal landing inside torch's metrics wrapper before
    its start time is set surfaces as that wrapper's UnboundLocalError, the SignalException its
    context: still the signal's one line, not a traceback."""
    from torch.distributed.elastic.multiprocessing.api import SignalException  # noqa: PLC0415

    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, SignalException):
            return int(seen.sigval)
        seen = seen.__context__
    return None


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
        found = WorkerFailure(rank, failure.exitcode, message, tb,
                              getattr(failure, "pid", None) or None)
        signal_name = failure.signal_name() if failure.exitcode < 0 else ""
        out.append((_blame(found, signal_name), failure.timestamp, rank, found))
    out.sort(key=lambda item: item[:3])
    return [item[3] for item in out]
