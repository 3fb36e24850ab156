"""Performance model of 3D-parallel GNN training: communication, compute and time per rank, and
the ranking of grids and orders by them (the inputs are `plexus.perfmodel.spec`'s, the memory
model `plexus.perfmodel.memory`'s; `epoch_memory` here resolves the orders for it).

Everything here follows docs/design.md and reads the declarations of `plexus_partition.model.ops`:
the model's plans (`plexus_partition.model.model.ModelConfig.plans`, the one resolved plan the
engine builds from too), the padded sizes of `plexus_partition.model.layout.padding`, the
collectives of `plexus_partition.model.schedule` (which the engine's ledger is tested against), and
each operator's flops and memory terms. The model is pure arithmetic (no torch), so ``plexus-model``
answers instantly even for billion-edge graphs.

Time is an α-β model per axis plus compute at calibrated flop rates, summed without overlap:
a collective costs steps·α + bytes_moved·β, sparse work (SpMM, SDDMM, per-edge) runs at the
SpMM rate, a GEMM 2·m·k·n flops at the GEMM rate, and the memory-bound elementwise work around
the stages (dropout's hash mask, ReLU, bias, the loss: element passes) at the elementwise rate.
On a calibrated CPU machine the step's fixed work (Python, autograd, small operations: per
stage and per step) is added, everything a rank runs on its cores is at its share of them once
ranks outnumber the cores, and a collective among local ranks costs the latency per call and β
measured for groups of its size in a world of that many ranks (`collective_time`).
"""


from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

from plexus_partition.model.grid import AXES, GridShape
from plexus_partition.model.layout import ORDERS
from plexus_partition.model.model import parse_order
from plexus_partition.model.ops.base import elementwise_passes
from plexus_partition.model.schedule import OPS, Collective, SparseExchange, setup_collectives
from plexus_partition.model.topology import AxisSpan

from .calibration import Calibration
from .forms import collective_parts, epoch_link_bytes, parts_seconds
from .memory import Memory, rank_memory
from .placement import Placement
from .spec import (BEST_ORDER, Grid3, ModelSpec, normalize_grid, spec_collectives, spec_layout,
    spec_sizes, stage_operators)

__all__ = ["BEST_ORDER", "Grid3", "ModelSpec", "normalize_grid", "Memory", "CommVolume",
           "Compute", "Prediction", "collectives", "epoch_volume", "epoch_compute",
           "epoch_memory", "collective_time", "estimate", "factorizations", "rank_configs",
           "choose_grid", "choose_orders"]

# Above this many layers choose_orders searches greedily instead of over all 2^L orders.
_EXHAUSTIVE_ORDER_LAYERS = 12


# ---------------------------------------------------------------------------------------------
# Communication
# ---------------------------------------------------------------------------------------------
def _empty_table() -> dict[str, dict[str, float]]:
    return {a: {op: 0.0 for op in OPS} for a in AXES}


@dataclass
class CommVolume:
    """Per-rank communication of one epoch.

    ``elements[axis][op]`` and ``bytes[axis][op]`` (axis in x/y/z, op in `OPS`) hold what one
    rank moves; ``calls[axis][op]`` how many collectives it issues (size-1 axes issue none);
    ``collectives`` lists them in program order. ``volume["x"]["all_reduce"]`` indexes
    ``elements``. `flat` gives the engine ledger's keying, {(axis, op): elements}.
    """

    collectives: list[Collective]
    dtype_bytes: int
    elements: dict[str, dict[str, float]] = field(default_factory=_empty_table, init=False)
    bytes: dict[str, dict[str, float]] = field(default_factory=_empty_table, init=False)
    calls: dict[str, dict[str, int]] = field(init=False, default_factory=lambda: {
        a: {op: 0 for op in OPS} for a in AXES})

    def __post_init__(self) -> None:
        for c in self.collectives:
            self.elements[c.axis][c.op] += c.elements
            self.bytes[c.axis][c.op] += c.elements * (c.itemsize or self.dtype_bytes)
            self.calls[c.axis][c.op] += 1

    def __getitem__(self, axis: str) -> dict[str, float]:
        return self.elements[axis]

    @property
    def total_elements(self) -> float:
        """Elements one rank moves in the epoch, all axes and operations."""
        return sum(sum(ops.values()) for ops in self.elements.values())

    @property
    def total_bytes(self) -> float:
        """Bytes one rank moves in the epoch."""
        return sum(sum(ops.values()) for ops in self.bytes.values())

    def per_axis(self, what: str = "elements") -> dict[str, float]:
        """Totals per axis of ``what`` ("elements", "bytes" or "calls")."""
        table = getattr(self, what)
        return {a: sum(table[a].values()) for a in AXES}

    def flat(self, what: str = "elements") -> dict[tuple[str, str], float]:
        """{(axis, op): value} for every pair with at least one call, as the ledger keys it."""
        table = getattr(self, what)
        return {(a, op): table[a][op] for a in AXES for op in OPS if self.calls[a][op]}

    def by_name(self) -> dict[str, float]:
        """Elements per collective name over all layers, e.g. {"AR(AGG)": ..., "loss": ...}."""
        out: dict[str, float] = {}
        for c in self.collectives:
            out[c.name] = out.get(c.name, 0.0) + c.elements
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary."""
        return {"elements": self.elements, "bytes": self.bytes, "calls": self.calls,
                "total_elements": self.total_elements, "total_bytes": self.total_bytes}


def collectives(spec: ModelSpec, grid: Grid3 | Mapping[str, int],
                orders: Sequence[str] | None = None, evaluate: bool = False,
                exchange: SparseExchange | None = None) -> list[Collective]:
    """Every collective one rank issues in one training epoch, in program order
    (`plexus_partition.model.schedule.epoch_collectives` for this spec and grid, with its payload
    precision, kept input and sparse exchanges).

    ``orders`` (one per GNN layer) overrides the model's (needed with ``best_orders``).
    Collectives over axes of size 1 are left out: they move nothing and cost nothing.
    ``evaluate`` appends what the trainer's evaluation after the step issues (phase "eval").
    ``exchange``: the sparse exchanges with one rank's exact row counts (from its shard:
    `plexus_partition.model.schedule.exact_rows`); default, the spec's estimate from the mean
    degree.
    """
    shape = normalize_grid(grid)
    return spec_collectives(spec, shape, _resolve_orders(spec, shape, orders), evaluate,
                            exchange)


def setup_volume(spec: ModelSpec, grid: Grid3 | Mapping[str, int],
                 orders: Sequence[str] | None = None) -> CommVolume:
    """Per-rank communication of the model's set-up, once per run: layer 0's fixed features
    gathered once when ``spec.kept_input`` (`plexus_partition.model.schedule.setup_collectives`)."""
    shape = normalize_grid(grid)
    plans, pad = spec_layout(spec, shape, _resolve_orders(spec, shape, orders))
    return CommVolume(setup_collectives(plans, shape, pad, kept_input=spec.kept_input),
                      spec.dtype_bytes)


def epoch_volume(spec: ModelSpec, grid: Grid3 | Mapping[str, int],
                 orders: Sequence[str] | None = None, evaluate: bool = False,
                 exchange: SparseExchange | None = None) -> CommVolume:
    """Per-rank communication of one training epoch (forward, loss, backward) on ``grid``;
    with ``evaluate``, plus the evaluation pass that follows it (see `collectives`).

    Example: ``v = epoch_volume(ModelSpec(1000, 10000, 64, 8), (2, 2, 2))``, then
    ``v["x"]["all_reduce"]`` (elements per axis and op), ``v.total_bytes``, ``v.flat()``.
    """
    return CommVolume(collectives(spec, grid, orders, evaluate, exchange), spec.dtype_bytes)


# ---------------------------------------------------------------------------------------------
# Compute and memory
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Compute:
    """Flops per rank of one epoch, assuming the non-zeros spread evenly over the Â blocks, and
    the element passes of its memory-bound elementwise work (dropout, ReLU, bias, the loss:
    `plexus_partition.model.ops.base.elementwise_passes`), which run at the calibrated elementwise
    rate."""

    spmm_flops: float
    gemm_flops: float
    elementwise: float = 0.0
    passes: tuple[tuple[float, float], ...] = ()  # the sparse products: (nnz, width) each

    @property
    def total(self) -> float:
        return self.spmm_flops + self.gemm_flops

    def sparse_seconds(self, calibration: Calibration, spmm_rate: float,
                       dtype_bytes: int = 4) -> float:
        """Seconds of the sparse work: with a measured float32 SpMM byte model
        (`Calibration.spmm_cost`) and float32 compute, each product by its bytes per non-zero
        at its width and the rest (per-edge work) at ``spmm_rate``; otherwise every sparse
        flop at ``spmm_rate``."""
        cost = calibration.spmm_cost
        if cost is None or dtype_bytes != 4:
            return self.spmm_flops / spmm_rate
        products = sum(2.0 * nnz * w for nnz, w in self.passes)
        return (sum(cost.seconds(nnz, w) for nnz, w in self.passes)
                + max(0.0, self.spmm_flops - products) / spmm_rate)


def epoch_compute(spec: ModelSpec, grid: Grid3 | Mapping[str, int],
                  orders: Sequence[str] | None = None) -> Compute:
    """Sparse (SpMM, SDDMM, per-edge) and GEMM flops one rank runs per epoch: each stage's
    operator declares its own (`plexus_partition.model.ops`, ``flops``); and the element passes of
    the elementwise work around the stages
    (`plexus_partition.model.ops.base.elementwise_passes`)."""
    s = normalize_grid(grid)
    spmm = gemm = elementwise = 0.0
    passes: list[tuple[float, float]] = []
    for z in spec_sizes(spec, s, _resolve_orders(spec, s, orders)):
        for op in stage_operators(z.plan):
            f = op.flops(z)
            spmm, gemm = spmm + f.spmm, gemm + f.gemm
            passes.extend(f.passes)
        elementwise += elementwise_passes(z, spec.model.activates(z.plan))
    return Compute(spmm, gemm, elementwise, tuple(passes))


def epoch_memory(spec: ModelSpec, grid: Grid3 | Mapping[str, int],
                 orders: Sequence[str] | None = None,
                 coords: Mapping[str, int] | None = None) -> Memory:
    """Bytes one rank holds at the peak of a training epoch on ``grid``, following the engine
    step by step (`plexus.perfmodel.memory.rank_memory`): the rank at grid coordinates
    ``coords``, or without them the rank that holds the most; ``orders`` as `collectives`."""
    s = normalize_grid(grid)
    return rank_memory(spec, s, _resolve_orders(spec, s, orders), coords)


# ---------------------------------------------------------------------------------------------
# Time, ranking
# ---------------------------------------------------------------------------------------------
@dataclass
class Prediction:
    """The model's verdict on one grid."""

    grid: Grid3
    orders: tuple[str, ...]
    time_s: float
    comm_s: float
    compute_s: float
    volume: CommVolume
    compute: Compute
    memory: Memory
    comm_s_per_axis: dict[str, float]
    fits: bool = True  # within the memory limit given to rank_configs
    links: dict[str, str] = field(default_factory=dict)  # axis -> link class, when placed
    overhead_s: float = 0.0  # the step's fixed work, part of compute_s (`Calibration.overhead`)
    node: tuple[int, int, int] | None = None  # ranks of x, y, z per node, when placed
    link_bytes: dict[str, float] = field(default_factory=dict)  # sent per link class, placed

    @property
    def comm_fraction(self) -> float:
        return self.comm_s / self.time_s if self.time_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"grid": list(self.grid), "orders": list(self.orders), "time_s": self.time_s,
                "comm_s": self.comm_s, "compute_s": self.compute_s,
                "overhead_s": self.overhead_s,
                "comm_s_per_axis": self.comm_s_per_axis, "links": self.links,
                "node": list(self.node) if self.node else None, "link_bytes": self.link_bytes,
                "comm_elements": self.volume.total_elements, "comm_bytes": self.volume.total_bytes,
                "comm": self.volume.to_dict(), "spmm_flops": self.compute.spmm_flops,
                "gemm_flops": self.compute.gemm_flops,
                "elementwise_passes": self.compute.elementwise, "memory_bytes": self.memory.total,
                "memory": self.memory.to_dict(), "fits": self.fits}


def collective_time(c: Collective, calibration: Calibration, dtype_bytes: int = 4,
                    ranks_per_host: int | None = None, link_class: str | None = None,
                    span: AxisSpan | None = None, collectives: str = "flat") -> float:
    """Time of one collective. Among ``ranks_per_host`` local ranks sharing a calibrated
    host's cores, with neither an axis override nor a cluster's ``link_class``: the latency
    per call plus bytes moved per rank·β measured for groups of its size in such a world
    (`Calibration.group_link`). Otherwise the α-β ring: steps·α + bytes moved per rank·β, with
    the (α, β) of its axis, of its ``link_class`` on a cluster, or of a world of
    ``ranks_per_host`` local ranks (`Calibration.link`). On a cluster, given the axis's
    ``span``, in the form ``collectives`` picks (`plexus.perfmodel.forms`)."""
    if span is not None and link_class is not None and span.split:
        pieces = collective_parts(c, collectives, calibration, link_class, span, dtype_bytes)
        return parts_seconds(pieces, calibration, link_class, c.itemsize or dtype_bytes)
    moved = c.elements * (c.itemsize or dtype_bytes)
    if link_class is None and not any(a == c.axis for a, _, _ in calibration.axes):
        measured = calibration.group_link(ranks_per_host, c.group)
        if measured is not None:
            latency, beta = measured
            return latency + moved * beta
    alpha, beta = calibration.link(c.axis, ranks_per_host, link_class)
    return c.steps * alpha + moved * beta


def pieces(c: Collective, spec: ModelSpec) -> int:
    """How many all-reduces the engine issues for the declared collective ``c``: an
    aggregation's forward sum is cut into ``agg_chunks`` row pieces (a sparse exchange is one
    piece), everything else is one call."""
    if c.rows is None or c.op != "all_reduce" or c.phase not in ("forward", "eval"):
        return 1
    return max(1, min(spec.agg_chunks, c.rows))


def priced_time(c: Collective, spec: ModelSpec, calibration: Calibration,
                ranks_per_host: int | None, link_class: str | None, spmm_rate: float,
                shape: Mapping[str, int], span: AxisSpan | None = None) -> float:
    """The time one collective adds to the epoch: `collective_time`; for an aggregation's sum
    cut into k pieces, k calls' latency, less, with ``overlap``, what the pipeline hides: piece
    j's all-reduce runs while piece j+1's SpMM computes, so of k pieces of SpMM time s and
    all-reduce time r each, (k-1)·min(s, r) is hidden. The SpMM's flops are 2·nnz_blk·width
    (nnz_blk = nnz/(|rows|·|cols|) spread evenly, width = size/rows), at ``spmm_rate``."""
    k = pieces(c, spec)
    whole = collective_time(c, calibration, spec.dtype_bytes, ranks_per_host, link_class, span,
                            spec.collectives)
    if k == 1:
        return whole
    alone = collective_time(replace(c, size=0), calibration, spec.dtype_bytes, ranks_per_host,
                            link_class)  # the latency of one call
    total = whole + (k - 1) * alone
    if not spec.overlap:
        return total
    # nnz_blk·width = nnz/(|rows|·p)·size/rows with rows = N/|rows|: nnz·size/(p·N)
    spmm = 2.0 * spec.nnz * c.size / (c.group * _padded_nodes(spec, shape)) / spmm_rate
    return total - (k - 1) * min(spmm / k, total / k)


def _padded_nodes(spec: ModelSpec, shape: Mapping[str, int]) -> int:
    world = shape["x"] * shape["y"] * shape["z"]
    return -(-spec.num_nodes // world) * world


def _resolve_orders(spec: ModelSpec, shape: Mapping[str, int], orders: Sequence[str] | None,
                    calibration: Calibration | None = None,
                    ranks_per_host: int | None = None,
                    placement: Placement | None = None) -> tuple[str, ...]:
    """The per-layer orders to price: ``orders`` (validated), the model's, or with
    ``best_orders`` the fastest on this grid (priced as `estimate` prices it)."""
    if orders is not None:
        return parse_order(tuple(orders), spec.model.num_layers)  # type: ignore[return-value]
    fixed = spec.fixed_orders()
    if fixed is None:
        return choose_orders(spec, (shape["x"], shape["y"], shape["z"]), calibration,
                             ranks_per_host, placement)
    return fixed


def estimate(spec: ModelSpec, grid: Grid3 | Mapping[str, int],
             calibration: Calibration | None = None,
             orders: Sequence[str] | None = None,
             ranks_per_host: int | None = None,
             placement: Placement | None = None) -> Prediction:
    """Predicted epoch time (communication + compute; the only overlap priced is the
    aggregation's pieces' with ``overlap``: `priced_time`), volume and memory on ``grid``.

    Compute is flops at the SpMM and GEMM rates plus element passes at the elementwise rate,
    divided by the share of a core each rank gets when ``ranks_per_host`` ranks share the
    calibrated machine's cores (`Calibration.core_share`; None: one rank per device); the
    collectives are priced with the (α, β) measured on a local world of that many ranks when
    the calibration has one (`Calibration.link`). With a ``placement`` on a GPU cluster each
    axis's collectives take the (α, β) of the link class they cross (`Placement.axis_links`).
    The rates are the calibration's at the spec's precision (`Calibration.rates`). A
    placement that may ``arrange`` the grid's axes on nodes is priced at each block of the grid
    a node can hold (`Placement.arrangements`), the fastest kept (ties: the launcher's)."""
    cal = calibration or Calibration()
    s = normalize_grid(grid)
    if placement is not None and placement.arrange:
        return min((estimate(spec, grid, cal, orders, ranks_per_host, p)
                    for p in placement.arrangements(s)), key=lambda p: p.time_s)
    orders = _resolve_orders(spec, s, orders, cal, ranks_per_host, placement)
    vol = epoch_volume(spec, s, orders)
    comp = epoch_compute(spec, s, orders)
    mem = epoch_memory(spec, s, orders)
    links = placement.axis_links(s) if placement else {}
    spans = placement.spans(s) if placement else {}
    spmm_rate, gemm_rate, elementwise_rate = cal.rates(spec.dtype_bytes)
    # everything the rank runs on its cores, its fixed work too, at its share of them
    share = cal.core_share(ranks_per_host)
    per_axis = {a: 0.0 for a in AXES}
    for c in vol.collectives:
        per_axis[c.axis] += priced_time(c, spec, cal, ranks_per_host, links.get(c.axis),
                                        spmm_rate * share, s, spans.get(c.axis))
    comm_s = sum(per_axis.values())
    overhead_s = cal.overhead(len(spec.plans(orders))) / share
    compute_s = (comp.sparse_seconds(cal, spmm_rate, spec.dtype_bytes)
                 + comp.gemm_flops / gemm_rate
                 + comp.elementwise / elementwise_rate) / share + overhead_s
    return Prediction((s["x"], s["y"], s["z"]), tuple(orders), comm_s + compute_s, comm_s,
                      compute_s, vol, comp, mem, per_axis, links=links, overhead_s=overhead_s,
                      node=placement.block(s) if placement else None,
                      link_bytes=epoch_link_bytes(vol.collectives, spec, cal, links, spans))


def factorizations(world_size: int) -> list[Grid3]:
    """Every ordered triple (X, Y, Z) of positive integers with X·Y·Z = world_size."""
    try:
        return [g.dims for g in GridShape.factorizations(world_size)]
    except ValueError as e:  # GridError: keep this module's plain ValueError contract
        raise ValueError(str(e)) from None


def rank_configs(world_size: int, spec: ModelSpec, calibration: Calibration | None = None,
                 memory_limit: float | None = None, ranks_per_host: int | None = None,
                 placement: Placement | None = None, price: Any = None) -> list[Prediction]:
    """Predictions for every factorization of ``world_size``, fastest first, each priced as
    ``price`` (default `estimate`; `linkcost.estimate_link` for the link task) prices it for
    ``ranks_per_host`` ranks per host (or on a cluster, ``placement``).

    Grids over ``memory_limit`` bytes per rank (if given) are kept but flagged ``fits=False`` and
    ranked after every grid that fits; where keeping stage 0's gathered input
    (`ModelSpec.keep_input`) is what breaks the limit, the grid is priced gathering it every
    step instead (as the engine chooses). Ties break on memory, then on the grid tuple.
    """
    preds, price = [], price or estimate
    for g in factorizations(world_size):
        p = price(spec, g, calibration, ranks_per_host=ranks_per_host, placement=placement)
        p.fits = memory_limit is None or p.memory.total <= memory_limit
        if not p.fits and spec.kept_input:  # the kept input is chosen where memory allows
            alt = price(replace(spec, keep_input=False), g, calibration,
                        ranks_per_host=ranks_per_host, placement=placement)
            if alt.memory.total <= memory_limit:  # type: ignore[operator]
                p = alt
        preds.append(p)
    preds.sort(key=lambda p: (not p.fits, p.time_s, p.memory.total, p.grid))
    return preds


def choose_grid(world_size: int, spec: ModelSpec, calibration: Calibration | None = None,
                memory_limit: float | None = None, ranks_per_host: int | None = None,
                placement: Placement | None = None) -> Grid3:
    """The (X, Y, Z) with X·Y·Z = world_size that the model predicts fastest (within the memory
    limit when one fits); what ``plexus-train --grid auto`` uses."""
    return rank_configs(world_size, spec, calibration, memory_limit, ranks_per_host,
                        placement)[0].grid


def choose_orders(spec: ModelSpec, grid: Grid3 | Mapping[str, int],
                  calibration: Calibration | None = None,
                  ranks_per_host: int | None = None,
                  placement: Placement | None = None) -> tuple[str, ...]:
    """Per-layer product order ("agg"/"combine") with the lowest predicted epoch time on ``grid``
    (priced by `estimate` for ``ranks_per_host`` ranks per host).

    The order of one layer changes the roles of all later ones, so up to 12 layers every one of
    the 2^L combinations is compared; deeper models are decided greedily layer by layer (later
    layers aggregate first while an earlier one is decided). Ties keep "agg" (the paper's order).
    """
    s = normalize_grid(grid)
    cal = calibration or Calibration()
    L = spec.model.num_layers

    def cost(orders: tuple[str, ...]) -> float:
        return estimate(spec, s, cal, orders, ranks_per_host, placement).time_s

    if L <= _EXHAUSTIVE_ORDER_LAYERS:
        # product() lists all-"agg" first and min() keeps the first minimum: ties favour "agg".
        return min(itertools.product(ORDERS, repeat=L), key=cost)
    chosen: list[str] = []
    for l in range(L):
        rest = ("agg",) * (L - l - 1)
        chosen.append(min(ORDERS, key=lambda o: cost(tuple(chosen) + (o,) + rest)))
    return tuple(chosen)
