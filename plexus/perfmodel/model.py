"""Performance model of 3D-parallel GNN training: communication, compute, memory and time per rank.

Everything here follows docs/design.md and reads the declarations of `plexus.core.ops`: the
model's plans (`plexus.core.model.ModelConfig.plans`, the one resolved plan the engine builds
from too), the padded sizes of `plexus.core.layout.padding`, the collectives of
`plexus.core.schedule` (which the engine's ledger is tested against), and each operator's flops
and memory terms. The model is pure arithmetic (no torch), so ``plexus-model`` answers instantly
even for billion-edge graphs.

Time is an α-β model per axis plus compute at calibrated flop rates, summed without overlap:
a collective costs steps·α + bytes_moved·β, sparse work (SpMM, SDDMM, per-edge) runs at the
SpMM rate, a GEMM 2·m·k·n flops at the GEMM rate, and the memory-bound elementwise work around
the stages (dropout's hash mask, ReLU, bias, the loss: element passes) at the elementwise rate;
on a calibrated CPU machine, ranks that outnumber its cores compute at their share of it.
"""


from __future__ import annotations

import itertools
import operator
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Sequence

from plexus.core.grid import AXES, GridShape
from plexus.core.layout import (DEFAULT_PERMUTATION, ORDERS, LayerPlan, Padding, block_identity,
                                padding, transpose_identity)
from plexus.core.model import ModelConfig, parse_order
from plexus.core.ops import NORM_OP, OPERATORS
from plexus.core.ops.base import MASTER_BYTES, StageSizes, elementwise_passes, stage_sizes
from plexus.core.schedule import OPS, Collective, epoch_collectives

from .calibration import Calibration
from .placement import Placement

# Above this many layers choose_orders searches greedily instead of over all 2^L orders.
_EXHAUSTIVE_ORDER_LAYERS = 12
BEST_ORDER = "best"  # ModelSpec.best_orders: the orders choose_orders predicts fastest, per grid

Grid3 = tuple[int, int, int]


# ---------------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ModelSpec:
    """The problem: graph sizes, the model (a `plexus.core.model.ModelConfig`, the same value
    the engine is built from) and how a run holds it.

    ``nnz`` is the number of non-zeros of the normalized Â (self loops included).
    ``best_orders``: price each grid with the per-layer orders `choose_orders` predicts fastest
    there instead of the model's ("--order best"). ``perm`` only affects memory: "double"
    keeps two permuted adjacencies (Â1, Â2), so layers of different parity never share an Â
    block. ``dtype_bytes`` is the compute precision's (activations, Â values, fixed features,
    messages; `plexus.engine.config.EngineConfig.dtype`); parameters, their gradients and
    Adam's moments are float32 whatever it is. ``recompute``: each stage's activations are
    recomputed in backward (`plexus.engine.config.EngineConfig.recompute`). ``multilabel``: the
    task is ``num_classes`` binary tasks (ogbn-proteins), labels an int8 node×task matrix, the
    loss a masked binary cross-entropy (`plexus.engine.loss.ParallelBCE`), not a softmax over
    classes with int64 labels.
    """

    num_nodes: int
    nnz: int
    num_features: int
    num_classes: int
    model: ModelConfig = field(default_factory=ModelConfig)
    best_orders: bool = False
    perm: str = DEFAULT_PERMUTATION
    dtype_bytes: int = 4
    recompute: bool = False
    index_bytes: int = 0  # CSR index bytes; 0: 4 where a block's sizes fit 32 bits, else 8
    symmetric: bool = True  # Â = Âᵀ (undirected graphs): a block's transpose is another block
    from_store: bool = False  # the rank reads its shard from a store instead of cutting it from
    #                           the whole graph in its own process (a smaller runtime term)
    multilabel: bool = False  # binary tasks (labels node×task int8, BCE loss)
    device: str = "cpu"  # where the ranks train: "cuda" prices the GPU's allocator (its peak
    #                      holds no process runtime; fused mask kernels, no host slack)
    name: str = ""

    def __post_init__(self) -> None:
        for key in ("num_nodes", "nnz", "num_features", "num_classes", "dtype_bytes",
                    "index_bytes"):
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
        if not isinstance(self.model, ModelConfig):
            raise ValueError(f"model must be a ModelConfig, got {type(self.model).__name__}")
        if self.device not in ("cpu", "cuda"):
            raise ValueError(f"device must be cpu or cuda, got {self.device!r}")

    @classmethod
    def of(cls, num_nodes: int, nnz: int, num_features: int, num_classes: int,
           **options: Any) -> "ModelSpec":
        """A spec from the graph's sizes and keyword options, each either a `ModelConfig` field
        (``num_layers=3, hidden=64, kind="gat", ...``) or one of this class's; ``order="best"``
        sets `best_orders`."""
        own = {f for f in cls.__dataclass_fields__ if f not in ("model",)}
        model = {k: v for k, v in options.items() if k not in own}
        if model.get("order") == BEST_ORDER:
            model.pop("order")
            options["best_orders"] = True
        return cls(num_nodes, nnz, num_features, num_classes,
                   ModelConfig.from_options(**model),
                   **{k: v for k, v in options.items() if k in own})

    @property
    def widths(self) -> list[int]:
        """Real D_0 .. D_S: input width, every stage's output width."""
        return self.model.widths(self.num_features, self.num_classes)

    @property
    def order_text(self) -> str:
        """The order as the command line says it ("best" with `best_orders`)."""
        return BEST_ORDER if self.best_orders else self.model.order

    def fixed_orders(self) -> tuple[str, ...] | None:
        """The per-layer orders when they do not depend on the grid; None with `best_orders`."""
        if self.best_orders:
            return None
        return tuple(self.model.layer_orders(self.num_features, self.num_classes))

    def plans(self, orders: Sequence[str] | None = None) -> list[LayerPlan]:
        """The model's plans with per-layer ``orders`` (default: the model's own)."""
        return self.model.plans(self.num_features, self.num_classes, orders)


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


def _layout(spec: ModelSpec, shape: Mapping[str, int], orders: Sequence[str]
            ) -> tuple[list[LayerPlan], Padding]:
    plans = spec.plans(orders)
    return plans, padding(shape, plans, spec.num_nodes, spec.widths)


def _sizes(spec: ModelSpec, shape: Mapping[str, int], orders: Sequence[str],
           index_bytes: int = 4) -> list[StageSizes]:
    plans, pad = _layout(spec, shape, orders)
    return stage_sizes(plans, shape, pad, OPERATORS, [spec.model.drops_input(p) for p in plans],
                       nnz=float(spec.nnz), learnable_features=spec.model.learnable_features,
                       dtype_bytes=spec.dtype_bytes, index_bytes=index_bytes,
                       device=spec.device)


def collectives(spec: ModelSpec, grid: Grid3 | Mapping[str, int],
                orders: Sequence[str] | None = None, evaluate: bool = False) -> list[Collective]:
    """Every collective one rank issues in one training epoch, in program order
    (`plexus.core.schedule.epoch_collectives` for this spec and grid).

    ``orders`` (one per GNN layer) overrides the model's (needed with ``best_orders``).
    Collectives over axes of size 1 are left out: they move nothing and cost nothing.
    ``evaluate`` appends what the trainer's evaluation after the step issues (phase "eval").
    """
    shape = normalize_grid(grid)
    plans, pad = _layout(spec, shape, _resolve_orders(spec, shape, orders))
    return epoch_collectives(plans, shape, pad,
                             learnable_features=spec.model.learnable_features, evaluate=evaluate,
                             multilabel=spec.multilabel)


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
    """Flops per rank of one epoch, assuming the non-zeros spread evenly over the Â blocks, and
    the element passes of its memory-bound elementwise work (dropout, ReLU, bias, the loss:
    `plexus.core.ops.base.elementwise_passes`), which run at the calibrated elementwise rate."""

    spmm_flops: float
    gemm_flops: float
    elementwise: float = 0.0

    @property
    def total(self) -> float:
        return self.spmm_flops + self.gemm_flops


def epoch_compute(spec: ModelSpec, grid: Grid3 | Mapping[str, int],
                  orders: Sequence[str] | None = None) -> Compute:
    """Sparse (SpMM, SDDMM, per-edge) and GEMM flops one rank runs per epoch: each stage's
    operator declares its own (`plexus.core.ops`, ``flops``); and the element passes of the
    elementwise work around the stages (`plexus.core.ops.base.elementwise_passes`)."""
    s = normalize_grid(grid)
    spmm = gemm = elementwise = 0.0
    for z in _sizes(spec, s, _resolve_orders(spec, s, orders)):
        for op in _ops(z.plan):
            f = op.flops(z)
            spmm, gemm = spmm + f.spmm, gemm + f.gemm
        elementwise += elementwise_passes(z, spec.model.activates(z.plan))
    return Compute(spmm, gemm, elementwise)


def _ops(plan: LayerPlan) -> list:
    """The operators of a stage: its own, then BatchNorm's when the plan has one."""
    return [OPERATORS[plan.op]] + ([OPERATORS[NORM_OP]] if plan.norm else [])


# What a CPU rank's process holds besides tensors at its peak: the interpreter, torch, numpy and
# scipy, the process group, kernels' internal buffers and allocator slack. Measured as training's
# peak RSS minus the tracked tensor peak (benchmarks/memory.py): 0.40-0.58 GiB on R-MAT scale 17
# and 19 at 1-8 ranks when each rank loaded the whole graph and cut its shard itself (the C heap
# keeps much of what loading freed; handing it back with malloc_trim measured a higher training
# peak, not a lower one), 0.30-0.35 GiB on scale 19 at 1-8 ranks reading a shard store.
RUNTIME_BYTES = 460 * 2**20
STORE_RUNTIME_BYTES = 330 * 2**20
# What a GPU rank's allocator holds besides the step's tensors once a GEMM has run: the cuBLAS
# and cuBLASLt workspaces (32 MiB each on Hopper). Measured on one H200 as the CUDA peak minus
# the tensors the model prices: 64.0 MiB on Cora at 1x1x1 and on each of 8 ranks of 2x2x2
# sharing the GPU (benchmarks/results/gpu_checks.txt).
CUDA_RUNTIME_BYTES = 64 * 2**20


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


LOSS_BYTES = 4 + 1  # per logit: the loss's float32 softmax and its one-hot labels
# per output row, beside them: the row's maximum, whether its label is in this block of classes,
# the label's logit, the all-reduced (sum, label logit) pair, the per-node loss and its masked
# copy (float32), and the labelled rows' int64 row and column indices (every row counted: an
# upper bound). Measured at the loss's peak: R-MAT 19 on 2x2x2 in bf16 (benchmarks/cache_setup.py)
LOSS_ROW_BYTES = 4 + 1 + 4 + 8 + 2 * 4 + 4 + 2 * 8
# Multi-label (`plexus.engine.loss.ParallelBCE`), per logit: backward keeps the float32 logits;
# forward and backward each hold one float32 buffer (|z|'s softplus, then σ(z) − y) and up to
# two one-byte masks (missing labels and unmasked rows, and a comparison being or-ed in).
BCE_KEPT_BYTES = 4
BCE_WORK_BYTES = 4 + 2


def _label_bytes(spec: ModelSpec, rows: float, block_width: float) -> float:
    """A rank's labels over its ``rows`` logits rows: int64 class ids; multi-label, the shard's
    int8 row×task matrix (every task) and the head's int8 block of its ``block_width`` task
    columns (`plexus.engine.loss.task_block`)."""
    if spec.multilabel:
        return rows * (spec.num_classes + block_width)
    return rows * 8


def _loss_moments(spec: ModelSpec, base: float, logits: float, cast: bool, rows: float
                  ) -> list[tuple[float, float]]:
    """The loss's (saved, transient) moments over ``base`` saved bytes, for ``logits`` elements
    of float32 logits (``cast``: a float32 copy of a lower-precision output) over ``rows`` rows.
    Softmax cross-entropy keeps its softmax and one-hot labels, with `LOSS_ROW_BYTES` per row;
    the multi-label BCE keeps the logits and holds `BCE_WORK_BYTES` per logit in its forward
    and its backward (its reductions are scalars: nothing per row)."""
    if spec.multilabel:
        kept = base + logits * BCE_KEPT_BYTES
        return [(kept, logits * BCE_WORK_BYTES)]
    return [(base + logits * (LOSS_BYTES + (4 if cast else 0)) + rows * LOSS_ROW_BYTES, 0.0)]


def _block_bytes(spec: ModelSpec, s: Mapping[str, int], n: int, fb: int, ib: int,
                 graph: Sequence[LayerPlan], coords: Mapping[str, int]) -> float:
    """The Â blocks of the rank at ``coords``: one per distinct (adjacency, row range, column
    range), as the engine keys them (`plexus.engine.blocks.GraphBlocks`), so a rank whose ranges
    coincide (on the grid's diagonal) holds fewer; stages that multiply by a block itself need
    its transpose too, another block of the rank when Â is symmetric, else a copy."""
    parts: dict[tuple, tuple[int, int]] = {}  # a block's key: how many ways rows, columns are cut

    def key(p: LayerPlan) -> tuple:
        k = block_identity(p, n, s, {a: int(c) for a, c in coords.items()}, spec.perm)
        parts[k] = (s[p.a_rows], s[p.a_cols])
        return k

    blocks = {key(p) for p in graph}
    plain = {key(p) for p in graph if OPERATORS[p.op].uses_plain_block(p)}
    total = 0.0
    for k in blocks:
        sr, sc = parts[k]
        nnz_blk = spec.nnz / (sr * sc)
        total += _csr_bytes(nnz_blk, n / sr, fb, ib)
        if k in plain and not (spec.symmetric and transpose_identity(k, spec.perm) in blocks):
            total += _csr_bytes(nnz_blk, n / sc, fb, ib)
    return total


def epoch_memory(spec: ModelSpec, grid: Grid3 | Mapping[str, int],
                 orders: Sequence[str] | None = None,
                 coords: Mapping[str, int] | None = None) -> Memory:
    """Bytes one rank holds at the peak of a training epoch, following the engine step by step:
    the rank at grid coordinates ``coords``, or without them the rank that holds the most.

    Resident: Â blocks (32-bit indices where they fit; a block's transpose is another block of
    the rank when Â is symmetric, else a copy; blocks are told apart by their node ranges, so a
    rank whose row and column ranges coincide, on the grid's diagonal, may hold fewer:
    `_block_bytes`), what each operator holds besides (`resident`: stacked blocks, index
    structures), the feature shard, ids/labels/masks, parameters,
    gradients and Adam state. Activations, Â values and fixed features take ``dtype_bytes`` per
    element, parameters and their state `MASTER_BYTES` (plus a cast copy in a lower precision).
    Each stage's operator declares what it keeps for backward and what its forward and backward
    hold at once (`plexus.core.ops.base.StageMemory`); a ReLU keeps a one-byte mask. The peak is
    the largest of every stage's forward and backward moments over what earlier stages keep.
    With ``recompute`` a stage keeps only its input, and its backward first runs its forward
    again (rebuilding what it keeps).
    """
    s = normalize_grid(grid)
    orders = _resolve_orders(spec, s, orders)
    plans, pad = _layout(spec, s, orders)
    n, widths, fb = pad.nodes_padded, pad.widths_padded, spec.dtype_bytes
    graph = [p for p in plans if OPERATORS[p.op].graph]
    nnz_max = spec.nnz / min((s[p.a_rows] * s[p.a_cols] for p in graph), default=1)
    ib = spec.index_bytes if spec.index_bytes else (4 if max(n, nnz_max) < 2**31 else 8)
    sizes = _sizes(spec, s, orders, ib)

    if coords is None:  # the rank that holds the most: every pattern of equal coordinates
        adjacency = max(_block_bytes(spec, s, n, fb, ib, graph, dict(zip(AXES, c)))
                        for c in itertools.product(*(range(min(s[a], 3)) for a in AXES)))
    else:
        adjacency = _block_bytes(spec, s, n, fb, ib, graph, coords)

    first, last = plans[0], plans[-1]
    cast = fb != MASTER_BYTES
    feat_shard = n * widths[0] / (s[first.outer] * s[first.inner] * s[first.depth])
    if spec.model.learnable_features:  # parameter, gradient, two moments (+ the cast at use)
        features = feat_shard * (4 * MASTER_BYTES + (fb if cast else 0))
    else:
        features = feat_shard * fb
    features += sum(n / s[p.in_rows] for p in plans) * 8  # input ids per stage (int64)
    out_rows = n / s[last.out_rows]
    features += out_rows * (8 + 3) + _label_bytes(spec, out_rows, widths[-1] / s[last.out_cols])

    weights = optimizer = 0.0
    saved_before = 0.0  # what earlier stages hold for backward
    peaks: list[tuple[float, float]] = []  # (saved, transient) at each candidate moment
    for z in sizes:
        p = z.plan
        op = OPERATORS[p.op].memory(z)
        bn = OPERATORS[NORM_OP].memory(z) if p.norm else None
        weights += op.weights + (bn.weights if bn else 0.0)
        optimizer += op.optimizer + (bn.optimizer if bn else 0.0)
        adjacency += op.resident
        mask = op.out if spec.model.activates(p) else 0.0  # ReLU's one-byte mask
        own = op.kept + (bn.kept if bn else 0.0) + mask  # what the stage keeps for backward
        # a recomputed segment keeps its input: the previous stage's output (stage 0: the
        # stored features, already counted)
        boundary = z.h_in * fb if p.index > 0 else 0.0
        saved = boundary if spec.recompute else own
        # forward (under recompute: again at the start of the stage's backward)
        moments = [(0.0, f) for f in op.forward]
        if bn:
            moments += [(op.kept, f) for f in bn.forward]
        for k, f in moments:
            peaks.append((saved_before + (0.0 if spec.recompute else k), f))
        base = saved_before + saved
        if spec.recompute:  # the re-run's moments, then its backward over what it rebuilt
            peaks += [(base + k, f) for k, f in moments]
            base += own
        if p.index == len(plans) - 1:  # the loss (per logit and per row)
            peaks += _loss_moments(spec, base, op.out, cast, out_rows)
        if bn:
            peaks += [(base - own + k + op.kept + mask, t) for k, t in bn.backward]
        for k, t in op.backward:
            peaks.append((base - own + k + (mask if k else 0.0), t))
        if z.needs_dh:  # the previous stage's ReLU backward beside dH
            peaks.append((base - own, 2 * z.h_in * fb))
        saved_before += saved
    peak_saved, peak_work = max(peaks, key=lambda sw: sw[0] + sw[1])
    runtime = CUDA_RUNTIME_BYTES if spec.device == "cuda" else (
        STORE_RUNTIME_BYTES if spec.from_store else RUNTIME_BYTES)
    return Memory(adjacency, features, peak_saved, peak_work, weights, optimizer, runtime)


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

    @property
    def comm_fraction(self) -> float:
        return self.comm_s / self.time_s if self.time_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"grid": list(self.grid), "orders": list(self.orders), "time_s": self.time_s,
                "comm_s": self.comm_s, "compute_s": self.compute_s,
                "comm_s_per_axis": self.comm_s_per_axis, "links": self.links,
                "comm_elements": self.volume.total_elements, "comm_bytes": self.volume.total_bytes,
                "comm": self.volume.to_dict(), "spmm_flops": self.compute.spmm_flops,
                "gemm_flops": self.compute.gemm_flops,
                "elementwise_passes": self.compute.elementwise, "memory_bytes": self.memory.total,
                "memory": self.memory.to_dict(), "fits": self.fits}


def collective_time(c: Collective, calibration: Calibration, dtype_bytes: int = 4,
                    ranks_per_host: int | None = None, link_class: str | None = None) -> float:
    """α-β time of one ring collective: steps·α + bytes moved per rank·β, with the (α, β) of
    its axis, of its ``link_class`` on a cluster, or of a world of ``ranks_per_host`` local
    ranks (`Calibration.link`)."""
    alpha, beta = calibration.link(c.axis, ranks_per_host, link_class)
    return c.steps * alpha + c.elements * (c.itemsize or dtype_bytes) * beta


def _resolve_orders(spec: ModelSpec, shape: Mapping[str, int], orders: Sequence[str] | None,
                    calibration: Calibration | None = None,
                    ranks_per_host: int | None = None,
                    placement: Placement | None = None) -> tuple[str, ...]:
    """The per-layer orders to price: ``orders`` (validated), the model's, or with
    ``best_orders`` the fastest on this grid (priced as `predict` prices it)."""
    if orders is not None:
        return parse_order(tuple(orders), spec.model.num_layers)  # type: ignore[return-value]
    fixed = spec.fixed_orders()
    if fixed is None:
        return choose_orders(spec, (shape["x"], shape["y"], shape["z"]), calibration,
                             ranks_per_host, placement)
    return fixed


def predict(spec: ModelSpec, grid: Grid3 | Mapping[str, int],
            calibration: Calibration | None = None,
            orders: Sequence[str] | None = None,
            ranks_per_host: int | None = None,
            placement: Placement | None = None) -> Prediction:
    """Predicted epoch time (communication + compute, no overlap), volume and memory on ``grid``.

    Compute is flops at the SpMM and GEMM rates plus element passes at the elementwise rate,
    divided by the share of a core each rank gets when ``ranks_per_host`` ranks share the
    calibrated machine's cores (`Calibration.core_share`; None: one rank per device); the
    collectives are priced with the (α, β) measured on a local world of that many ranks when
    the calibration has one (`Calibration.link`). With a ``placement`` on a GPU cluster each
    axis's collectives take the (α, β) of the link class they cross (`Placement.axis_links`).
    The rates are the calibration's at the spec's precision (`Calibration.rates`)."""
    cal = calibration or Calibration()
    s = normalize_grid(grid)
    orders = _resolve_orders(spec, s, orders, cal, ranks_per_host, placement)
    vol = epoch_volume(spec, s, orders)
    comp = epoch_compute(spec, s, orders)
    mem = epoch_memory(spec, s, orders)
    links = placement.axis_links(s) if placement else {}
    per_axis = {a: 0.0 for a in AXES}
    for c in vol.collectives:
        per_axis[c.axis] += collective_time(c, cal, spec.dtype_bytes, ranks_per_host,
                                            links.get(c.axis))
    comm_s = sum(per_axis.values())
    spmm_rate, gemm_rate, elementwise_rate = cal.rates(spec.dtype_bytes)
    compute_s = (comp.spmm_flops / spmm_rate + comp.gemm_flops / gemm_rate
                 + comp.elementwise / elementwise_rate) / cal.core_share(ranks_per_host)
    return Prediction((s["x"], s["y"], s["z"]), tuple(orders), comm_s + compute_s, comm_s,
                      compute_s, vol, comp, mem, per_axis, links=links)


def factorizations(world_size: int) -> list[Grid3]:
    """Every ordered triple (X, Y, Z) of positive integers with X·Y·Z = world_size."""
    try:
        return [g.dims for g in GridShape.factorizations(world_size)]
    except ValueError as e:  # GridError: keep this module's plain ValueError contract
        raise ValueError(str(e)) from None


def rank_configs(world_size: int, spec: ModelSpec, calibration: Calibration | None = None,
                 memory_limit: float | None = None,
                 ranks_per_host: int | None = None,
                 placement: Placement | None = None) -> list[Prediction]:
    """Predictions for every factorization of ``world_size``, fastest first, each priced as
    `predict` prices it for ``ranks_per_host`` ranks per host (or on a cluster, ``placement``).

    Grids over ``memory_limit`` bytes per rank (if given) are kept but flagged ``fits=False`` and
    ranked after every grid that fits. Ties break on memory, then on the grid tuple.
    """
    preds = [predict(spec, g, calibration, ranks_per_host=ranks_per_host, placement=placement)
             for g in factorizations(world_size)]
    for p in preds:
        p.fits = memory_limit is None or p.memory.total <= memory_limit
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
    (priced by `predict` for ``ranks_per_host`` ranks per host).

    The order of one layer changes the roles of all later ones, so up to 12 layers every one of
    the 2^L combinations is compared; deeper models are decided greedily layer by layer (later
    layers aggregate first while an earlier one is decided). Ties keep "agg" (the paper's order).
    """
    s = normalize_grid(grid)
    cal = calibration or Calibration()
    L = spec.model.num_layers

    def cost(orders: tuple[str, ...]) -> float:
        return predict(spec, s, cal, orders, ranks_per_host, placement).time_s

    if L <= _EXHAUSTIVE_ORDER_LAYERS:
        # product() lists all-"agg" first and min() keeps the first minimum: ties favour "agg".
        return min(itertools.product(ORDERS, repeat=L), key=cost)
    chosen: list[str] = []
    for l in range(L):
        rest = ("agg",) * (L - l - 1)
        chosen.append(min(ORDERS, key=lambda o: cost(tuple(chosen) + (o,) + rest)))
    return tuple(chosen)
