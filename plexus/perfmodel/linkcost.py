"""Link prediction's pair operator priced from sizes alone: one training step's pair collectives
(`plexus_partition.model.pairs.pair_collectives`, batch by batch: the positives and as many
negatives), their α-β time, and the bytes the pairs add to a rank's peak (one batch's buffers
and the embedding block's gradient, `LinkCost.buffer_bytes`; `link_memory` adds them to the node
model's `rank_memory` in place of the backward's temporaries, which are never alive with
them).

A batch of b pairs has at most min(2b, N) distinct ends; the engine's ledger records the ends a
batch really has (the test compares the two on the same count, tests/link_checks.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping, Sequence

from plexus_partition.model.grid import AXES
from plexus_partition.model.pairs import batch_pairs, pair_bytes, pair_collectives
from plexus_partition.model.schedule import Collective

from .calibration import Calibration
from .memory import Memory, rank_memory
from .model import collective_time
from .spec import ModelSpec, normalize_grid, spec_layout

#: The embedding's bytes per element: the encoder's output is float32 whatever its precision.
EMBED_BYTES = 4


@dataclass(frozen=True)
class LinkCost:
    """One training step's pair operator on one rank: its collectives, their seconds and bytes
    per axis, the pairs a batch holds and the bytes the pairs add to the peak."""

    collectives: list[Collective]
    seconds: float
    bytes_per_axis: dict[str, float]
    batch: int
    buffer_bytes: float


def batches(num_pairs: int, batch: int) -> list[int]:
    """The batch sizes of ``num_pairs`` pairs cut ``batch`` at a time."""
    return [min(batch, num_pairs - s) for s in range(0, num_pairs, batch)]


def link_cost(spec: ModelSpec, grid: Mapping[str, int] | Sequence[int], orders: Sequence[str],
              num_pairs: int, decoder: str, hidden: int = 0, layers: int = 0,
              budget: float | None = None, calibration: Calibration | None = None,
              ranks_per_host: int | None = None) -> LinkCost:
    """The pair operator of one training step of ``num_pairs`` positives (and as many
    negatives) on the encoder ``spec`` (its classes: the embedding's columns) over ``grid``,
    batched to ``budget`` bytes (None: all at once), priced with ``calibration``."""
    s = normalize_grid(grid)
    cal = calibration or Calibration()
    plans, pad = spec_layout(spec, s, orders)
    last, wp = plans[-1], pad.widths_padded[-1]
    width = wp // s[last.out_cols]
    per_pair = pair_bytes(width, wp, decoder, hidden, layers, EMBED_BYTES)
    size = num_pairs if budget is None else batch_pairs(budget, per_pair, num_pairs)
    out: list[Collective] = []
    for b in batches(num_pairs, size):
        for _ in ("positives", "negatives"):
            out += pair_collectives(last, s, wp, b, min(2 * b, spec.num_nodes), decoder)
    itemsize = spec.comm_dtype_bytes or EMBED_BYTES
    seconds = sum(collective_time(c, cal, itemsize, ranks_per_host) for c in out)
    per_axis = {a: sum(c.bytes(itemsize) for c in out if c.axis == a) for a in AXES}
    rows = pad.nodes_padded // s[last.out_rows]
    gradient = 2 * rows * width * EMBED_BYTES  # the detached embedding block and its gradient
    return LinkCost(out, seconds, per_axis, size, size * per_pair + gradient)


def link_memory(spec: ModelSpec, grid: Mapping[str, int] | Sequence[int],
                orders: Sequence[str], cost: LinkCost) -> Memory:
    """`rank_memory` of the encoder with the pair operator's ``cost``: the pair batches run
    between the encoder's forward and its backward, so their buffers and the backward's
    temporaries are never alive at once (the saved activations are, in both): the workspace is
    the larger of the two."""
    mem = rank_memory(spec, normalize_grid(grid), orders)
    return replace(mem, workspace=max(mem.workspace, cost.buffer_bytes))
