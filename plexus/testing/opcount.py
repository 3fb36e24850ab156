"""Operators dispatched by a piece of torch code: the CPU proxy for a GPU's kernel launches.

Every ATen operator a training step calls becomes (at least) one kernel launch on a GPU, so a step
whose operator count grows with the graph launches a growing number of kernels: the count is
what keeps a GPU busy or idle, and it can be measured on any device.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from typing import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# torch.distributed's own frames: what a collective dispatches while it waits (gloo copies its
# result back in ``wait`` or on its own thread, as timing has it) is the backend's, not the step's
_C10D = f"{os.sep}torch{os.sep}distributed{os.sep}"


def _accumulating() -> bool:
    """Whether autograd is accumulating a parameter's gradient: it steals the fresh gradient
    (one alias) or, where something else still references it (a gloo work not yet released),
    copies it, as timing has it."""
    node = torch._C._current_autograd_node()
    return node is not None and node.name() == "torch::autograd::AccumulateGrad"


def _in_collective(depth: int = 40) -> bool:
    frame = sys._getframe(2)
    while frame is not None and depth:
        if _C10D in frame.f_code.co_filename:
            return True
        frame, depth = frame.f_back, depth - 1
    return False


class OpCounter(TorchDispatchMode):
    """Context manager: ``ops`` counts every ATen operator dispatched inside it, by name, except
    those a collective dispatches inside torch.distributed (the collectives themselves are
    counted by the engine's ledger) and autograd's accumulation of parameter gradients (one per
    parameter, an alias or a copy as timing has it)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: D105
        if not (_accumulating() or _in_collective()):
            self.ops[str(func.overloadpacket)] += 1
        return func(*args, **(kwargs or {}))


def count_ops(fn: Callable[[], object]) -> Counter[str]:
    """The operators ``fn()`` dispatches, by name."""
    with OpCounter() as counter:
        fn()
    return counter.ops


def count_difference(a: Counter[str], b: Counter[str]) -> str:
    """The operators whose counts differ between ``a`` and ``b`` ("" when none), as text."""
    names = sorted(set(a) | set(b))
    return ", ".join(f"{n} {a.get(n, 0)} vs {b.get(n, 0)}" for n in names
                     if a.get(n, 0) != b.get(n, 0))
