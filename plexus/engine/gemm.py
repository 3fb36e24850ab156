"""Dense products with optional per-call-site tuning.

The same product can be formed several ways (direct, as the transpose of the transposed product,
or on contiguous copies of transposed views); which is fastest depends on shapes and memory
layout. Single-threaded CPU BLAS has steep cliffs here: ``a.T @ g`` with a 131072×128 ``a`` and a
131072×8 ``g`` (layer 3's weight gradient with 16 classes cut over 2 ranks) takes 111 ms directly
and 10 ms as ``(g.T @ a).T``, and the 3D grid makes exactly such narrow products.

By default each product takes the formulation `default_formulation` picks from its shapes and
strides alone, so a run is bit-for-bit reproducible. With tuning on (``--tune-gemms``), each call
site times every formulation once, on its first call with given shapes and strides, and reuses
the fastest: sometimes faster still, but the choice depends on timing, so two runs may differ in
the last bits. All formulations compute the same product, up to float rounding.
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


# Below this many output columns, a product whose left operand is a transposed (column-major)
# view runs on the CPU as the transposed product (the cliff above; equal from 16 columns on).
NARROW_COLUMNS = 16


def default_formulation(a: torch.Tensor, b: torch.Tensor) -> str:
    """The formulation of a @ b without tuning: a deterministic function of shapes and strides."""
    column_major = a.dim() == 2 and a.stride(0) == 1 and a.stride(1) > 1
    if a.device.type == "cpu" and column_major and b.shape[-1] < NARROW_COLUMNS:
        return "transposed"
    return "direct"


class GemmTuner:
    """``mm(site, a, b)``: a @ b by the formulation chosen for ``site`` (and the shapes)."""

    def __init__(self, enabled: bool = False, repeats: int = 2) -> None:
        self.enabled, self.repeats = enabled, repeats
        self.choice: dict[tuple, str] = {}

    def _time(self, f, a: torch.Tensor, b: torch.Tensor) -> float:
        """Best of ``repeats`` runs: GPU wall time; on the CPU the process's CPU time, which a
        rank that waits for a core (more ranks than cores) does not count."""
        clock = time.perf_counter if a.is_cuda else time.process_time
        best = float("inf")
        for _ in range(self.repeats):
            if a.is_cuda:
                torch.cuda.synchronize(a.device)
            start = clock()
            f(a, b)
            if a.is_cuda:
                torch.cuda.synchronize(a.device)
            best = min(best, clock() - start)
        return best

    def mm(self, site: str, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """The product a @ b."""
        if not self.enabled:
            return FORMULATIONS[default_formulation(a, b)](a, b)
        key = (site, tuple(a.shape), tuple(b.shape), a.stride(), b.stride())
        if key not in self.choice:
            times = {name: self._time(f, a, b) for name, f in FORMULATIONS.items()}
            self.choice[key] = min(times, key=times.get)
        return FORMULATIONS[self.choice[key]](a, b)
