"""Timing a call repeatedly (calibration and benchmarks share one loop)."""

from __future__ import annotations

import time
from typing import Callable


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
