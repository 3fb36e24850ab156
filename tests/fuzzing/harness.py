"""The fuzz harness: a case, its outcomes, and running cases where a crash is seen, not suffered.

`run_cases` runs cases in child processes (``python -m RUNNER --child``, restarted after a case
that kills its process), `run_cases_forked` each case in a process forked from a warm runner
(its peak RSS its own); an alarm per case turns a case still running after `CASE_LIMIT_S` into
a ``hang``, the marker file a crafted pickle would create into a ``payload``. The runner module
(`fuzzing.inputs`, `fuzzing.studies`) makes the call: its ``run_one`` given to `main`. Outcomes:

- ``ok``: loaded (and, for a graph, GCN-normalized without trouble);
- ``error``: a typed one-line error, what the command lines print as ``error:`` with exit 2;
- ``traceback``: any other exception (a command line would print a traceback);
- ``signal``: the process died (segfault, abort, OOM kill);
- ``payload``: the marker file appeared (a pickle ran code);
- ``hang``: the case ran longer than `CASE_LIMIT_S` (e.g. blocked on a FIFO).

Only the first two are acceptable.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from plexus_datasets.base import owned

GOOD = ("ok", "error")
OUTCOMES = ("ok", "error", "traceback", "signal", "payload", "hang")
MARKER_NAME = "PAYLOAD-RAN"
CASE_LIMIT_S = 60  # a case that runs longer hangs
#: the folder above this package: the runners' children import ``fuzzing`` from it
HOME = Path(__file__).resolve().parent.parent


@dataclass
class Case:
    """One input to load: ``spec``/``root`` for `load_dataset`, or a store directory."""

    kind: str
    name: str
    spec: str = ""
    root: str | None = None
    store: str | None = None
    coords: tuple[int, int, int] = (0, 0, 0)
    #: for testing the harness itself: "signal" kills the loading process, "payload" creates
    #: the marker file, as a segfault or a crafted pickle would
    selftest: str | None = None


def child_env() -> dict[str, str]:
    """This process's environment with `HOME` first on ``PYTHONPATH``: the harness lives beside
    the tests, not in the installed package, and a runner child must import it."""
    paths = [str(HOME), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


class Hang(BaseException):
    """Raised by the alarm when a case runs past `CASE_LIMIT_S`."""


def on_alarm(signum, frame):  # noqa: ARG001
    raise Hang()


def fork_json(work: Callable[[], object], failed: Callable[[], object] | None = None,
              fork: Callable[[], int] = os.fork) -> tuple[int, int]:
    """Fork a child that writes ``work()``'s result as JSON to a pipe and exits 0; where
    ``work`` raises, the child writes ``failed()``'s (when given: called inside the ``except``,
    so it may read the traceback) and exits 1. The parent gets (the child's pid, the pipe's
    read end: `read_until_eof`). A ``fork`` that raises closes the pipe first."""
    read, write = os.pipe()
    try:
        pid = fork()
    except BaseException:
        os.close(read)
        os.close(write)
        raise
    if pid == 0:  # the child: never returns
        code = 0
        try:
            os.close(read)
            os.write(write, json.dumps(work()).encode())
        except BaseException:  # noqa: BLE001 - said by failed(), or by the missing result
            code = 1
            if failed is not None:
                os.write(write, json.dumps(failed()).encode())
        finally:
            os._exit(code)
    os.close(write)
    return pid, read


def read_until_eof(read: int, pid: int, limit_s: float | None = None) -> tuple[bytes, bool]:
    """What child ``pid`` writes to ``read`` until it closes the pipe (``read`` is then
    closed), and whether it was killed: past ``limit_s`` seconds (None: never) it gets SIGKILL,
    as a child stuck where its alarm cannot reach it would never close the pipe."""
    chunks: list[bytes] = []
    deadline = None if limit_s is None else time.monotonic() + limit_s
    killed = False
    try:
        while True:
            ready, _, _ = select.select([read], [], [], 0.5)
            if ready:
                chunk = os.read(read, 1 << 16)
                if not chunk:
                    break
                chunks.append(chunk)
            elif deadline is not None and time.monotonic() > deadline and not killed:
                os.kill(pid, signal.SIGKILL)
                killed = True
    finally:
        os.close(read)
    return b"".join(chunks), killed


def child_main(run: Callable[[Case], tuple[str, str]], cases_file: Path, start: int) -> None:
    """Run cases from ``start`` with ``run``, printing ``START i`` before and a JSON result
    after each (a case still running after `CASE_LIMIT_S` is a ``hang``)."""
    import warnings

    warnings.simplefilter("ignore")
    cases = [Case(**{**c, "coords": tuple(c["coords"])})
             for c in json.loads(cases_file.read_text())]
    marker = cases_file.parent / MARKER_NAME
    signal.signal(signal.SIGALRM, on_alarm)
    for i in range(start, len(cases)):
        print(f"START {i}", flush=True)
        signal.alarm(CASE_LIMIT_S)
        try:
            outcome, detail = run(cases[i])
        except Hang:
            outcome, detail = "hang", f"still running after {CASE_LIMIT_S} s"
        finally:
            signal.alarm(0)
        if marker.exists():
            outcome, detail = "payload", f"{MARKER_NAME} created"
            owned.remove_file(marker)
        print(json.dumps({"i": i, "outcome": outcome, "detail": detail}), flush=True)


def run_cases(cases: list[Case], work: Path, timeout: float = 600,
              runner: str = "fuzzing.inputs") -> list[tuple[Case, str, str]]:
    """Run every case in child processes (``python -m RUNNER --child``; the runner's
    ``run_one`` makes the call); a child that dies is restarted after its case."""
    cases_file = work / "cases.json"
    cases_file.write_text(json.dumps([asdict(c) for c in cases]))
    results: dict[int, tuple[str, str]] = {}
    start = 0
    while start < len(cases):
        proc = subprocess.run([sys.executable, "-m", runner, "--child", str(cases_file),
                               str(start)], capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, env=child_env())
        current = None
        for line in proc.stdout.splitlines():
            if line.startswith("START "):
                current = int(line.split()[1])
            elif line.startswith("{"):
                rec = json.loads(line)
                results[rec["i"]] = (rec["outcome"], rec["detail"])
        if proc.returncode == 0:
            break
        if current is None or current in results:  # died outside a case
            raise RuntimeError(f"fuzz child failed: {proc.stderr[-2000:]}")
        results[current] = ("signal", f"exit status {proc.returncode}: {proc.stderr[-300:]}")
        start = current + 1
    return [(c, *results[i]) for i, c in enumerate(cases)]


def forked_main(run: Callable[[Case], tuple[str, str]], cases_file: Path) -> None:
    """Run every case in a child forked from this process (the imports paid once), printing
    one JSON line per case with its outcome and the child's peak RSS in kB (``os.wait4``'s
    ``ru_maxrss``: what the case took, the inherited interpreter included)."""
    import select  # noqa: PLC0415
    import warnings  # noqa: PLC0415

    import torch  # noqa: PLC0415, F401 - imported here, once, not in every child

    import plexus.api.export  # noqa: PLC0415, F401
    import plexus_datasets  # noqa: PLC0415, F401

    warnings.simplefilter("ignore")
    cases = [Case(**{**c, "coords": tuple(c["coords"])})
             for c in json.loads(cases_file.read_text())]
    marker = cases_file.parent / MARKER_NAME
    for i, case in enumerate(cases):
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the case's own process
            os.close(read_end)
            signal.signal(signal.SIGALRM, on_alarm)
            signal.alarm(CASE_LIMIT_S)
            try:
                outcome, detail = run(case)
            except Hang:
                outcome, detail = "hang", f"still running after {CASE_LIMIT_S} s"
            except BaseException as e:  # noqa: BLE001 - reported, not raised
                outcome, detail = "traceback", f"{type(e).__name__}: {str(e)[:300]}"
            os.write(write_end, json.dumps([outcome, detail]).encode())
            os._exit(0)
        os.close(write_end)
        ready, _, _ = select.select([read_end], [], [], CASE_LIMIT_S + 30)
        if not ready:  # stuck where the alarm cannot reach (in C, signals blocked)
            os.kill(pid, signal.SIGKILL)
        with os.fdopen(read_end, "rb") as f:
            data = f.read() if ready else b""
        _, status, usage = os.wait4(pid, 0)
        if not ready:
            outcome, detail = "hang", f"killed after {CASE_LIMIT_S + 30} s"
        elif os.WIFSIGNALED(status) or not data:
            outcome, detail = "signal", f"wait status {status}"
        else:
            outcome, detail = json.loads(data)
        if marker.exists():
            outcome, detail = "payload", f"{MARKER_NAME} created"
            owned.remove_file(marker)
        print(json.dumps({"i": i, "outcome": outcome, "detail": detail,
                          "rss_kb": int(usage.ru_maxrss)}), flush=True)


def run_cases_forked(cases: list[Case], work: Path, timeout: float = 3600,
                     runner: str = "fuzzing.inputs") -> list[tuple[Case, str, str, int]]:
    """Every case in a process of its own (``python -m RUNNER --forked``, `forked_main`):
    (case, outcome, detail, peak RSS in kB) each."""
    cases_file = work / "cases-forked.json"
    cases_file.write_text(json.dumps([asdict(c) for c in cases]))
    proc = subprocess.run([sys.executable, "-m", runner, "--forked", str(cases_file)],
                          capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, env=child_env())
    found = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            rec = json.loads(line)
            found[rec["i"]] = (rec["outcome"], rec["detail"], rec["rss_kb"])
    if len(found) != len(cases):
        raise RuntimeError(f"fuzz runner ended early (status {proc.returncode}): "
                           f"{proc.stderr[-2000:]}")
    return [(c, *found[i]) for i, c in enumerate(cases)]


def summarize(results: list[tuple[Case, str, str]]) -> dict[str, Counter]:
    """Outcome counts per input kind."""
    out: dict[str, Counter] = {}
    for case, outcome, *_ in results:
        out.setdefault(case.kind, Counter())[outcome] += 1
    return out


def main(run: Callable[[Case], tuple[str, str]]) -> None:
    """The child's command line: ``--child CASES START``."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", nargs=2, metavar=("CASES", "START"))
    parser.add_argument("--forked", metavar="CASES")
    args = parser.parse_args()
    if args.forked:
        forked_main(run, Path(args.forked))
    else:
        child_main(run, Path(args.child[0]), int(args.child[1]))

