"""Wall-clock timers around compute kernels and collectives, reduced over ranks on demand."""

from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager
from typing import Callable, Iterator

import torch


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


class Timers:
    """Accumulates seconds per name. On CUDA it synchronizes around each timed region so the
    figure is the kernel's, not its launch's; disabled timers cost nothing."""

    def __init__(self, device: torch.device, enabled: bool = True) -> None:
        self.device = device
        self.enabled = enabled
        self.seconds: dict[str, float] = defaultdict(float)

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        if not self.enabled:
            yield
            return
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        start = time.perf_counter()
        try:
            yield
        finally:
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            self.seconds[name] += time.perf_counter() - start

    def reset(self) -> None:
        """Forget all accumulated times."""
        self.seconds.clear()
