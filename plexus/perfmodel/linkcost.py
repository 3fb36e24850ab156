"""Link prediction's pair operator priced from sizes alone: one training step's pair collectives
(`plexus_partition.model.pairs.pair_collectives`, batch by batch: the positives and as many
negatives), their α-β time, and the bytes the pairs add to a rank's peak (one batch's buffers
and the embedding block's gradient, `LinkCost.buffer_bytes`; `link_memory` adds them to the node
model's `rank_memory` of any rank in place of the backward's temporaries, which are never alive
with them, and adds the decoder's replicated parameters, gradients and Adam moments).

A batch of b pairs has at most min(2b, N) distinct ends, the price's default; given the ends
each batch really has (``ends``), the price's bytes are the engine's ledger's
(tests/link_checks.py, on every grid). `estimate_link` is `estimate` for the link task: the
encoder's forward and backward without the node loss, then the pair operator
(``plexus-model --task link``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping, Sequence

from plexus_partition.model.grid import AXES
from plexus_partition.model.pairs import (batch_pairs, decoder_parameters, pair_bytes,
                                          pair_collectives, pair_peak)
from plexus_partition.model.schedule import Collective

from .calibration import Calibration
from .forms import epoch_link_bytes
from .memory import Memory, rank_memory
from .model import CommVolume, Prediction, collective_time, estimate
from .placement import Placement
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
    buffer_bytes: float  # one batch's peak (`pair_peak`), the embedding block and its gradient
    decoder_bytes: float = 0.0  # the decoder's parameters and gradients (replicated)
    decoder_state: float = 0.0  # their two Adam moments
    pair_ids: float = 0.0  # the positives' ids (every rank) and the block's sorted row ids


def batches(num_pairs: int, batch: int) -> list[int]:
    """The batch sizes of ``num_pairs`` pairs cut ``batch`` at a time."""
    return [min(batch, num_pairs - s) for s in range(0, num_pairs, batch)]


def link_cost(spec: ModelSpec, grid: Mapping[str, int] | Sequence[int], orders: Sequence[str],
              num_pairs: int, decoder: str, hidden: int = 0, layers: int = 0,
              budget: float | None = None, calibration: Calibration | None = None,
              ranks_per_host: int | None = None,
              ends: Sequence[int] | None = None) -> LinkCost:
    """The pair operator of one training step of ``num_pairs`` positives (and as many
    negatives) on the encoder ``spec`` (its classes: the embedding's columns) over ``grid``,
    batched to ``budget`` bytes (None: all at once), priced with ``calibration``; the decoder
    ``decoder`` with ``layers`` layers of ``hidden`` units. ``ends``: each batch's distinct end
    nodes, the positives' then the negatives' batch by batch (default: the bound min(2b, N))."""
    s = normalize_grid(grid)
    cal = calibration or Calibration()
    plans, pad = spec_layout(spec, s, orders)
    last, wp = plans[-1], pad.widths_padded[-1]
    width = wp // s[last.out_cols]
    per_pair = pair_bytes(width, wp, decoder, hidden, layers, EMBED_BYTES)
    size = num_pairs if budget is None else batch_pairs(budget, per_pair, num_pairs)
    sizes = [b for b in batches(num_pairs, size) for _ in ("positives", "negatives")]
    if ends is None:
        ends = [min(2 * b, spec.num_nodes) for b in sizes]
    elif len(ends) != len(sizes):
        raise ValueError(f"ends: one count per batch ({len(sizes)}), got {len(ends)}")
    out: list[Collective] = []
    for b, e in zip(sizes, ends):
        out += pair_collectives(last, s, wp, b, e, decoder)
    itemsize = spec.comm_dtype_bytes or EMBED_BYTES
    seconds = sum(collective_time(c, cal, itemsize, ranks_per_host) for c in out)
    per_axis = {a: sum(c.bytes(itemsize) for c in out if c.axis == a) for a in AXES}
    rows = pad.nodes_padded // s[last.out_rows]
    gradient = 2 * rows * width * EMBED_BYTES  # the embedding block (kept) and its gradient
    peak = pair_peak(size, min(2 * size, spec.num_nodes), width, wp, rows, decoder, hidden,
                     layers, EMBED_BYTES)
    params = decoder_parameters(decoder, spec.num_classes, hidden, layers) * EMBED_BYTES
    ids = 2 * num_pairs * 8 + 2 * rows * 8  # int64: the positives, the sorted ids and order
    return LinkCost(out, seconds, per_axis, size, peak + gradient, 2 * params, 2 * params, ids)


def link_memory(spec: ModelSpec, grid: Mapping[str, int] | Sequence[int],
                orders: Sequence[str], cost: LinkCost,
                coords: Mapping[str, int] | None = None) -> Memory:
    """`rank_memory` of the encoder with the pair operator's ``cost``, for the rank at grid
    ``coords`` (None: the rank that holds the most): the pair batches run between the encoder's
    forward and its backward, over everything its stages keep for the backward, in place of the
    node loss (`rank_memory`'s ``head``). The decoder's parameters, gradients and moments are
    on every rank, and so are the positives' ids (``features``, with the shard's ids)."""
    mem = rank_memory(spec, normalize_grid(grid), orders, coords, head=cost.buffer_bytes)
    return replace(mem, features=mem.features + cost.pair_ids,
                   weights=mem.weights + cost.decoder_bytes,
                   optimizer=mem.optimizer + cost.decoder_state)


@dataclass(frozen=True)
class LinkOptions:
    """What the link task adds to an encoder's price: ``pairs`` positive training pairs a step
    (and as many negatives), the ``decoder`` ("dot" or "mlp": ``layers`` Linear layers of
    ``hidden`` units), batches of ``budget`` bytes (None: every pair at once); ``ends``:
    each batch's distinct end nodes, as `link_cost` takes them (None: the bound min(2b, N))."""

    pairs: int
    decoder: str = "mlp"
    hidden: int = 0
    layers: int = 3
    budget: float | None = None
    ends: tuple[int, ...] | None = None


def estimate_link(spec: ModelSpec, grid: Mapping[str, int] | Sequence[int],
                  calibration: Calibration | None = None, orders: Sequence[str] | None = None,
                  ranks_per_host: int | None = None, placement: Placement | None = None, *,
                  link: LinkOptions) -> Prediction:
    """`estimate` of one link-prediction training step on ``grid``: the encoder ``spec`` (its
    classes: the embedding's columns) priced as the node task's step less its loss's
    collectives (the node loss never runs), plus the pair operator's (`link_cost`); memory is
    `link_memory`'s. The node loss's few element passes stay in the compute."""
    cal = calibration or Calibration()
    p = estimate(spec, grid, cal, orders, ranks_per_host, placement)
    s = normalize_grid(grid)
    spans = placement.spans(s) if placement else {}
    cost = link_cost(spec, s, p.orders, link.pairs, link.decoder, link.hidden, link.layers,
                     link.budget, cal, ranks_per_host, link.ends)
    itemsize = spec.comm_dtype_bytes or EMBED_BYTES
    per_axis = dict(p.comm_s_per_axis)
    for c in p.volume.collectives:
        if c.phase == "loss":  # the node loss's sums
            per_axis[c.axis] -= collective_time(c, cal, spec.dtype_bytes, ranks_per_host,
                                                p.links.get(c.axis), spans.get(c.axis),
                                                spec.collectives)
    pairs = [replace(c, itemsize=itemsize) for c in cost.collectives]
    for c in pairs:
        per_axis[c.axis] += collective_time(c, cal, itemsize, ranks_per_host,
                                            p.links.get(c.axis), spans.get(c.axis),
                                            spec.collectives)
    kept = [c for c in p.volume.collectives if c.phase != "loss"] + pairs
    comm = sum(per_axis.values())
    return replace(p, time_s=comm + p.compute_s, comm_s=comm,
                   volume=CommVolume(kept, spec.dtype_bytes), comm_s_per_axis=per_axis,
                   memory=link_memory(spec, s, p.orders, cost),
                   link_bytes=epoch_link_bytes(kept, spec, cal, p.links, spans))
