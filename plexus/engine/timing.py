"""Timers around the engine's compute kernels and collectives that never stall the device.

On a CPU a timed region is wall-clock time. On CUDA it is a pair of CUDA events recorded on the
current stream around the region: recording costs microseconds and waits for nothing, so the step
runs as untimed (and ``--overlap``'s all-reduces overlap the next SpMM); the events are read when
`Timers.seconds` is asked for (once per epoch's log line or per report), which waits for the last
one only.
"""

from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager
from typing import Iterator

import torch

#: Recorded event pairs kept before the completed ones are folded in (a query, no wait).
_FOLD_AT = 1024


class Timers:
    """Accumulates seconds per name; disabled timers cost nothing. ``seconds`` (a dict) is up to
    date whenever it is read."""

    def __init__(self, device: torch.device, enabled: bool = True) -> None:
        self.device = torch.device(device)
        self.enabled = enabled
        self._seconds: dict[str, float] = defaultdict(float)
        self._pending: list[tuple[str, torch.cuda.Event, torch.cuda.Event]] = []

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        if not self.enabled:
            yield
            return
        if self.device.type == "cuda":
            start = torch.cuda.Event(enable_timing=True)
            start.record()
            try:
                yield
            finally:
                end = torch.cuda.Event(enable_timing=True)
                end.record()
                self._pending.append((name, start, end))
                if len(self._pending) >= _FOLD_AT:
                    self._fold(wait=False)
            return
        start_s = time.perf_counter()
        try:
            yield
        finally:
            self._seconds[name] += time.perf_counter() - start_s

    def _fold(self, wait: bool) -> None:
        """Add the recorded regions' times; ``wait``: all of them (waits for the last event),
        else only those already complete (no wait)."""
        if wait and self._pending:
            self._pending[-1][2].synchronize()
        done = 0
        for name, start, end in self._pending:
            if not (wait or end.query()):
                break
            self._seconds[name] += start.elapsed_time(end) / 1e3
            done += 1
        del self._pending[:done]

    @property
    def seconds(self) -> dict[str, float]:
        """Seconds per name so far (on CUDA this waits for the regions still running)."""
        self._fold(wait=True)
        return self._seconds

    def reset(self) -> None:
        """Forget all accumulated times."""
        self._fold(wait=True)
        self._seconds.clear()
