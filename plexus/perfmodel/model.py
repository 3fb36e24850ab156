"""Performance model of 3D-parallel GCN training: communication, compute, memory and time per rank.

Everything here follows docs/design.md: the per-layer roles of `plexus.core.layout`, the padded
sizes of `plexus.core.layout.padding`, and the collectives listed once in `plexus.core.schedule`
(which the engine's ledger is tested against). The model is pure arithmetic (no torch), so
``plexus-model`` answers instantly even for billion-edge graphs.

Communication: one rank's collectives of an epoch, `plexus.core.schedule.epoch_collectives`.

Time is an α-β model per axis plus compute at calibrated flop rates, summed without overlap:
a collective costs steps·α + bytes_moved·β, an SpMM 2·nnz_block·width flops, a GEMM 2·m·k·n.
"""


from __future__ import annotations

import itertools
import operator
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Mapping, Sequence

from plexus.core.grid import AXES, GridShape
from plexus.core.layout import DEFAULT_PERMUTATION, ORDERS, LayerPlan, layer_plans, padding
from plexus.core.schedule import OPS, Collective, epoch_collectives

from .calibration import Calibration

# Above this many layers choose_orders searches greedily instead of over all 2^L orders.
_EXHAUSTIVE_ORDER_LAYERS = 12

Grid3 = tuple[int, int, int]


# ---------------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ModelSpec:
    """The problem: graph sizes and the GCN.

    ``nnz`` is the number of non-zeros of the GCN-normalized Â (self loops included).
    ``order`` is "agg", "combine", "auto" (combine first on layers that narrow, as
    `plexus.engine.config.ModelConfig`), "best" (the orders `choose_orders` predicts fastest,
    per grid),
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
    perm: str = DEFAULT_PERMUTATION
    dtype_bytes: int = 4  # compute precision: activations, Â values, fixed features, messages
    # (4: float32; 2: bfloat16/float16, `plexus.engine.config.EngineConfig.dtype`); parameters,
    # their gradients and Adam's moments are float32 whatever it is (MASTER_BYTES)
    index_bytes: int = 0  # CSR index bytes; 0: 4 where a block's sizes fit 32 bits, else 8
    dropout: float = 0.5
    symmetric: bool = True  # Â = Âᵀ (undirected graphs): a block's transpose is another block
    from_store: bool = False  # the rank reads its shard from a store instead of cutting it from
    #                           the whole graph in its own process (a smaller runtime term)
    name: str = ""

    def __post_init__(self) -> None:
        for key in ("num_nodes", "nnz", "num_features", "num_classes", "num_layers", "hidden",
                    "dtype_bytes", "index_bytes"):
            value = getattr(self, key)
            if key == "index_bytes" and value == 0:
                continue
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
        """Build a spec from a `plexus.engine.config.ModelConfig` (layers, hidden, bias, order,
        ...)."""
        return cls(num_nodes=num_nodes, nnz=nnz, num_features=num_features,
                   num_classes=num_classes, num_layers=model.num_layers, hidden=model.hidden,
                   order=model.order, bias=model.bias, dropout=model.dropout,
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



def normalize_grid(grid: Grid3 | Sequence[int] | Mapping[str, int]) -> dict[str, int]:
    """{"x": X, "y": Y, "z": Z} from a 3-tuple, a dict or a `GridShape`; raises ValueError on bad
    sizes."""
    return GridShape.of(grid).as_dict()


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


def _padding(plans: Sequence[LayerPlan], shape: Mapping[str, int], spec: ModelSpec):
    return padding(shape, plans, spec.num_nodes, spec.widths)


def _layer_sizes(plans: Sequence[LayerPlan], shape: Mapping[str, int], spec: ModelSpec):
    pad = _padding(plans, shape, spec)
    return pad.nodes_padded, pad.widths_padded


def collectives(spec: ModelSpec, grid: Grid3 | Mapping[str, int],
                orders: Sequence[str] | None = None, evaluate: bool = False) -> list[Collective]:
    """Every collective one rank issues in one training epoch, in program order
    (`plexus.core.schedule.epoch_collectives` for this spec and grid).

    ``orders`` overrides ``spec.order`` (needed when it is "best"). Collectives over axes of size
    1 are left out: they move nothing and cost nothing. ``evaluate`` appends what the trainer's
    evaluation after the step issues (phase "eval").
    """
    shape = normalize_grid(grid)
    plans = layer_plans(spec.num_layers, list(_resolve_orders(spec, shape, orders)))
    return epoch_collectives(plans, shape, _padding(plans, shape, spec), bias=spec.bias,
                             learnable_features=spec.learnable_features, evaluate=evaluate)


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


# What a CPU rank's process holds besides tensors at its peak: the interpreter, torch, numpy and
# scipy, the process group, kernels' internal buffers and allocator slack. Measured as training's
# peak RSS minus the tracked tensor peak (benchmarks/memory.py): 0.40-0.58 GiB on R-MAT scale 17
# and 19 at 1-8 ranks when each rank loaded the whole graph and cut its shard itself (the C heap
# keeps much of what loading freed; handing it back with malloc_trim measured a higher training
# peak, not a lower one), 0.30-0.35 GiB on scale 19 at 1-8 ranks reading a shard store.
RUNTIME_BYTES = 460 * 2**20
STORE_RUNTIME_BYTES = 330 * 2**20

# Parameters, their gradients and Adam's moments (the master weights) are float32 in every
# compute precision.
MASTER_BYTES = 4


@dataclass(frozen=True)
class Memory:
    """Bytes per rank at the training peak, by component (what `plexus-train` measures as the
    peak RSS of training; see benchmarks/memory.py for the comparison)."""

    adjacency: float  # Â blocks (CSR) and the transposes not shared with another block
    features: float  # layer 0's stored feature shard (+ gradient and Adam state if learnable),
    #                  node ids, labels and masks of the shard
    activations: float  # what autograd holds for backward at the peak
    workspace: float  # the tensors of the step at the peak that are not saved for backward
    weights: float  # weight and bias shards, their gradients and the gathered W blocks
    optimizer: float  # Adam's two moments of every parameter shard
    runtime: float = 0.0  # the process itself (interpreter, libraries, allocator slack)

    @property
    def total(self) -> float:
        return (self.adjacency + self.features + self.activations + self.workspace
                + self.weights + self.optimizer + self.runtime)

    def to_dict(self) -> dict[str, float]:
        return {**asdict(self), "total": self.total}


def _csr_bytes(nnz: float, rows: float, fb: int, ib: int) -> float:
    return nnz * (fb + ib) + (rows + 1) * ib


def epoch_memory(spec: ModelSpec, grid: Grid3 | Mapping[str, int],
                 orders: Sequence[str] | None = None) -> Memory:
    """Bytes one rank holds at the peak of a training epoch, following the engine step by step.

    Resident: Â blocks (32-bit indices where they fit; a block's transpose is another block of
    the rank when Â is symmetric, else a copy), the feature shard, ids/labels/masks, parameters,
    gradients and Adam state. Activations, Â values and fixed features take ``dtype_bytes`` per
    element, parameters and their state `MASTER_BYTES` (plus a cast copy in a lower precision). Saved for backward per layer: the GEMM's data operand (AGG, or
    the dropped H when combining first) and a one-byte ReLU mask (dropout masks are recomputed).
    The peak is the largest of every layer's forward (the caller's input, its dropped copy, the
    intermediate and the output alive at once, over what earlier layers saved) and backward
    (gradients of the output, the intermediate and the input, over what is still saved).
    """
    s = normalize_grid(grid)
    orders = _resolve_orders(spec, s, orders)
    plans = layer_plans(spec.num_layers, list(orders))
    n, widths = _layer_sizes(plans, s, spec)
    fb = spec.dtype_bytes
    cast = fb != MASTER_BYTES  # parameters are cast to the compute precision at use
    nnz_max = spec.nnz / min(s[p.a_rows] * s[p.a_cols] for p in plans)
    ib = spec.index_bytes if spec.index_bytes else (4 if max(n, nnz_max) < 2**31 else 8)

    # One Â block per distinct (adjacency, row range, column range): an axis of size 1 is the
    # whole range whatever its name (the engine stores equal blocks once). Ranks off the
    # diagonal hold the most blocks: axes of equal size count as different ranges.
    def cut(axis: str) -> str:
        return axis if s[axis] > 1 else "*"

    blocks = {(p.adj if spec.perm == "double" else 1, cut(p.a_rows), cut(p.a_cols))
              for p in plans}
    adjacency = 0.0
    for k, r, c in blocks:
        sr, sc = (s[r] if r != "*" else 1), (s[c] if c != "*" else 1)
        nnz_blk = spec.nnz / (sr * sc)
        adjacency += _csr_bytes(nnz_blk, n / sr, fb, ib)
        other = (3 - k if spec.perm == "double" else k, c, r)
        if not (spec.symmetric and other in blocks):
            adjacency += _csr_bytes(nnz_blk, n / sc, fb, ib)

    first, last = plans[0], plans[-1]
    feat_shard = n * widths[0] / (s[first.outer] * s[first.inner] * s[first.depth])
    if spec.learnable_features:  # parameter, gradient, two moments (+ the cast at use)
        features = feat_shard * (4 * MASTER_BYTES + (fb if cast else 0))
    else:
        features = feat_shard * fb
    features += sum(n / s[p.in_rows] for p in plans) * 8  # input ids per layer (int64)
    out_rows = n / s[last.out_rows]
    features += out_rows * (8 + 8 + 3)  # output ids, labels (int64), three masks (bool)

    weights = optimizer = 0.0
    saved_before = 0.0  # what earlier layers hold for backward
    peaks: list[tuple[float, float]] = []  # (saved, transient) at each candidate moment
    for p in plans:
        o, i, d = s[p.outer], s[p.inner], s[p.depth]
        D, D2 = widths[p.index], widths[p.index + 1]
        h_in = n / o * D / i
        needs_dh = p.index > 0 or spec.learnable_features
        drop = h_in if spec.dropout > 0 else 0.0  # a dropped copy of the input
        # the caller's input: layer 0 reads the stored features (a gathered copy when d > 1)
        caller = h_in if p.index > 0 or d > 1 else 0.0
        w_shard_blk = (D / i * D2 / o) if p.order == "agg" else (D / i * D2 / d)
        w_shard = w_shard_blk / s[p.w_flat]
        bias = D2 / s[p.out_cols] if spec.bias else 0.0
        gathered_w = w_shard_blk if s[p.w_flat] > 1 else 0.0
        # parameter and gradient; the gathered W (and the cast shard) in the compute precision
        weights += 2 * (w_shard + bias) * MASTER_BYTES
        weights += (gathered_w + ((w_shard + bias) if cast else 0.0)) * fb
        optimizer += 2 * (w_shard + bias) * MASTER_BYTES
        out_mask = 0.0
        if p.order == "agg":
            inter, out = n / d * D / i, n / d * D2 / o
            out_all = out * (2 if i > 1 else 1)  # the all-reduce over i sums a copy
            kept = inter  # AGG for dW
            # the SpMM's dropout overwrites a consumed input; layer 0's is a copy, freed
            # before the GEMM
            fwd = [caller + (drop if p.index == 0 else 0.0) + inter, caller + inter + out_all]
        else:
            inter, out = n / o * D2 / d, n / i * D2 / d
            z_all = inter * (2 if i > 1 else 1)  # Z and its all-reduced copy
            kept = drop if drop else h_in  # the dropped H for dW (H itself without dropout)
            fwd = [caller + drop + z_all + out]
        if needs_dh:
            kept += gathered_w  # W for dH
        if p.index < len(plans) - 1:
            out_mask = out  # ReLU mask, one byte per element
        saved = kept * fb + out_mask
        for f in fwd:
            peaks.append((saved_before, f * fb))
        if p.index == len(plans) - 1:  # the loss: softmax and one-hot labels of the logits
            peaks.append((saved_before + saved + out * (fb + 1), 0.0))
        # backward, last layer first: everything up to this layer still saved
        upto = saved_before + saved
        peaks.append((upto, (out + inter) * fb))  # dOUT, d(intermediate) beside the saved
        if needs_dh:
            peaks.append((upto - kept * fb, (inter + h_in) * fb))  # d(intermediate), dH
            peaks.append((upto - kept * fb - out_mask, 2 * h_in * fb))  # ReLU's backward
        saved_before = upto
    peak_saved, peak_work = max(peaks, key=lambda sw: sw[0] + sw[1])
    return Memory(adjacency, features, peak_saved, peak_work, weights, optimizer,
                  STORE_RUNTIME_BYTES if spec.from_store else RUNTIME_BYTES)


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
    try:
        return [g.dims for g in GridShape.factorizations(world_size)]
    except ValueError as e:  # GridError: keep this module's plain ValueError contract
        raise ValueError(str(e)) from None


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
