"""Performance model of 3D-parallel GCN training: communication, compute, memory and time per rank.

Everything here follows ``shared/design/3d-algorithm.md`` and the per-layer roles of
`plexus.schedule`; sizes are the padded ones from `plexus.schedule.padding`. The model is pure
arithmetic (no torch), so ``plexus-model`` answers instantly even for billion-edge graphs.

Communication of one training epoch (forward + backward + loss), per rank, ring algorithms: an
all-reduce of n elements over p ranks moves 2(p-1)/p·n elements in 2(p-1) steps, an all-gather or
reduce-scatter whose full size is n moves (p-1)/p·n in p-1 steps. Collectives over an axis of size
1 are not issued and move nothing. With (o, i, d) the layer's (outer, inner, depth) axes, D and D'
its padded input and output widths and N the padded node count:

aggregate-first layer (Â·H)·W
  forward   AG(H) over d (layer 0 only)  n = N·D/(|o||i|)
            AR(AGG) over o               n = N·D/(|d||i|)
            AG(W) over d                 n = D·D'/(|i||o|)
            AR(OUT) over i               n = N·D'/(|d||o|)
  backward  RS(dW) over d                n = D·D'/(|i||o|)
            AR(dAGG) over o              n = N·D/(|d||i|)   (see below for layer 0)
            AR(dH) over d (layer > 0)    n = N·D/(|o||i|)   layer 0: RS over d if features learn
combine-first layer Â·(H·W)
  forward   AG(H) over d (layer 0 only)  n = N·D/(|o||i|)
            AG(W) over o                 n = D·D'/(|i||d|)
            AR(Z) over i                 n = N·D'/(|o||d|)
            AR(OUT) over o               n = N·D'/(|i||d|)
  backward  AR(dZ) over i                n = N·D'/(|o||d|)
            RS(dW) over o                n = D·D'/(|i||d|)
            AR(dH) over d (layer > 0)    n = N·D/(|o||i|)   layer 0: RS over d if features learn
Layer 0 with fixed (not learnable) input features needs no dH, hence no dAGG either: autograd
skips dAGG's GEMM and its all-reduce, and the model leaves them out (the design doc lists AR(dAGG)
for every layer; the engine, `plexus.layer`, does not issue it on layer 0).
bias      AR(db) over the layer's output-rows axis, n = D'/|out_cols|
loss      AR-MAX of N/|rows| and AR-SUM of 2·N/|rows| over the class axis (the last layer's
          out_cols), AR-SUM of 1 element over its rows axis (out_rows)

Time is an α-β model per axis plus compute at calibrated flop rates, summed without overlap:
a collective costs steps·α + bytes_moved·β, an SpMM 2·nnz_block·width flops, a GEMM 2·m·k·n.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import operator
import os
import sys
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Mapping, Sequence

from plexus.schedule import AXES, ORDERS, LayerPlan, layer_plans, padding
from plexus.units import format_bytes, format_seconds

OPS = ("all_reduce", "all_gather", "reduce_scatter")
# Above this many layers choose_orders searches greedily instead of over all 2^L orders.
_EXHAUSTIVE_ORDER_LAYERS = 12
# Up to this many stored edges plexus-model normalizes the loaded graph for Â's exact nnz.
_EXACT_NNZ_LIMIT = 50_000_000

Grid3 = tuple[int, int, int]


# ---------------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ModelSpec:
    """The problem: graph sizes and the GCN.

    ``nnz`` is the number of non-zeros of the GCN-normalized Â (self loops included).
    ``order`` is "agg", "combine", "auto" (combine first on layers that narrow, as
    `plexus.config.ModelConfig`), "best" (the orders `choose_orders` predicts fastest, per grid),
    a comma-separated list or a sequence with one of "agg"/"combine" per layer.
    ``perm`` only affects memory: "double" keeps two permuted adjacencies (Â1, Â2), so layers of
    different parity never share an Â block.
    """

    num_nodes: int
    nnz: int
    num_features: int
    num_classes: int
    num_layers: int = 2
    hidden: int = 16
    order: str | tuple[str, ...] = "agg"
    bias: bool = True
    learnable_features: bool = False
    perm: str = "double"
    dtype_bytes: int = 4  # float32 features, weights and messages
    index_bytes: int = 8  # int64 CSR indices (torch's default)
    name: str = ""

    def __post_init__(self) -> None:
        for key in ("num_nodes", "nnz", "num_features", "num_classes", "num_layers", "hidden",
                    "dtype_bytes", "index_bytes"):
            value = getattr(self, key)
            try:  # accept numpy integers (sizes often come from arrays), reject floats
                number = operator.index(value)
            except TypeError:
                raise ValueError(f"{key} must be an integer, got {value!r}") from None
            if number < (0 if key == "nnz" else 1):
                raise ValueError(f"{key} must be {'>= 0' if key == 'nnz' else '>= 1'}, "
                                 f"got {number}")
            object.__setattr__(self, key, int(number))  # frozen: normalize in place once

    @classmethod
    def from_config(cls, num_nodes: int, nnz: int, num_features: int, num_classes: int,
                    model: Any, **extra: Any) -> "ModelSpec":
        """Build a spec from a `plexus.config.ModelConfig` (layers, hidden, bias, order, ...)."""
        return cls(num_nodes=num_nodes, nnz=nnz, num_features=num_features,
                   num_classes=num_classes, num_layers=model.num_layers, hidden=model.hidden,
                   order=model.order, bias=model.bias,
                   learnable_features=model.learnable_features, **extra)

    @property
    def widths(self) -> list[int]:
        """Real D_0 .. D_L: input width, hidden widths, class count."""
        return [self.num_features] + [self.hidden] * (self.num_layers - 1) + [self.num_classes]

    def fixed_orders(self) -> tuple[str, ...] | None:
        """The per-layer orders when they do not depend on the grid; None for "best"."""
        order = self.order
        if isinstance(order, str):
            if order == "best":
                return None
            if order == "auto":
                w = self.widths
                return tuple("combine" if w[l + 1] < w[l] else "agg"
                             for l in range(self.num_layers))
            order = tuple(o.strip() for o in order.split(",")) if "," in order else \
                (order,) * self.num_layers
        order = tuple(order)
        if len(order) != self.num_layers:
            raise ValueError(f"order lists {len(order)} layers but the model has "
                             f"{self.num_layers}")
        for o in order:
            if o not in ORDERS:
                raise ValueError(f"unknown layer order {o!r}; use one of {ORDERS}, "
                                 "'auto' or 'best'")
        return order


@dataclass(frozen=True)
class Calibration:
    """Machine rates for the time model.

    ``alpha`` is seconds per collective step (latency), ``beta`` seconds per byte moved by one
    rank; ``axes`` overrides both for single axes, e.g. (("z", 5e-5, 1/12.5e9),) when z crosses
    nodes. The defaults describe an order-of-magnitude GPU node (not this machine): run
    ``plexus-bench calibrate`` for measured numbers.
    """

    spmm_flops: float = 2e11
    gemm_flops: float = 1e13
    alpha: float = 1e-5
    beta: float = 1.0 / 20e9
    axes: tuple[tuple[str, float, float], ...] = ()
    source: str = "defaults"

    def link(self, axis: str) -> tuple[float, float]:
        """(α, β) of collectives over ``axis``."""
        for name, alpha, beta in self.axes:
            if name == axis:
                return alpha, beta
        return self.alpha, self.beta

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, the format `load_calibration` reads."""
        return {"spmm_flops": self.spmm_flops, "gemm_flops": self.gemm_flops,
                "alpha": self.alpha, "beta": self.beta,
                "axes": {a: {"alpha": al, "beta": be} for a, al, be in self.axes},
                "source": self.source}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "dict") -> "Calibration":
        """Read the keys spmm_flops, gemm_flops, alpha, beta and optional axes{x:{alpha,beta}}.

        Missing keys keep their defaults; bad values raise ValueError naming the key.
        """
        if not isinstance(data, Mapping):
            raise ValueError(f"{source}: calibration must be a JSON object")
        base = cls()

        def num(d: Mapping[str, Any], key: str, default: float, where: str) -> float:
            value = d.get(key, default)
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not math.isfinite(value) or value <= 0:
                raise ValueError(f"{source}: {where}{key} must be a positive number, "
                                 f"got {value!r}")
            return float(value)

        axes = []
        raw_axes = data.get("axes", {}) or {}
        if not isinstance(raw_axes, Mapping):
            raise ValueError(f"{source}: axes must be an object like {{\"x\": {{\"alpha\": ...}}}}")
        for axis, link in raw_axes.items():
            if axis not in AXES or not isinstance(link, Mapping):
                raise ValueError(f"{source}: axes.{axis} must be one of x/y/z with alpha/beta")
            axes.append((axis, num(link, "alpha", base.alpha, f"axes.{axis}."),
                         num(link, "beta", base.beta, f"axes.{axis}.")))
        return cls(spmm_flops=num(data, "spmm_flops", base.spmm_flops, ""),
                   gemm_flops=num(data, "gemm_flops", base.gemm_flops, ""),
                   alpha=num(data, "alpha", base.alpha, ""),
                   beta=num(data, "beta", base.beta, ""),
                   axes=tuple(sorted(axes)), source=source)


def load_calibration(path: str | os.PathLike | None) -> Calibration:
    """The calibration in the JSON file at ``path`` (written by ``plexus-bench calibrate``);
    the defaults when ``path`` is None. Raises ValueError on an unreadable or invalid file."""
    if path is None:
        return Calibration()
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as e:
        raise ValueError(f"cannot read calibration {path}: {e.strerror or e}") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"calibration {path} is not valid JSON: {e}") from None
    return Calibration.from_dict(data, source=str(path))


def normalize_grid(grid: Grid3 | Sequence[int] | Mapping[str, int]) -> dict[str, int]:
    """{"x": X, "y": Y, "z": Z} from a 3-tuple or a dict; raises ValueError on bad sizes."""
    if isinstance(grid, Mapping):
        shape = {a: grid[a] for a in AXES}
    else:
        values = tuple(grid)
        if len(values) != 3:
            raise ValueError(f"grid must have 3 axis sizes, got {values!r}")
        shape = dict(zip(AXES, values))
    for axis, size in shape.items():
        if not isinstance(size, int) or size < 1:
            raise ValueError(f"grid axis {axis} must be a positive integer, got {size!r}")
    return shape


# ---------------------------------------------------------------------------------------------
# Communication
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Collective:
    """One collective of an epoch, as a rank issues it.

    ``size`` is the full size n in elements (the all-reduce buffer, the all-gather's output, the
    reduce-scatter's input), the number the engine's ledger records; ``elements`` is what one rank
    moves (ring algorithm).
    """

    name: str  # e.g. "AR(AGG)"
    layer: int | None  # None for the loss
    phase: str  # "forward", "loss", "backward" or "eval"
    op: str  # "all_reduce", "all_gather" or "reduce_scatter"
    axis: str
    group: int
    size: int
    itemsize: int | None = None  # bytes per element; None: the spec's dtype_bytes

    @property
    def elements(self) -> float:
        """Elements moved per rank: 2(p-1)/p·n for an all-reduce, (p-1)/p·n otherwise."""
        p = self.group
        factor = 2.0 if self.op == "all_reduce" else 1.0
        return factor * (p - 1) / p * self.size

    @property
    def steps(self) -> int:
        """Latency-bound steps of the ring: 2(p-1) for an all-reduce, p-1 otherwise."""
        return (2 if self.op == "all_reduce" else 1) * (self.group - 1)


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


def _layer_sizes(plans: Sequence[LayerPlan], shape: Mapping[str, int], spec: ModelSpec):
    pad = padding(dict(shape), plans, spec.num_nodes, spec.widths)
    return pad.nodes_padded, pad.widths_padded


def _div(a: int, b: int) -> int:
    # Padding makes every block size exact; a remainder means the model and schedule disagree.
    q, r = divmod(a, b)
    assert r == 0, f"{a} is not divisible by {b}: padding does not match the layout"
    return q


def collectives(spec: ModelSpec, grid: Grid3 | Mapping[str, int],
                orders: Sequence[str] | None = None, evaluate: bool = False) -> list[Collective]:
    """Every collective one rank issues in one training epoch, in program order.

    ``orders`` overrides ``spec.order`` (needed when it is "best"). Collectives over axes of size
    1 are left out: they move nothing and cost nothing. ``evaluate`` appends what the trainer's
    evaluation after the step issues (phase "eval"): the forward once more, then the accuracy's
    argmax (AR-MAX float32 and AR-MIN int64 of N/|rows| over the class axis) and the hit counts
    of the 3 masks (AR-SUM float64 over the rows axis).
    """
    shape = normalize_grid(grid)
    orders = _resolve_orders(spec, shape, orders)
    plans = layer_plans(spec.num_layers, list(orders))
    n, widths = _layer_sizes(plans, shape, spec)
    s = shape
    out: list[Collective] = []

    def add(name: str, layer: int | None, phase: str, op: str, axis: str, size: int,
            itemsize: int | None = None) -> None:
        if s[axis] > 1:
            out.append(Collective(name, layer, phase, op, axis, s[axis], size, itemsize))

    def forward(phase: str) -> None:
        for p in plans:
            o, i, d = p.outer, p.inner, p.depth
            D, D2 = widths[p.index], widths[p.index + 1]
            if p.index == 0:
                add("AG(H)", 0, phase, "all_gather", d, _div(n * D, s[o] * s[i]))
            if p.order == "agg":
                add("AR(AGG)", p.index, phase, "all_reduce", o, _div(n * D, s[d] * s[i]))
                add("AG(W)", p.index, phase, "all_gather", d, _div(D * D2, s[i] * s[o]))
                add("AR(OUT)", p.index, phase, "all_reduce", i, _div(n * D2, s[d] * s[o]))
            else:
                add("AG(W)", p.index, phase, "all_gather", o, _div(D * D2, s[i] * s[d]))
                add("AR(Z)", p.index, phase, "all_reduce", i, _div(n * D2, s[o] * s[d]))
                add("AR(OUT)", p.index, phase, "all_reduce", o, _div(n * D2, s[i] * s[d]))

    forward("forward")
    # loss on the last layer's layout: rows cut by out_rows, classes by out_cols
    last = plans[-1]
    rows, cls_axis = last.out_rows, last.out_cols
    add("loss", None, "loss", "all_reduce", cls_axis, _div(n, s[rows]))  # row max
    add("loss", None, "loss", "all_reduce", cls_axis, 2 * _div(n, s[rows]))  # sum exp, target
    add("loss", None, "loss", "all_reduce", rows, 1)  # sum of per-node losses

    # backward, last layer first
    for p in reversed(plans):
        o, i, d = p.outer, p.inner, p.depth
        D, D2 = widths[p.index], widths[p.index + 1]
        if spec.bias:
            add("AR(db)", p.index, "backward", "all_reduce", p.out_rows, _div(D2, s[p.out_cols]))
        dh = _div(n * D, s[o] * s[i])
        need_dh = p.index > 0 or spec.learnable_features
        if p.order == "agg":
            add("RS(dW)", p.index, "backward", "reduce_scatter", d, _div(D * D2, s[i] * s[o]))
            if need_dh:  # dAGG only feeds dH; autograd skips both for fixed input features
                add("AR(dAGG)", p.index, "backward", "all_reduce", o, _div(n * D, s[d] * s[i]))
        else:
            add("AR(dZ)", p.index, "backward", "all_reduce", i, _div(n * D2, s[o] * s[d]))
            add("RS(dW)", p.index, "backward", "reduce_scatter", o, _div(D * D2, s[i] * s[d]))
        if p.index > 0:
            add("AR(dH)", p.index, "backward", "all_reduce", d, dh)
        elif spec.learnable_features:
            add("RS(dH)", 0, "backward", "reduce_scatter", d, dh)

    if evaluate:
        forward("eval")
        add("accuracy", None, "eval", "all_reduce", cls_axis, _div(n, s[rows]))  # row max
        add("accuracy", None, "eval", "all_reduce", cls_axis, _div(n, s[rows]), 8)  # argmin id
        add("accuracy", None, "eval", "all_reduce", rows, 3, 8)  # hits of train/val/test
    return out


def epoch_volume(spec: ModelSpec, grid: Grid3 | Mapping[str, int],
                 orders: Sequence[str] | None = None, evaluate: bool = False) -> CommVolume:
    """Per-rank communication of one training epoch (forward, loss, backward) on ``grid``;
    with ``evaluate``, plus the evaluation pass that follows it (see `collectives`).

    Example: ``v = epoch_volume(ModelSpec(1000, 10000, 64, 8), (2, 2, 2))``, then
    ``v["x"]["all_reduce"]`` (elements per axis and op), ``v.total_bytes``, ``v.flat()``.
    """
    return CommVolume(collectives(spec, grid, orders, evaluate), spec.dtype_bytes)


# ---------------------------------------------------------------------------------------------
# Compute and memory
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Compute:
    """Flops per rank of one epoch, assuming the non-zeros spread evenly over the Â blocks."""

    spmm_flops: float
    gemm_flops: float

    @property
    def total(self) -> float:
        return self.spmm_flops + self.gemm_flops


def epoch_compute(spec: ModelSpec, grid: Grid3 | Mapping[str, int],
                  orders: Sequence[str] | None = None) -> Compute:
    """SpMM (2·nnz_block·width) and GEMM (2·m·k·n) flops one rank runs per epoch.

    Per layer: forward one SpMM and one GEMM; backward two GEMMs (dW and the data gradient) and
    one SpMM, except that layer 0 skips what only feeds dH (aggregate-first: the dAGG GEMM and the
    Âᵀ SpMM; combine-first: the dH GEMM) unless the features are learnable.
    """
    s = normalize_grid(grid)
    orders = _resolve_orders(spec, s, orders)
    plans = layer_plans(spec.num_layers, list(orders))
    n, widths = _layer_sizes(plans, s, spec)
    spmm = gemm = 0.0
    for p in plans:
        o, i, d = s[p.outer], s[p.inner], s[p.depth]
        D, D2 = widths[p.index], widths[p.index + 1]
        need_dh = p.index > 0 or spec.learnable_features
        nnz_blk = spec.nnz / (s[p.a_rows] * s[p.a_cols])
        if p.order == "agg":
            sp_one = 2.0 * nnz_blk * D / i  # Â(d×o) · H(o×i)
            mm_one = 2.0 * (n / d) * (D / i) * (D2 / o)  # AGG(d×i) · W(i×o)
            spmm += sp_one * (2 if need_dh else 1)  # forward, dH
            gemm += mm_one * (3 if need_dh else 2)  # forward, dW, dAGG
        else:
            sp_one = 2.0 * nnz_blk * D2 / d  # Â(i×o) · Z(o×d)
            mm_one = 2.0 * (n / o) * (D / i) * (D2 / d)  # H(o×i) · W(i×d)
            spmm += sp_one * 2  # forward and dZ
            gemm += mm_one * (3 if need_dh else 2)  # forward, dW, dH
    return Compute(spmm, gemm)


@dataclass(frozen=True)
class Memory:
    """Bytes per rank, by component (an estimate of the steady-state peak)."""

    adjacency: float  # Â blocks and their transposes (CSR)
    features: float  # layer 0's stored feature shard (+ gradient and Adam state if learnable)
    activations: float  # what autograd keeps for backward, per layer
    workspace: float  # largest set of gradient buffers alive at once in backward
    weights: float  # weight and bias shards, their gradients and the gathered W blocks
    optimizer: float  # Adam's two moments of every parameter shard

    @property
    def total(self) -> float:
        return (self.adjacency + self.features + self.activations + self.workspace
                + self.weights + self.optimizer)

    def to_dict(self) -> dict[str, float]:
        return {**asdict(self), "total": self.total}


def epoch_memory(spec: ModelSpec, grid: Grid3 | Mapping[str, int],
                 orders: Sequence[str] | None = None) -> Memory:
    """Bytes one rank holds: Â blocks (with transposes), features, saved activations, gradient
    workspace, parameters with gradients, and Adam state."""
    s = normalize_grid(grid)
    orders = _resolve_orders(spec, s, orders)
    plans = layer_plans(spec.num_layers, list(orders))
    n, widths = _layer_sizes(plans, s, spec)
    fb, ib = spec.dtype_bytes, spec.index_bytes

    # One Â block per distinct (adjacency, rows axis, cols axis); CSR of Â and of Âᵀ.
    blocks = {(p.adj if spec.perm == "double" else 1, p.a_rows, p.a_cols) for p in plans}
    adjacency = 0.0
    for _k, r, c in blocks:
        nnz_blk = spec.nnz / (s[r] * s[c])
        adjacency += 2 * nnz_blk * (fb + ib) + (n / s[r] + 1 + n / s[c] + 1) * ib

    first = plans[0]
    feat_shard = n * widths[0] / (s[first.outer] * s[first.inner] * s[first.depth])
    features = feat_shard * fb * (4 if spec.learnable_features else 1)

    activations = workspace = weights = optimizer = 0.0
    for p in plans:
        o, i, d = s[p.outer], s[p.inner], s[p.depth]
        D, D2 = widths[p.index], widths[p.index + 1]
        h_in = n / o * D / i
        if p.order == "agg":
            inter, out, w_blk = n / d * D / i, n / d * D2 / o, D / i * D2 / o
        else:
            inter, out, w_blk = n / o * D2 / d, n / i * D2 / d, D / i * D2 / d
        w_shard = w_blk / s[p.w_flat]
        bias = D2 / s[p.out_cols] if spec.bias else 0.0
        activations += (h_in + inter + out + w_blk) * fb  # input, intermediate, output, gathered W
        workspace = max(workspace, (out + inter + h_in) * fb)  # dOUT, d(intermediate), dH
        weights += (2 * (w_shard + bias)) * fb  # parameter and gradient
        optimizer += 2 * (w_shard + bias) * fb
    return Memory(adjacency, features, activations, workspace, weights, optimizer)


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

    @property
    def comm_fraction(self) -> float:
        return self.comm_s / self.time_s if self.time_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"grid": list(self.grid), "orders": list(self.orders), "time_s": self.time_s,
                "comm_s": self.comm_s, "compute_s": self.compute_s,
                "comm_s_per_axis": self.comm_s_per_axis,
                "comm_elements": self.volume.total_elements, "comm_bytes": self.volume.total_bytes,
                "comm": self.volume.to_dict(), "spmm_flops": self.compute.spmm_flops,
                "gemm_flops": self.compute.gemm_flops, "memory_bytes": self.memory.total,
                "memory": self.memory.to_dict(), "fits": self.fits}


def collective_time(c: Collective, calibration: Calibration, dtype_bytes: int = 4) -> float:
    """α-β time of one ring collective: steps·α + bytes moved per rank·β."""
    alpha, beta = calibration.link(c.axis)
    return c.steps * alpha + c.elements * (c.itemsize or dtype_bytes) * beta


def _resolve_orders(spec: ModelSpec, shape: Mapping[str, int], orders: Sequence[str] | None,
                    calibration: Calibration | None = None) -> tuple[str, ...]:
    if orders is not None:
        return replace(spec, order=tuple(orders)).fixed_orders()  # validates
    fixed = spec.fixed_orders()
    if fixed is None:
        return choose_orders(spec, (shape["x"], shape["y"], shape["z"]), calibration)
    return fixed


def predict(spec: ModelSpec, grid: Grid3 | Mapping[str, int],
            calibration: Calibration | None = None,
            orders: Sequence[str] | None = None) -> Prediction:
    """Predicted epoch time (communication + compute, no overlap), volume and memory on ``grid``."""
    cal = calibration or Calibration()
    s = normalize_grid(grid)
    orders = _resolve_orders(spec, s, orders, cal)
    vol = epoch_volume(spec, s, orders)
    comp = epoch_compute(spec, s, orders)
    mem = epoch_memory(spec, s, orders)
    per_axis = {a: 0.0 for a in AXES}
    for c in vol.collectives:
        per_axis[c.axis] += collective_time(c, cal, spec.dtype_bytes)
    comm_s = sum(per_axis.values())
    compute_s = comp.spmm_flops / cal.spmm_flops + comp.gemm_flops / cal.gemm_flops
    return Prediction((s["x"], s["y"], s["z"]), tuple(orders), comm_s + compute_s, comm_s,
                      compute_s, vol, comp, mem, per_axis)


def factorizations(world_size: int) -> list[Grid3]:
    """Every ordered triple (X, Y, Z) of positive integers with X·Y·Z = world_size."""
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world size must be a positive integer, got {world_size!r}")
    out = []
    for x in range(1, world_size + 1):
        if world_size % x:
            continue
        rest = world_size // x
        for y in range(1, rest + 1):
            if rest % y == 0:
                out.append((x, y, rest // y))
    return out


def rank_configs(world_size: int, spec: ModelSpec, calibration: Calibration | None = None,
                 memory_limit: float | None = None) -> list[Prediction]:
    """Predictions for every factorization of ``world_size``, fastest first.

    Grids over ``memory_limit`` bytes per rank (if given) are kept but flagged ``fits=False`` and
    ranked after every grid that fits. Ties break on memory, then on the grid tuple.
    """
    preds = [predict(spec, g, calibration) for g in factorizations(world_size)]
    for p in preds:
        p.fits = memory_limit is None or p.memory.total <= memory_limit
    preds.sort(key=lambda p: (not p.fits, p.time_s, p.memory.total, p.grid))
    return preds


def choose_grid(world_size: int, spec: ModelSpec, calibration: Calibration | None = None,
                memory_limit: float | None = None) -> Grid3:
    """The (X, Y, Z) with X·Y·Z = world_size that the model predicts fastest (within the memory
    limit when one fits); what ``plexus-train --grid auto`` uses."""
    return rank_configs(world_size, spec, calibration, memory_limit)[0].grid


def choose_orders(spec: ModelSpec, grid: Grid3 | Mapping[str, int],
                  calibration: Calibration | None = None) -> tuple[str, ...]:
    """Per-layer product order ("agg"/"combine") with the lowest predicted epoch time on ``grid``.

    The order of one layer changes the roles of all later ones, so up to 12 layers every one of
    the 2^L combinations is compared; deeper models are decided greedily layer by layer (later
    layers aggregate first while an earlier one is decided). Ties keep "agg" (the paper's order).
    """
    s = normalize_grid(grid)
    cal = calibration or Calibration()
    L = spec.num_layers

    def cost(orders: tuple[str, ...]) -> float:
        return predict(spec, s, cal, orders).time_s

    if L <= _EXHAUSTIVE_ORDER_LAYERS:
        # product() lists all-"agg" first and min() keeps the first minimum: ties favour "agg".
        return min(itertools.product(ORDERS, repeat=L), key=cost)
    chosen: list[str] = []
    for l in range(L):
        rest = ("agg",) * (L - l - 1)
        chosen.append(min(ORDERS, key=lambda o: cost(tuple(chosen) + (o,) + rest)))
    return tuple(chosen)


# ---------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    """argparse that reports errors as one line, ``plexus-model: error: ...``, exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")


def _build_parser() -> _Parser:
    p = _Parser(
        prog="plexus-model",
        description="Rank every X×Y×Z grid of a world size by the predicted epoch time of 3D "
                    "GCN training (α-β communication model + calibrated compute rates).")
    p.add_argument("--world-size", "-G", type=int, required=True, metavar="G",
                   help="number of ranks; every ordered factorization X·Y·Z = G is evaluated")
    p.add_argument("--dataset", metavar="SPEC",
                   help="dataset spec for plexus.datasets.load_dataset (sizes are read from it)")
    p.add_argument("--root", metavar="DIR", help="dataset root directory (with --dataset)")
    p.add_argument("--nodes", type=int, metavar="N", help="number of nodes (without --dataset)")
    p.add_argument("--nnz", type=int, metavar="M",
                   help="non-zeros of the normalized adjacency, self loops included")
    p.add_argument("--features", type=int, metavar="F", help="input feature width")
    p.add_argument("--classes", type=int, metavar="C", help="number of classes")
    p.add_argument("--layers", type=int, default=3, metavar="L", help="GCN layers (default 3)")
    p.add_argument("--hidden", type=int, default=128, metavar="H",
                   help="hidden width (default 128)")
    p.add_argument("--order", default="agg",
                   help="per-layer product order: agg (default, the paper's), combine, auto "
                        "(combine on narrowing layers), best (model's choice per grid), or a "
                        "comma-separated list")
    p.add_argument("--no-bias", action="store_true", help="layers without bias")
    p.add_argument("--learnable-features", action="store_true",
                   help="input features are trained (adds layer 0's dH reduce-scatter)")
    p.add_argument("--calibration", metavar="FILE",
                   help="JSON from `plexus-bench calibrate` (default: built-in GPU-node rates)")
    p.add_argument("--memory-limit", type=float, metavar="GIB",
                   help="memory per rank in GiB; grids above it are ranked last and flagged")
    p.add_argument("--top", type=int, default=10, metavar="K",
                   help="show the K fastest grids (default 10, 0 = all)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    return p


def _dataset_sizes(spec: str, root: str | None) -> tuple[str, int, int, int, int]:
    """(name, N, nnz of Â, F, C) of a dataset loaded through plexus.datasets."""
    try:
        from plexus.datasets import load_dataset  # type: ignore[attr-defined]
    except ImportError:
        raise ValueError("plexus.datasets.load_dataset is not available in this installation; "
                         "give --nodes/--nnz/--features/--classes instead") from None
    try:
        graph = load_dataset(spec, root) if root is not None else load_dataset(spec)
    except Exception as e:  # noqa: BLE001 - any loader failure is reported as one line
        text = str(e).strip().splitlines()
        raise ValueError(text[0] if text else f"cannot load dataset {spec!r}: "
                         f"{type(e).__name__}") from None
    n = graph.num_nodes
    if graph.adj.nnz <= _EXACT_NNZ_LIMIT:
        from plexus.datasets import gcn_normalize

        nnz = int(gcn_normalize(graph.adj, graph.directed).nnz)
    else:
        # Approximation for big graphs: gcn_normalize replaces self loops by one per node, and
        # symmetrizing an undirected graph adds nothing when both directions are stored.
        nnz = int(graph.adj.nnz) - int((graph.adj.diagonal() != 0).sum()) + n
    return graph.name, n, nnz, graph.num_features, graph.num_classes


def _table(spec: ModelSpec, cal: Calibration, preds: list[Prediction], world: int,
           shown: int) -> str:
    lines = [
        f"{spec.name or 'graph'}: N={spec.num_nodes:,} nnz={spec.nnz:,} F={spec.num_features} "
        f"C={spec.num_classes} layers={spec.num_layers} hidden={spec.hidden} "
        f"order={spec.order if isinstance(spec.order, str) else ','.join(spec.order)} "
        f"bias={'yes' if spec.bias else 'no'}",
        f"calibration: {cal.source} (SpMM {cal.spmm_flops:.3g} flop/s, GEMM "
        f"{cal.gemm_flops:.3g} flop/s, alpha {cal.alpha:.3g} s, beta {1 / cal.beta:.3g} B/s)",
        f"world size {world}: {len(preds)} grids, showing {shown}",
        "",
        f"{'rank':>4}  {'XxYxZ':<11} {'epoch':>10} {'comm':>10} {'compute':>10} {'comm%':>6} "
        f"{'comm/rank':>11} {'memory/rank':>12}  orders",
    ]
    for k, p in enumerate(preds[:shown], 1):
        grid = "x".join(map(str, p.grid))
        flag = "" if p.fits else "  (over memory limit)"
        orders = ",".join("a" if o == "agg" else "c" for o in p.orders)
        lines.append(
            f"{k:>4}  {grid:<11} {format_seconds(p.time_s):>10} {format_seconds(p.comm_s):>10} "
            f"{format_seconds(p.compute_s):>10} {100 * p.comm_fraction:>5.1f}% "
            f"{format_bytes(p.volume.total_bytes):>11} {format_bytes(p.memory.total):>12}  "
            f"{orders}{flag}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """``plexus-model``: print the ranked grids for a world size. Exit 2 on bad input."""
    parser = _build_parser()
    args = parser.parse_args(argv)
    try:
        if args.world_size < 1:
            raise ValueError(f"--world-size must be >= 1, got {args.world_size}")
        if args.top < 0:
            raise ValueError(f"--top must be >= 0, got {args.top}")
        explicit = [args.nodes, args.nnz, args.features, args.classes]
        if args.dataset is not None:
            if any(v is not None for v in explicit):
                raise ValueError("give either --dataset or --nodes/--nnz/--features/--classes")
            name, n, nnz, f, c = _dataset_sizes(args.dataset, args.root)
        else:
            if any(v is None for v in explicit):
                raise ValueError("give --dataset SPEC, or all of --nodes --nnz --features "
                                 "--classes")
            name, (n, nnz, f, c) = "graph", explicit
        spec = ModelSpec(num_nodes=n, nnz=nnz, num_features=f, num_classes=c,
                         num_layers=args.layers, hidden=args.hidden, order=args.order,
                         bias=not args.no_bias, learnable_features=args.learnable_features,
                         name=name)
        spec.fixed_orders()  # validate --order before ranking
        cal = load_calibration(args.calibration)
        limit = None if args.memory_limit is None else args.memory_limit * 2**30
        preds = rank_configs(args.world_size, spec, cal, limit)
    except (ValueError, OSError, KeyError) as e:
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        parser.exit(2, f"{parser.prog}: error: {msg}\n")
    shown = len(preds) if args.top == 0 else min(args.top, len(preds))
    if args.json:
        doc = {"spec": {k: (list(v) if isinstance(v, tuple) else v)
                        for k, v in asdict(spec).items()},
               "calibration": cal.to_dict(), "world_size": args.world_size,
               "num_grids": len(preds), "configs": [p.to_dict() for p in preds[:shown]]}
        json.dump(doc, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(_table(spec, cal, preds, args.world_size, shown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
