"""An in-process fake of one grid axis's process group, for unit tests of the collectives'
numerics (`plexus.engine.comm`, `plexus.engine.exchange`) without starting a world.

``run_axis(p, body)`` runs ``body(comm, rank)`` for each of the p ranks of axis "x" in its own
thread, each rank with its own `Comm` over a fake grid; the collectives those modules issue
(all-to-all, all-gather, reduce-scatter, all-reduce, the all-gather of objects) meet at a
barrier and move the exact bits each rank passed (the fake sums only in the float32 path, in
rank order). It replaces the names those modules call through (their ``dist`` and the names
bound to torch's single-tensor gathers and reduce-scatters, `MODULES`) for the duration of the
call: the seam a test of wire numerics needs.

The reference rounding is written here independently of torch: bf16 by round-to-nearest-even
on the float32 bit pattern, fp16 by numpy's float16 cast.
"""

from __future__ import annotations

import struct
import threading
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Callable

import numpy as np
import torch
import torch.distributed as dist

from plexus.engine.comm import Comm
from plexus_partition.model.grid import GridShape

TIMEOUT_S = 30.0


# ---- the reference rounding ---------------------------------------------------------------------
def f32(x: float) -> float:
    """``x`` rounded to float32 (round-to-nearest-even, by struct)."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def bf16(x: float) -> float:
    """``x`` (a float32 value) rounded to bfloat16, to nearest, ties to even: the float32 bit
    pattern's low 16 bits dropped after adding 0x7FFF plus the lowest kept bit."""
    bits = struct.unpack("<I", struct.pack("<f", f32(x)))[0]
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def fp16(x: float) -> float:
    """``x`` (a float32 value) rounded to IEEE half precision (numpy's cast)."""
    return float(np.float32(x).astype(np.float16))


ROUND = {torch.bfloat16: bf16, torch.float16: fp16}


def fsum(values) -> float:
    """The float32 sum of ``values`` in the order given."""
    total = 0.0
    for v in values:
        total = f32(total + v)
    return total


# ---- the fake group --------------------------------------------------------------------------
class _Axis:
    """The rendezvous of p threads: each deposits a value, every one reads all p."""

    def __init__(self, p: int):
        self.p = p
        self.slots: list = [None] * p
        self.barrier = threading.Barrier(p, timeout=TIMEOUT_S)

    def exchange(self, rank: int, value):
        self.slots[rank] = value
        self.barrier.wait()
        got = list(self.slots)
        self.barrier.wait()
        return got


class _Group:
    """A rank's handle on the axis (what the collectives get as ``group``)."""

    def __init__(self, axis: _Axis, rank: int):
        self.axis, self.rank = axis, rank


class _Grid:
    """What `Comm` and `RowExchange` read of a grid: one axis "x" of size p (y, z of size 1)."""

    def __init__(self, axis: _Axis, rank: int):
        self._group = _Group(axis, rank)
        self.p = axis.p
        self.device = torch.device("cpu")
        self.shape = GridShape.of((self.p, 1, 1))
        self.rank = rank
        self.coords = dict(self.shape.coords(rank))
        assert self.coords == {"x": rank, "y": 0, "z": 0}, self.coords

    def size(self, axis: str) -> int:
        return self.p if axis == "x" else 1

    def group(self, axis: str) -> _Group:
        assert axis == "x", axis
        return self._group


def _blocks(t: torch.Tensor, splits, p: int) -> list[torch.Tensor]:
    if splits is None:
        return list(t.reshape((p, t.shape[0] // p) + tuple(t.shape[1:])).unbind(0))
    return list(torch.split(t, list(splits), dim=0))


def _all_to_all_single(out, inp, output_split_sizes=None, input_split_sizes=None, group=None,
                       async_op=False):
    p = group.axis.p
    sent = group.axis.exchange(group.rank, _blocks(inp.clone(), input_split_sizes, p))
    parts = [sent[q][group.rank] for q in range(p)]
    if output_split_sizes is not None:
        assert [len(a) for a in parts] == list(output_split_sizes), "split sizes disagree"
    assert all(a.dtype == out.dtype for a in parts), "all-to-all of mixed dtypes"
    out.copy_(torch.cat(parts, 0).reshape(out.shape))


def _all_gather_into(out, inp, group=None, async_op=False):
    got = group.axis.exchange(group.rank, inp.clone())
    assert all(a.dtype == out.dtype for a in got), "all-gather of mixed dtypes"
    out.copy_(torch.cat(got, 0).reshape(out.shape))


def _in_rank_order(got: list[torch.Tensor]) -> torch.Tensor:
    total = got[0].clone()
    for a in got[1:]:
        total += a
    return total


def _reduce_scatter_into(out, inp, group=None, async_op=False):
    got = group.axis.exchange(group.rank, inp.clone())
    out.copy_(_blocks(_in_rank_order(got), None, group.axis.p)[group.rank])


def _all_reduce(x, op=dist.ReduceOp.SUM, group=None, async_op=False):
    got = group.axis.exchange(group.rank, x.clone())
    assert op == dist.ReduceOp.SUM, "the fake sums only"
    x.copy_(_in_rank_order(got))


def _all_gather_object(out: list, obj, group=None):
    got = group.axis.exchange(group.rank, obj)
    out[:] = got


FAKE_DIST = SimpleNamespace(all_to_all_single=_all_to_all_single, all_reduce=_all_reduce,
                            all_gather_object=_all_gather_object, ReduceOp=dist.ReduceOp,
                            is_initialized=lambda: False, get_backend=lambda: "fake")


#: the modules whose collectives the fake replaces (those present: the wire's helpers may
#: move between them)
MODULES = ("plexus.engine.comm", "plexus.engine.exchange", "plexus.engine.twolevel")
_REAL = {}
for _name, _fake in (("all_gather_into_tensor", _all_gather_into),
                     ("all_gather_single", _all_gather_into),
                     ("reduce_scatter_tensor", _reduce_scatter_into),
                     ("reduce_scatter_single", _reduce_scatter_into)):
    if getattr(dist, _name, None) is not None:
        _REAL[getattr(dist, _name)] = _fake


@contextmanager
def _patched():
    """Within: every module of `MODULES` calls the fake: its ``dist`` and every name bound to
    one of torch's single-tensor gathers or reduce-scatters."""
    import importlib

    saved = []
    for name in MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        for attr, value in list(vars(module).items()):
            if value is dist:
                saved.append((module, attr, value))
                setattr(module, attr, FAKE_DIST)
            elif callable(value) and value in _REAL:
                saved.append((module, attr, value))
                setattr(module, attr, _REAL[value])
    try:
        yield
    finally:
        for module, attr, value in saved:
            setattr(module, attr, value)


def run_axis(p: int, body: Callable[[Comm, int], object], wire: torch.dtype | None) -> list:
    """``body(comm, rank)`` on each of p fake ranks at once (threads); their results in rank
    order. ``wire``: the comm's payload precision (None: as they are)."""
    axis = _Axis(p)
    results: list = [None] * p
    errors: list = []

    def one(rank: int) -> None:
        try:
            comm = Comm(_Grid(axis, rank), budget=1e12, wire=wire)
            results[rank] = body(comm, rank)
        except BaseException as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)
            axis.barrier.abort()

    with _patched():
        threads = [threading.Thread(target=one, args=(r,)) for r in range(p)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(TIMEOUT_S + 5)
    real = [e for e in errors if not isinstance(e, threading.BrokenBarrierError)]
    if real or errors:
        raise (real or errors)[0]
    return results
