"""Wall-clock timers around the engine's compute kernels and collectives."""

from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager
from typing import Iterator

import torch


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
