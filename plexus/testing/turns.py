"""Compute regions that take turns: measuring each rank's kernels as if it had a core of its own.

With more ranks than cores, a rank's wall time inside a kernel includes time it waited for a core.
`timers_class` gives timers that also record each region's thread CPU time and, with a `Turns`,
let only ``slots`` ranks at a time inside an SpMM/GEMM region (the others wait in barriers).
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator


COMPUTE = ("spmm", "gemm")


@dataclass
class Turns:
    """Ranks taking turns in their compute regions, ``slots`` ranks at a time (see
    `timers_class`): ``group`` spans all ranks."""

    group: Any
    slots: int

    def __post_init__(self) -> None:
        import torch.distributed as dist

        self.size = dist.get_world_size(self.group)
        self.mine = dist.get_rank(self.group) // self.slots  # this rank's turn
        self.count = -(-self.size // self.slots)  # turns per region

    def wait(self, before: bool) -> None:
        """The barriers before this rank's turn (``before``) or from its end on; none when all
        ranks fit in one turn (then the ranks compute side by side, one per core)."""
        import torch.distributed as dist

        if self.count == 1:
            return
        for _ in range(self.mine if before else self.count - self.mine):
            dist.barrier(group=self.group)


def timers_class():
    """`plexus.engine.timing.Timers` that also accumulates the calling thread's CPU seconds, and can
    make the ranks take turns in their compute regions.

    With more ranks than cores a rank's wall time inside a kernel includes time it waited for a
    core; its thread CPU time does not. Each rank runs torch (and scipy) single-threaded in the
    calling thread, so thread CPU time is the work the kernel did, but it still includes the
    cost of sharing a core: another rank's time slices evict this one's caches mid-kernel.
    With ``turns`` set (a `Turns`), each SpMM/GEMM region runs on ``turns.slots`` ranks at a
    time: ranks r with r // slots = t compute between the t-th and (t+1)-th of ⌈G/slots⌉
    barriers, the others wait blocked in theirs. With one slot per core that is G ranks on G
    cores, as far as the kernels can tell. The collectives between regions are untouched, so
    the epoch computes exactly what it does otherwise.
    """
    from plexus.engine.timing import Timers

    class CpuTimers(Timers):
        def __init__(self, device, enabled: bool = True) -> None:
            super().__init__(device, enabled)
            self.cpu_seconds: dict[str, float] = {}
            self.turns: Turns | None = None
            self.spans: list[tuple[float, float]] | None = None  # compute (start, end), if kept

        @contextmanager
        def __call__(self, name: str) -> Iterator[None]:
            if not self.enabled:
                yield
                return
            turns = self.turns if name in COMPUTE else None
            if turns is not None:
                turns.wait(before=True)
            cpu, start = time.thread_time(), time.perf_counter()
            try:
                with super().__call__(name):
                    yield
            finally:
                self.cpu_seconds[name] = self.cpu_seconds.get(name, 0.0) + time.thread_time() - cpu
                if self.spans is not None and name in COMPUTE:
                    self.spans.append((start, time.perf_counter()))
                if turns is not None:
                    turns.wait(before=False)

        def reset(self) -> None:
            super().reset()
            self.cpu_seconds.clear()

    return CpuTimers
