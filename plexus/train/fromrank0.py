"""The set-up steps of a torchrun/srun job that rank 0 alone does while the other ranks wait for
what it made: the cached shard store (`plexus.train.cache.join_cached_store`) and the resolved
run (`plexus.train.resolve.resolved_by_rank_0`)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Callable, TypeVar

import torch.distributed as dist

#: How long the other ranks wait for rank 0 (building a store, loading a big graph to resolve
#: the run). A dead rank 0 ends the wait at once (its connections close); this only bounds a
#: step that hangs.
RANK_0_WAIT_S = 2 * 86400

T = TypeVar("T")


class PeerSetupFailed(RuntimeError):
    """Rank 0 could not do a step the other ranks wait for (it reports why; they only stop)."""


def from_rank_0(produce: Callable[[], tuple[T, Any]], what: str) -> tuple[T, Any]:
    """Collective, once the process group exists: rank 0 runs ``produce`` (what every rank
    receives, and what rank 0 alone keeps), every rank gets the first. Rank 0 raises
    ``produce``'s error once the others know of it; they raise `PeerSetupFailed` ("rank 0 could
    not ``what``"). The object goes through a gloo sub-group of its own (no pickle over NCCL,
    and the wait outlasts the job's --timeout)."""
    group = dist.new_group(backend="gloo", timeout=timedelta(seconds=RANK_0_WAIT_S))
    box: list[Any] = [None]
    kept: Any = None
    error: BaseException | None = None
    if dist.get_rank() == 0:
        try:
            box[0], kept = produce()
        except Exception as e:  # noqa: BLE001 — the other ranks must hear of it first
            error = e
    dist.broadcast_object_list(box, src=0, group=group)
    dist.destroy_process_group(group)
    if error is not None:
        raise error
    if box[0] is None:
        raise PeerSetupFailed(f"rank 0 could not {what}")
    return box[0], kept
