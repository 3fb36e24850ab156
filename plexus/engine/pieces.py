"""Pieces sized in bytes: how much a step's temporaries may take, and the spans of rows or edges
that keep a pass under it.

A training step's passes run over whole tensors (a constant number of kernels, whatever the
graph's size); only when a pass's temporaries would not fit the budget does it run in pieces,
and then as few as the budget allows. The budget is a share of the memory free on the device
when the model is built (the GPU's free memory, or the host's available RAM shared by the ranks
of this node): it is read once at set-up, never inside a step.
"""

from __future__ import annotations

import os

import torch

from plexus_datasets.validate import available_bytes

#: The share of the free memory one pass's temporaries may take.
FREE_SHARE = 1 / 8


def piece_budget(device: torch.device, local_ranks: int | None = None) -> float:
    """Bytes a pass's temporaries may take on ``device``: `FREE_SHARE` of its free memory (a
    GPU's, or on CPUs the host's available RAM), shared by the ``local_ranks`` ranks beside
    this one (None: the launcher's ``LOCAL_WORLD_SIZE``, else 1). Read at set-up (it asks the
    driver or /proc)."""
    device = torch.device(device)
    if local_ranks is None:
        local_ranks = int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return FREE_SHARE * float(free) / max(1, local_ranks)
    return FREE_SHARE * available_bytes() / max(1, local_ranks)


def spans(n: int, bytes_per_item: float, budget: float | None) -> list[tuple[int, int]]:
    """(start, stop) spans covering 0..n, each holding at most ``budget`` bytes at
    ``bytes_per_item``: one span unless the budget forces more (None: no limit), and then
    pieces as equal as possible."""
    if n <= 0:
        return [(0, 0)]
    if budget is None or n * bytes_per_item <= budget:
        return [(0, n)]
    count = -(-int(n * bytes_per_item) // max(int(budget), 1))
    step = -(-n // count)
    return [(a, min(a + step, n)) for a in range(0, n, step)]
