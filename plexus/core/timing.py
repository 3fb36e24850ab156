"""Timing a call repeatedly (calibration and benchmarks share one loop), the median of such
times and the load that makes them noisy, and when this process started (a run's wall time
counts from there)."""

from __future__ import annotations

import os
import time
import statistics
from typing import Callable, Iterable, Mapping


def time_calls(fn: Callable[[], object], reps: int, warmup: int = 1) -> list[float]:
    """Wall seconds of ``reps`` calls of ``fn`` after ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def process_start_time() -> float | None:
    """When this process started, on the `time.time` clock (Linux: /proc, 10 ms resolution);
    None where that cannot be read."""
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            # fields after the command name (which may hold spaces): field 22 is the start
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime", encoding="ascii") as f:
            uptime = float(f.read().split()[0])
        age = uptime - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
    return time.time() - max(age, 0.0)


#: Set by the set-up script (``./run``) to the `time.time` at which it starts the command, after
#: creating the environment and installing what was missing.
SETUP_DONE_ENV = "PLEXUS_SETUP_DONE"


def command_start_time(environ: Mapping[str, str] | None = None) -> tuple[float | None, float]:
    """When the command proper started, and the seconds of set-up left out before it.

    ``./run`` execs the command in its own process, so that process started with the set-up
    (a first run's pip install): the command then counts from `SETUP_DONE_ENV`. A process started
    after that moment (a run that a sweep started, inheriting the variable) counts from its own
    start."""
    env = os.environ if environ is None else environ
    start = process_start_time()
    try:
        done = float(env.get(SETUP_DONE_ENV, "").replace(",", "."))
    except ValueError:
        return start, 0.0
    if start is None or not start <= done <= time.time():
        return start, 0.0
    return done, done - start


def loadavg() -> str:
    """The 1-minute load average as text (other users of the machine make timings noisy)."""
    try:
        return f"{os.getloadavg()[0]:.2f}"
    except OSError:
        return "n/a"


def median(values: Iterable[float]) -> float:
    """Median, NaN for no values."""
    values = list(values)
    return statistics.median(values) if values else float("nan")
