"""The memory model: bytes one rank holds at the peak of a training epoch, following the engine
step by step (`epoch_memory` in `plexus.perfmodel.model` resolves the orders and calls
`rank_memory`)."""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass
from typing import Mapping, Sequence

from plexus_partition.model.grid import AXES
from plexus_partition.model.layout import LayerPlan, block_identity, transpose_identity
from plexus_partition.model.ops import NORM_OP, OPERATORS
from plexus_partition.model.ops.base import MASTER_BYTES, StageSizes

from .spec import ModelSpec, spec_collectives, spec_layout, spec_sizes


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


def rank_memory(spec: ModelSpec, s: Mapping[str, int], orders: Sequence[str],
                coords: Mapping[str, int] | None = None, head: float | None = None) -> Memory:
    """Bytes one rank holds at the peak of a training epoch on the grid ``s`` with per-layer
    ``orders``, following the engine step by step: the rank at grid coordinates ``coords``, or
    without them the rank that holds the most.

    Resident: Â blocks (32-bit indices where they fit; a block's transpose is another block of
    the rank when Â is symmetric, else a copy; blocks are told apart by their node ranges, so a
    rank whose row and column ranges coincide, on the grid's diagonal, may hold fewer:
    `_block_bytes`), what each operator holds besides (`resident`: stacked blocks, index
    structures), the feature shard, ids/labels/masks (`_feature_bytes`), parameters,
    gradients and Adam state. Activations, Â values and fixed features take ``dtype_bytes`` per
    element, parameters and their state `MASTER_BYTES` (plus a cast copy in a lower precision).
    The peak of the stages' moments is `_training_peak`'s. ``head``: the bytes a link
    prediction's pair batches hold between the encoder's forward and its backward
    (`plexus.perfmodel.linkcost`), in place of the node loss's moments (None: the node loss).
    """
    plans, pad = spec_layout(spec, s, orders)
    n, fb = pad.nodes_padded, spec.dtype_bytes
    graph = [p for p in plans if OPERATORS[p.op].graph]
    nnz_max = spec.nnz / min((s[p.a_rows] * s[p.a_cols] for p in graph), default=1)
    ib = spec.index_bytes if spec.index_bytes else (4 if max(n, nnz_max) < 2**31 else 8)
    if coords is None:  # the rank that holds the most: every pattern of equal coordinates
        adjacency = max(_block_bytes(spec, s, n, fb, ib, graph, dict(zip(AXES, c)))
                        for c in itertools.product(*(range(min(s[a], 3)) for a in AXES)))
    else:
        adjacency = _block_bytes(spec, s, n, fb, ib, graph, coords)
    features, out_rows = _feature_bytes(spec, s, plans, pad.widths_padded, n)
    resident, weights, optimizer, peak_saved, peak_work = _training_peak(
        spec, spec_sizes(spec, s, orders, ib), out_rows, stage_comm_buffers(spec, s, orders),
        head)
    runtime = CUDA_RUNTIME_BYTES if spec.device == "cuda" else (
        STORE_RUNTIME_BYTES if spec.from_store else RUNTIME_BYTES)
    return Memory(adjacency + resident, features, peak_saved, peak_work, weights, optimizer,
                  runtime)


def _feature_bytes(spec: ModelSpec, s: Mapping[str, int], plans: Sequence[LayerPlan],
                   widths: Sequence[int], n: int) -> tuple[float, float]:
    """(bytes, output rows) of the rank's stored feature shard (with its gradient and Adam
    state when the features learn), every stage's input ids, and the output rows' ids, masks
    and labels."""
    first, last = plans[0], plans[-1]
    fb = spec.dtype_bytes
    cast = fb != MASTER_BYTES
    feat_shard = n * widths[0] / (s[first.outer] * s[first.inner] * s[first.depth])
    if spec.kept_input:  # the gathered block N·F/(|o|·|i|) instead
        feat_shard *= s[first.depth]
    if spec.model.learnable_features:  # parameter, gradient, two moments (+ the cast at use)
        features = feat_shard * (4 * MASTER_BYTES + (fb if cast else 0))
    else:
        features = feat_shard * fb
    features += sum(n / s[p.in_rows] for p in plans) * 8  # input ids per stage (int64)
    out_rows = n / s[last.out_rows]
    features += out_rows * (8 + 3) + _label_bytes(spec, out_rows, widths[-1] / s[last.out_cols])
    return features, out_rows


def stage_comm_buffers(spec: ModelSpec, s: Mapping[str, int], orders: Sequence[str]
                       ) -> dict[tuple[int | None, str], float]:
    """{(layer, phase): the most bytes one of its collectives holds besides its input and
    result}, an upper bound added to that stage's moments of that phase: a sparse exchange's
    send buffer, its receive buffer (bounded by the same count: an estimate's rows are
    symmetric) and its own piece of the sum (1/p of the partner all-gather's or
    reduce-scatter's full size), or a payload cast to a narrower ``comm_dtype`` (a copy of the
    message)."""
    fb, most = spec.dtype_bytes, {}
    listed = spec_collectives(spec, s, orders)
    for k, c in enumerate(listed):
        item = c.itemsize or spec.comm_itemsize
        extra = 0.0
        if c.op == "all_to_all":  # SRS then AG, or RS then SAG: the partner is beside it
            partner = listed[k + 1] if c.name.startswith("SRS") else listed[k - 1]
            extra = (2 * c.size + partner.size / c.group) * item
        elif item < fb:  # the message cast for the wire (`plexus.engine.comm`): an
            # all-reduce's send, received and gathered buffers, a reduce-scatter's first two,
            # an all-gather's cast piece and gathered result
            extra = c.size * item * {"all_reduce": 3, "reduce_scatter": 2}.get(
                c.op, 1 + 1 / c.group)
        at = (c.layer, c.phase)
        most[at] = max(most.get(at, 0.0), extra)
    return most


def _training_peak(spec: ModelSpec, sizes: Sequence[StageSizes], out_rows: float,
                   comm: Mapping[tuple[int | None, str], float] | None = None,
                   head: float | None = None
                   ) -> tuple[float, float, float, float, float]:
    """(operators' resident bytes, weights, optimizer state, saved, transient) at the step's
    peak. Each stage's operator declares what it keeps for backward and what its forward and
    backward hold at once (`plexus_partition.model.ops.base.StageMemory`); a ReLU keeps a one-byte
    mask. The peak is the largest of every stage's forward and backward moments over what earlier
    stages keep. With ``recompute`` a stage keeps only its input, and its backward first runs its
    forward again (rebuilding what it keeps). ``comm``: the collectives' buffers per stage and
    phase (`stage_comm_buffers`), added to that stage's moments of that phase (a re-run
    forward's: the larger of its forward's and its backward's).
    ``head``: the transient bytes after the last stage's forward, over everything the stages
    keep, in place of the node loss's moments (no encoder collective is in flight then)."""
    fb = spec.dtype_bytes
    cast = fb != MASTER_BYTES
    resident = weights = optimizer = 0.0
    saved_before = head_base = 0.0  # what earlier stages hold for backward (and the head)
    comm = comm or {}
    peaks: list[tuple[float, float]] = []  # (saved, transient) at each candidate moment
    for z in sizes:
        p = z.plan
        op = OPERATORS[p.op].memory(z)
        bn = OPERATORS[NORM_OP].memory(z) if p.norm else None
        weights += op.weights + (bn.weights if bn else 0.0)
        optimizer += op.optimizer + (bn.optimizer if bn else 0.0)
        resident += op.resident
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
        fwd, bwd = comm.get((p.index, "forward"), 0.0), comm.get((p.index, "backward"), 0.0)
        for k, f in moments:
            peaks.append((saved_before + (0.0 if spec.recompute else k), f + fwd))
        base = saved_before + saved
        if spec.recompute:  # the re-run's moments, then its backward over what it rebuilt
            peaks += [(base + k, f + max(fwd, bwd)) for k, f in moments]
            base += own
        if p.index == len(sizes) - 1 and head is not None:  # link prediction's pairs
            head_base = base
        elif p.index == len(sizes) - 1:  # the loss (per logit and per row)
            loss = comm.get((None, "loss"), 0.0)
            peaks += [(k, t + loss) for k, t in _loss_moments(spec, base, op.out, cast, out_rows)]
        back = []
        if bn:
            back += [(base - own + k + op.kept + mask, t) for k, t in bn.backward]
        for k, t in op.backward:
            back.append((base - own + k + (mask if k else 0.0), t))
        if z.needs_dh:  # the previous stage's ReLU backward beside dH
            back.append((base - own, 2 * z.h_in * fb))
        peaks += [(k, t + bwd) for k, t in back]
        saved_before += saved
    if head is not None:
        peaks.append((head_base, head))
    peak_saved, peak_work = max(peaks, key=lambda sw: sw[0] + sw[1])
    return resident, weights, optimizer, peak_saved, peak_work
