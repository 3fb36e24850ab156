"""Out-of-core work as phases of independent tasks, each run once, resumable after a crash.

A phase is a list of tasks (a top-level function and its arguments); every task reads and writes
files under a work directory and returns a small JSON-able result. When a task has finished, the
process that ran it writes its result as a marker file (written beside, then renamed: a task
killed half-way leaves no marker), so a rerun after ``kill -9`` skips finished tasks and redoes
the rest; tasks therefore write their outputs under fixed names, replacing what a killed attempt
left. `Runner` runs tasks in this process; `plexus_partition.jobs` spreads them over a local
process pool (``--jobs``) or over the ranks of a torchrun/srun job. Every phase shows a tqdm
progress bar in ``unit``/s and is timed (`Runner.timings`). Nothing here knows what the tasks
do: the datasets' converters and the partitioner both run on it (`plexus_datasets.work`).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from tqdm import tqdm

from .values import ErrorType
from . import owned
from . import gate


@dataclass(frozen=True)
class PhaseTime:
    """How long a phase took in this run and how much it processed (its tasks' weights)."""

    phase: str
    seconds: float
    amount: int
    unit: str
    tasks_run: int
    tasks: int
    peak_rss: int = 0  # bytes, sampled in this process (not its workers) during the phase

    @property
    def rate(self) -> float:
        return self.amount / self.seconds if self.seconds > 0 else 0.0


def marker_path(work: Path, phase: str, index: int) -> Path:
    return work / "done" / phase / f"{index:06d}.json"


#: the key of a task's result that lists inputs only it read (see `run_task`)
CONSUMED = "consumed"


#: Format of a marker file: the task's result and the sha256 of its JSON text
MARKER_FORMAT = "plexus-task-1"
#: A marker holds a task's small result; anything far larger is not one
MAX_MARKER_BYTES = 16 << 20


class MarkerError(ValueError):
    """A marker file that this code did not write as it is (edited, truncated, planted); one
    line naming it. A user of the runner may raise its own subclass (`Runner.error`)."""


def result_sha256(text: str) -> str:
    """The sha256 a marker records of its result's JSON text."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def run_task(marker: str, fn: Callable[..., Any], args: Sequence[Any]) -> Any:
    """Run one task and record its result in ``marker`` (module level: pools pickle it).

    A task whose result (a dict) lists paths under `CONSUMED` (inputs no other task reads) has
    them removed once its marker is written: a rerun never runs it again, so never needs them,
    and their pages leave the cache while the phase runs (the next tasks' files reuse them)."""
    result = fn(*args)
    consumed = result.pop(CONSUMED, ()) if isinstance(result, dict) else ()
    path = Path(marker)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    text = json.dumps(result, sort_keys=True)
    gate.save_text(tmp, json.dumps({"format": MARKER_FORMAT, "sha256": result_sha256(text),
                                     "result": text}))
    owned.replace_file(tmp, path)
    for item in consumed:
        remove_task(item)
    return result


def call(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``: the task function of a phase that mixes kinds of tasks."""
    return fn(*args)


def remove_task(path: str) -> dict:
    """Remove a scratch file or folder nothing reads any more. Phases carry these as tasks after
    their own (started last: of no cost) or as a phase of their own, so that workers remove
    scratch, not the leader between phases; removing twice is harmless, so a rerun may repeat
    it."""
    target = Path(path)
    if target.is_dir():
        owned.remove_tree(target, quiet=True)
    else:
        owned.remove_file(target)
    return {}


def read_marker(path: Path, error: ErrorType = MarkerError) -> Any:
    """The result a finished task recorded in ``path``; ``error`` (one line naming the file)
    for anything `run_task` did not write as it is: the work directory is damaged."""
    def bad(why: str) -> Exception:
        return error(f"{path}: {why}, not a task marker as this partitioner wrote it "
                           "(edited or damaged); the work directory cannot be resumed")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_MARKER_BYTES:
                raise bad("not a small regular file")
            with os.fdopen(os.dup(fd), "rb") as f:
                outer = json.loads(f.read(MAX_MARKER_BYTES + 1).decode("utf-8"))
        finally:
            os.close(fd)
    except error:
        raise
    except (OSError, ValueError, RecursionError) as e:
        raise bad(f"unreadable ({type(e).__name__})") from None
    if (not isinstance(outer, dict) or outer.get("format") != MARKER_FORMAT
            or not isinstance(outer.get("result"), str)
            or outer.get("sha256") != result_sha256(outer["result"])):
        raise bad("its content does not match its sha256")
    try:
        return json.loads(outer["result"])
    except (ValueError, RecursionError):
        raise bad("unreadable result") from None


#: The record of the work directory's files as the last finished phase left them
FILES_RECORD = "files.json"


def _file_states(work: Path) -> dict[str, list[int]]:
    """Every file under ``work`` (markers aside): size, inode, change time. A file written,
    truncated, swapped or replaced changes one of them (the change time cannot be set back)."""
    states: dict[str, list[int]] = {}
    done = work / "done"
    for folder, dirs, files in os.walk(work):
        if Path(folder) == work and "done" in dirs:
            dirs.remove("done")
        for name in files:
            path = Path(folder, name)
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue
            states[str(path.relative_to(work))] = [st.st_size, st.st_ino, st.st_ctime_ns]
    del done
    return states


def record_files(work: Path) -> None:
    """Record the state of every file of ``work`` once a phase has finished (its tasks' outputs
    included), for `check_files` to compare a resumed run against."""
    record = work / "done" / FILES_RECORD
    tmp = record.with_name(f".{record.name}.{os.getpid()}.tmp")
    gate.save_text(tmp, json.dumps(_file_states(work)))
    owned.replace_file(tmp, record)


def check_files(work: Path, error: ErrorType = MarkerError) -> None:
    """``error`` naming the first file of ``work`` whose size, inode or change time differ
    from what the last finished phase recorded (edited, truncated, swapped since); files gone
    since (consumed by a later task) are not checked, files not recorded are an unfinished
    phase's, rewritten when it runs again."""
    record = work / "done" / FILES_RECORD
    if not record.exists():
        return
    recorded = read_record(record, error)
    for name, state in recorded.items():
        try:
            st = os.lstat(work / name)
        except FileNotFoundError:
            continue
        except OSError as e:
            raise error(f"{work / name}: cannot inspect it ({e.strerror or e})") from None
        if [st.st_size, st.st_ino, st.st_ctime_ns] != state:
            raise error(f"{work / name}: changed since its phase finished (size, inode or "
                              f"change time differ from {record}); the work directory cannot "
                              "be resumed")


def read_record(record: Path, error: ErrorType = MarkerError) -> dict[str, list[int]]:
    """The file states `record_files` wrote; ``error`` for anything else."""
    try:
        st = os.lstat(record)
        if not stat.S_ISREG(st.st_mode) or st.st_size > (1 << 30):
            raise ValueError("not a regular file of a sane size")
        with open(record, "rb") as f:
            data = json.loads(f.read().decode("utf-8"))
    except (OSError, ValueError, RecursionError) as e:
        raise error(f"{record}: unreadable ({type(e).__name__}); the work directory "
                          "cannot be resumed") from None
    if not isinstance(data, dict) or not all(
            isinstance(v, list) and len(v) == 3 and all(type(x) is int for x in v)
            for v in data.values()):
        raise error(f"{record}: not a record of files as this partitioner wrote it; the "
                          "work directory cannot be resumed")
    return data


def current_rss_bytes() -> int:
    """This process's resident set size now, in bytes (Linux /proc; 0 where it cannot be
    read)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


class RssSampler:
    """This process's largest resident set size while the block runs, sampled every few
    milliseconds (`current_rss_bytes`): which phase holds the memory."""

    def __init__(self, interval: float = 0.005) -> None:
        self.interval, self.peak = interval, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    current = staticmethod(current_rss_bytes)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.peak = max(self.peak, self.current())

    def __enter__(self) -> "RssSampler":
        self.peak = self.current()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.current())


class Runner:
    """Runs every phase's tasks one after another in this process."""

    #: processes working on a phase at once
    width = 1
    #: whether this process shows progress and reports (rank 0 of a launcher job)
    leader = True
    #: what a damaged work directory raises (a `MarkerError`, or a caller's subclass)
    error: ErrorType = MarkerError

    def __init__(self, work: str | os.PathLike, progress: bool | None = None) -> None:
        self.work = Path(work)
        self.progress = progress
        self.timings: list[PhaseTime] = []
        self._checked = False

    def run(self, phase: str, fn: Callable[..., Any], tasks: Sequence[Sequence[Any]],
            weights: Sequence[int] | None = None, unit: str = "edge",
            costs: Sequence[float] | None = None) -> list[Any]:
        """Run ``fn(*task)`` for every task not finished before; every task's result, in order.
        ``weights`` count the progress bar's units; tasks start in decreasing ``costs`` (default:
        the weights), so that several processes end a phase on short tasks, not on one long."""
        if self.leader and not self._checked:
            check_files(self.work, self.error)  # a resumed run builds on nothing changed since
            self._checked = True
        folder = self.work / "done" / phase
        gate.make_folder(folder)
        weights = [int(w) for w in (weights or [1] * len(tasks))]
        costs = list(costs) if costs is not None else weights
        finished = [i for i in range(len(tasks)) if marker_path(self.work, phase, i).exists()]
        for i in finished:  # a damaged one stops the run before any task builds on it
            read_marker(marker_path(self.work, phase, i), self.error)
        done_before = set(finished)
        todo = sorted((i for i in range(len(tasks)) if i not in done_before),
                      key=lambda i: -costs[i])
        total = sum(weights)
        start = time.perf_counter()
        show = self.leader and (sys.stderr.isatty() if self.progress is None else self.progress)
        with tqdm(total=total, initial=total - sum(weights[i] for i in todo), desc=phase,
                  unit=unit, unit_scale=True, disable=not show, leave=False,
                  file=sys.stderr) as bar, RssSampler() as rss:
            self._execute(fn, tasks, todo, phase, lambda i: bar.update(weights[i]))
        self.timings.append(PhaseTime(phase, time.perf_counter() - start,
                                      sum(weights[i] for i in todo), unit, len(todo), len(tasks),
                                      rss.peak))
        results = [read_marker(marker_path(self.work, phase, i), self.error)
                   for i in range(len(tasks))]
        if self.leader:
            record_files(self.work)
        self._sync()  # no process starts the next phase before the record is written
        return results

    def once(self, phase: str, fn: Callable[..., Any], *args: Any) -> Any:
        """Run one step once (on the leader when several processes share the work)."""
        return self.run(phase, fn, [args], unit="step")[0]

    def _execute(self, fn: Callable[..., Any], tasks: Sequence[Sequence[Any]], todo: list[int],
                 phase: str, done: Callable[[int], None]) -> None:
        for i in todo:
            run_task(str(marker_path(self.work, phase, i)), fn, tasks[i])
            done(i)

    def _sync(self) -> None:
        """Wait for every process sharing the work (none besides this one here)."""

    def close(self) -> None:
        """Release processes the runner started (none here)."""

    def __enter__(self) -> "Runner":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
