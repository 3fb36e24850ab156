"""Dense products with optional per-call-site tuning.

The same product can be formed several ways (direct, as the transpose of the transposed product,
or on contiguous copies of transposed views); which is fastest depends on shapes and memory
layout. With tuning on, each call site times every formulation once, on its first call, and then
reuses the fastest. All formulations compute the same product.
"""

from __future__ import annotations

import time
from typing import Callable

import torch

FORMULATIONS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "direct": lambda a, b: a @ b,
    "transposed": lambda a, b: (b.T @ a.T).T,
    "contiguous": lambda a, b: a.contiguous() @ b.contiguous(),
}


class GemmTuner:
    """``mm(site, a, b)``: a @ b by the formulation chosen for ``site`` (and the shapes)."""

    def __init__(self, enabled: bool = False, repeats: int = 2) -> None:
        self.enabled, self.repeats = enabled, repeats
        self.choice: dict[tuple, str] = {}

    def _time(self, f, a: torch.Tensor, b: torch.Tensor) -> float:
        best = float("inf")
        for _ in range(self.repeats):
            if a.is_cuda:
                torch.cuda.synchronize(a.device)
            start = time.perf_counter()
            f(a, b)
            if a.is_cuda:
                torch.cuda.synchronize(a.device)
            best = min(best, time.perf_counter() - start)
        return best

    def mm(self, site: str, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """The product a @ b."""
        if not self.enabled:
            return a @ b
        key = (site, tuple(a.shape), tuple(b.shape), a.stride(), b.stride())
        if key not in self.choice:
            times = {name: self._time(f, a, b) for name, f in FORMULATIONS.items()}
            self.choice[key] = min(times, key=times.get)
        return FORMULATIONS[self.choice[key]](a, b)
