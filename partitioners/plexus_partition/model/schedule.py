"""Every collective of one training epoch, stage by stage: the one description of the schedule.

The engine's stages issue these collectives (`plexus.engine.stage`), the performance model prices
them (`plexus.perfmodel`), and the tests compare the engine's ledger with them; all three read
this list, so the schedule is written down once. An operator's own collectives are recorded
from a dry run of its torch code (`Recorder`, which the engine injects:
`plexus.engine.dryrun`), or read from its declaration where it writes one
(`plexus_partition.model.ops.base.KindSpec.declares`); this module adds what every stage shares
and puts them in program order. Sizes are the padded ones of
`plexus_partition.model.layout.padding`; see docs/design.md for the layouts they come from.

With (o, i, d) a stage's (outer, inner, depth) axes, D its padded input width and N the padded
node count, every stage adds:

  forward   AG(H) over d (stage 0 only)      n = N·D/(|o||i|)   fixed features kept: once,
                                                                  at set-up ("setup" phase)
  backward  AR(db) over the output rows      n = D'/|out cols|  (with a bias)
            AR(dH) over d (stage > 0)        n = N·D/(|o||i|)   stage 0: RS over d if features learn
loss      AR-MAX of N/|rows| and AR-SUM of 2·N/|rows| over the class axis (the last layer's
          output columns), AR-SUM of 1 element over its rows axis; multi-label (binary
          cross-entropy, elementwise): AR-SUM of 2 float64 (sum, count) over the rows axis, then
          over the class axis
Stage 0 with fixed input features needs no dH: autograd skips it and what only feeds it.
Fixed input features may be gathered once and kept (`setup_collectives`, ``kept_input``): the
gather then leaves the epoch, and the ledger counts it once, when the model is built.

Item sizes: a collective declared without one (activations, gradients, gathered weights: the
payloads) travels in the run's payload precision (the compute precision, or under a float32
compute the wire precision `plexus.engine.config.EngineConfig.comm_dtype`, ``payload_itemsize``
below); statistics (the loss, the metric, BatchNorm's, the attention's) declare their own.

Volumes are those of ring algorithms: an all-reduce of n elements over p ranks moves
2(p-1)/p·n elements per rank in 2(p-1) steps; an all-gather or reduce-scatter whose full size is
n moves (p-1)/p·n in p-1 steps. Collectives over an axis of size 1 are not issued.

Options that change what moves (each priced here, so the engine, the model and the ledger test
agree): ``kept_input`` leaves out stage 0's AG(H) (fixed input features gathered once, at
set-up, and kept); ``payload_itemsize`` is the wire's bytes per element of every collective
declared without its own (the payloads above: the engine rounds every float32 message outside
its `exact` blocks, gathered weights and their gradients included, sparse exchanges too);
``exchange`` turns the sum of a sparse product's partials (an operator's all-reduce declared
with ``rows``) into a sparse exchange where it is cheaper: an all-to-all that sends each
rank of the axis only the rows this rank's Â block touches inside that rank's 1/p of the rows
("SRS", its size what this rank sends), which that rank adds to its own, then the all-gather of
the summed pieces (full size n). `SparseExchange` says, per collective, how many rows this rank
sends (exact from the partition, or estimated from the degree).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from .layout import LayerPlan, Padding
from .ops import NORM_OP, OPERATORS
from .ops.base import StageSizes, div, stage_sizes

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
PHASES = ("forward", "loss", "backward", "eval")
#: The phase of a collective issued once when the model is built, not in every epoch.
SETUP = "setup"


def ring_volume(op: str, numel: float, p: int) -> float:
    """Elements one rank sends for collective ``op`` on ``numel`` elements (full size) over p;
    for an all-to-all ``numel`` is what this rank sends to the others."""
    if op not in OPS:
        raise ValueError(f"unknown collective {op!r}; use one of {', '.join(OPS)}")
    if p <= 1:
        return 0.0
    if op == "all_to_all":
        return float(numel)
    return (2.0 if op == "all_reduce" else 1.0) * (p - 1) / p * numel


def ring_steps(op: str, p: int) -> int:
    """Latency-bound steps of the ring: 2(p-1) for an all-reduce, p-1 otherwise (an all-to-all:
    one exchange with each other rank)."""
    return (2 if op == "all_reduce" else 1) * max(p - 1, 0)


@dataclass(frozen=True)
class Collective:
    """One collective as a rank issues it.

    ``size`` is the full size n in elements (the all-reduce buffer, the all-gather's output, the
    reduce-scatter's input), the number the engine's ledger records; ``elements`` is what one
    rank moves.
    """

    name: str  # e.g. "AR(AGG)"
    layer: int | None  # None for the loss and the accuracy
    phase: str  # one of PHASES
    op: str  # one of OPS
    axis: str
    group: int  # ranks on the axis
    size: int
    itemsize: int | None = None  # bytes per element; None: the run's float size
    #: the aggregation's all-reduce of a sparse product over ``rows`` rows (cut into the
    #: engine's row pieces, `plexus.engine.config.EngineConfig.agg_chunks`); None otherwise
    rows: int | None = None

    @property
    def elements(self) -> float:
        """Elements moved per rank (ring algorithm)."""
        return ring_volume(self.op, self.size, self.group)

    @property
    def steps(self) -> int:
        """Latency-bound steps of the ring."""
        return ring_steps(self.op, self.group)

    def bytes(self, itemsize: int) -> float:
        """Bytes moved per rank, ``itemsize`` the run's payload item size (for a collective
        declared without its own)."""
        return self.elements * (self.itemsize or itemsize)

    def key(self, itemsize: int) -> tuple:
        """(layer, phase, op, axis, size, item size): how the engine's ledger keys it
        (`plexus.engine.ledger.Ledger.collectives`), ``itemsize`` as in `bytes`."""
        return (self.layer, self.phase, self.op, self.axis, self.size, self.itemsize or itemsize)


SPARSE_MODES = ("auto", "on", "off")
#: The two sparse exchanges: "sum" adds partials that are zero outside the rows a rank's Â
#: block touches (sparse reduce-scatter, then the all-gather); "gather" hands each rank only the
#: rows its block reads of a sum (the reduce-scatter, then a sparse all-gather), the adjoint;
#: "input" is a sum (the same two collectives) of a stage's input gradient Â_blkᵀ·dAGG over
#: depth, zero outside the columns the rank's block touches (`KindSpec.reads_input_by_aggregation`).
EXCHANGES = ("sum", "gather", "input")

#: (stage, exchange, axis, rows of the tensor, ranks on the axis) -> (rows this rank sends, the
#: most rows any rank of the axis sends) in that stage's exchange
SentRows = Callable[[int, str, str, int, int], tuple[float, float]]


@dataclass(frozen=True)
class SparseExchange:
    """Which all-reduces of the aggregation (declared with ``rows``) travel as sparse exchanges,
    and how many rows this rank sends in each (``sent``).

    ``mode`` "off": none; "on": every one; "auto": those where it moves fewer bytes than the
    all-reduce, i.e. where the most rows any rank of the axis sends is below (p-1)/p of the
    rows (the half of the ring all-reduce that it replaces; the other half is the same, and
    both take 2(p-1) latency steps). The engine decides with the exact counts (`exact_rows`),
    the model without data with `estimated_rows`.
    """

    mode: str
    sent: SentRows | None = None

    def __post_init__(self) -> None:
        if self.mode not in SPARSE_MODES:
            raise ValueError(f"sparse exchange mode must be one of {', '.join(SPARSE_MODES)}, "
                             f"got {self.mode!r}")
        if self.mode != "off" and self.sent is None:
            raise ValueError("a sparse exchange needs its row counts (sent)")

    def rows(self, stage: int, kind: str, axis: str, rows: int, p: int) -> float | None:
        """Rows this rank sends in the stage's exchange ``kind``, or None where it stays an
        all-reduce."""
        if self.mode == "off" or p <= 1:
            return None
        mine, most = self.sent(stage, kind, axis, rows, p)  # type: ignore[misc]
        if self.mode == "auto" and most >= (p - 1) / p * rows:
            return None
        return mine


def exchange_names(name: str, sparse: str) -> dict[str, str]:
    """{operation: name} of the two collectives that carry all-reduce ``name`` (e.g. "AR(AGG)")
    as a sparse exchange ``sparse``: "sum", SRS(AGG) (all-to-all) then AG(AGG) (all-gather);
    "gather", RS(..) (reduce-scatter) then SAG(..) (all-to-all). The one rule the schedule
    declares them by and the engine's ledger names them by."""
    what = name[name.index("("):] if "(" in name else f"({name})"
    if sparse == "gather":
        return {"reduce_scatter": "RS" + what, "all_to_all": "SAG" + what}
    return {"all_to_all": "SRS" + what, "all_gather": "AG" + what}  # "sum" and "input"


def estimated_rows(mean_degree: float) -> SentRows:
    """Rows sent per rank estimated without the graph: a row with k non-zeros has at least one
    in a column block of 1/p of the columns with probability 1-(1-1/p)^k; a rank sends the
    touched rows outside its own 1/p of them (both exchanges, on average). With every row at
    the mean degree this bounds the expectation over any degree distribution from above (the
    probability is concave in k: Jensen), so skewed graphs send less than estimated."""
    def sent(stage: int, kind: str, axis: str, rows: int, p: int) -> tuple[float, float]:
        rate = 1.0 - (1.0 - 1.0 / p) ** mean_degree
        value = rows * (p - 1) / p * rate
        return value, value
    return sent


def exact_rows(counts: Mapping[tuple[int, str], tuple[float, float]]) -> SentRows:
    """Rows sent per rank from the partition: ``counts[stage, kind]`` is (this rank's, the
    most of any rank of the axis) (`plexus_partition.rowsets`)."""
    def sent(stage: int, kind: str, axis: str, rows: int, p: int) -> tuple[float, float]:
        return counts[stage, kind]
    return sent


#: (operator, stage sizes, phase) -> the operator's collectives of that phase in program order,
#: as ``add``'s arguments (name, phase, op, axis, size, itemsize or None for a payload, rows,
#: sparse): what a dry run of the operator's torch code records
#: (`plexus.engine.dryrun.StageRecorder`; this project has no torch, so the engine injects it)
Recorder = Callable[[str, StageSizes, str], Sequence[tuple]]


class UndeclaredError(ValueError):
    """An operator declares no collectives and the schedule was given no recorder."""


class _Schedule:
    """Accumulates the collectives of one epoch, leaving out those over axes of size 1."""

    def __init__(self, shape: Mapping[str, int], payload: int | None = None,
                 exchange: SparseExchange | None = None,
                 recorder: Recorder | None = None) -> None:
        self.s, self.payload, self.exchange = shape, payload, exchange
        self.recorder = recorder
        self.out: list[Collective] = []

    def operator(self, name: str, add, z: StageSizes, phase: str) -> None:
        """Add operator ``name``'s collectives of ``phase`` ("forward", "eval", "backward"):
        its declarations where it writes them (`KindSpec.declares`), else the recorder's."""
        op = OPERATORS[name]
        if op.declares:
            op.backward(add, z) if phase == "backward" else op.forward(add, z, phase)
            return
        if self.recorder is None:
            raise UndeclaredError(
                f"operator {name!r} declares no collectives and no recorder was given: pass "
                f"one (plexus.engine.dryrun.StageRecorder) to read them from its torch code")
        for args in self.recorder(name, z, phase):
            add(*args)

    def adder(self, layer: int | None):
        """``add(name, phase, op, axis, size, itemsize=None, rows=None, sparse=None)`` for a
        stage's declarations; ``rows``: the all-reduce's tensor has ``rows`` rows, of which
        this rank's Â block touches only some; ``sparse``: its partial is zero elsewhere
        ("sum"; "input": a stage's input gradient, zero outside the block's touched columns) or
        the rank reads only those ("gather"), so a sparse exchange may carry it."""
        def add(name: str, phase: str, op: str, axis: str, size: int,
                itemsize: int | None = None, rows: int | None = None,
                sparse: str | None = None) -> None:
            p = self.s[axis]
            if p <= 1:
                return
            if itemsize is None:  # a payload: the run's wire precision (module docstring)
                itemsize = self.payload
            sent = None
            if sparse is not None and self.exchange is not None and layer is not None:
                sent = self.exchange.rows(layer, sparse, axis, rows, p)
            if sent is None:
                # rows: the forward's aggregation, cut into the engine's row pieces
                self.out.append(Collective(name, layer, phase, op, axis, p, size, itemsize,
                                           rows if phase != "backward" else None))
                return
            moved, named = int(round(sent * div(size, rows))), exchange_names(name, sparse)
            if sparse == "gather":
                pair = [Collective(named["reduce_scatter"], layer, phase, "reduce_scatter",
                                   axis, p, size, itemsize),
                        Collective(named["all_to_all"], layer, phase, "all_to_all", axis, p,
                                   moved, itemsize)]
            else:
                pair = [Collective(named["all_to_all"], layer, phase, "all_to_all", axis, p,
                                   moved, itemsize),
                        Collective(named["all_gather"], layer, phase, "all_gather", axis, p,
                                   size, itemsize)]
            self.out.extend(pair)
        return add

    def forward(self, z: StageSizes, phase: str, kept_input: bool = False) -> None:
        p, add = z.plan, self.adder(z.plan.index)
        if p.index == 0 and not kept_input:
            add("AG(H)", phase, "all_gather", p.depth, div(z.n * z.D, z.o * z.i))
        self.operator(p.op, add, z, phase)
        if p.norm:
            self.operator(NORM_OP, add, z, phase)

    def backward(self, z: StageSizes) -> None:
        p, add = z.plan, self.adder(z.plan.index)
        if p.norm:
            self.operator(NORM_OP, add, z, "backward")
        if p.bias and not OPERATORS[p.op].own_bias:  # else the dry run records the kind's
            add("AR(db)", "backward", "all_reduce", p.out_rows, div(z.D2, z.size(p.out_cols)))
        self.operator(p.op, add, z, "backward")
        if p.index > 0:
            sparse = "input" if OPERATORS[p.op].reads_input_by_aggregation(p) else None
            add("AR(dH)", "backward", "all_reduce", p.depth, z.h_in, rows=div(z.n, z.o),
                sparse=sparse)
        elif z.learnable_features:
            add("RS(dH)", "backward", "reduce_scatter", p.depth, z.h_in)

    def loss(self, last: LayerPlan, n: int, multilabel: bool = False) -> None:
        rows, classes = last.out_rows, last.out_cols
        add = self.adder(None)  # the logits are float32 in every compute precision
        if multilabel:  # elementwise: the sum and the count (float64) over rows, then tasks
            add("loss", "loss", "all_reduce", rows, 2, 8)
            add("loss", "loss", "all_reduce", classes, 2, 8)
            return
        add("loss", "loss", "all_reduce", classes, div(n, self.s[rows]), 4)  # row max
        add("loss", "loss", "all_reduce", classes, 2 * div(n, self.s[rows]), 4)  # Σ exp, label
        add("loss", "loss", "all_reduce", rows, 1, 4)  # sum of per-node losses

    def rocauc(self, last: LayerPlan, n: int, tasks: int, tasks_padded: int) -> None:
        """Per split: each rank's row count, then its rows of scores and labels of its task
        block gathered over the rows axis (sized here for the most a rank's split part can be,
        N/|rows| rows; the engine pads to the split's largest part), and the per-task ROC-AUCs
        and their flags summed over every axis."""
        rows, add = last.out_rows, self.adder(None)
        width = 2 * div(tasks_padded, self.s[last.out_cols])
        for _ in range(3):
            add("rocauc", "eval", "all_gather", rows, self.s[rows], 8)
            add("rocauc", "eval", "all_gather", rows, self.s[rows] * div(n, self.s[rows]) * width,
                4)
            for axis in ("x", "y", "z"):
                add("rocauc", "eval", "all_reduce", axis, 2 * tasks, 8)

    def accuracy(self, last: LayerPlan, n: int) -> None:
        rows, classes = last.out_rows, last.out_cols
        add = self.adder(None)
        add("accuracy", "eval", "all_reduce", classes, div(n, self.s[rows]), 4)  # max
        add("accuracy", "eval", "all_reduce", classes, div(n, self.s[rows]), 8)  # class id
        add("accuracy", "eval", "all_reduce", rows, 3, 8)  # hits of train/val/test


def epoch_collectives(plans: Sequence[LayerPlan], shape: Mapping[str, int], pad: Padding, *,
                      learnable_features: bool = False, evaluate: bool = False,
                      multilabel: bool = False, kept_input: bool = False,
                      payload_itemsize: int | None = None,
                      exchange: SparseExchange | None = None,
                      recorder: Recorder | None = None) -> list[Collective]:
    """Every collective one rank issues in one training step, in program order: the forward,
    the loss, the backward (last stage first). ``plans`` are a model's
    (`plexus_partition.model.model.ModelConfig.plans`: each names its operator, bias and BatchNorm).
    ``evaluate`` appends the evaluation that follows (the forward again, the prediction's argmax
    over the class axis and the three masks' hit counts over the rows axis; for a
    ``multilabel`` task the binary cross-entropy's two sums, and the ROC-AUC's gathers).
    ``kept_input``: the fixed input features were gathered at set-up (`setup_collectives`):
    no AG(H) in a forward. ``payload_itemsize``: the item size of every collective declared
    without one (None: left None, the run's float size for `volume_per_axis`).
    ``exchange``: which sums of a sparse product travel as sparse exchanges. ``recorder``:
    the collectives of an operator that declares none, read from its torch code by a dry run
    (`Recorder`; the engine's `plexus.engine.dryrun.StageRecorder`)."""
    if kept_input and learnable_features:
        raise ValueError("learnable input features change every step: they cannot be kept")
    sizes = stage_sizes(plans, shape, pad, OPERATORS, learnable_features=learnable_features)
    sched = _Schedule(shape, payload_itemsize, exchange, recorder)
    for z in sizes:
        sched.forward(z, "forward", kept_input)
    sched.loss(plans[-1], pad.nodes_padded, multilabel)
    for z in reversed(sizes):
        sched.backward(z)
    if evaluate:
        for z in sizes:
            sched.forward(z, "eval", kept_input)
        if multilabel:
            sched.rocauc(plans[-1], pad.nodes_padded, pad.widths[-1], pad.widths_padded[-1])
        else:
            sched.accuracy(plans[-1], pad.nodes_padded)
    return sched.out


def setup_collectives(plans: Sequence[LayerPlan], shape: Mapping[str, int], pad: Padding, *,
                      kept_input: bool = False, itemsize: int | None = None
                      ) -> list[Collective]:
    """What a rank issues once when the model is built: with ``kept_input``, layer 0's fixed
    input features gathered over the first stage's depth axis (AG(H), phase `SETUP`; the
    engine keeps the result, so no epoch gathers them again). ``itemsize``: the compute
    precision's (the features are never rounded for the wire: they are sent once)."""
    if not kept_input:
        return []
    sched = _Schedule(shape, itemsize)
    z = stage_sizes(plans, shape, pad, OPERATORS)[0]
    sched.adder(0)("AG(H)", SETUP, "all_gather", z.plan.depth, div(z.n * z.D, z.o * z.i))
    return sched.out


def volume_per_axis(collectives: Sequence[Collective], itemsize: int | None = None,
                    phases: Sequence[str] = PHASES) -> dict[str, float]:
    """Elements (or bytes, with ``itemsize``) one rank moves per axis in ``phases``."""
    out = {"x": 0.0, "y": 0.0, "z": 0.0}
    for c in collectives:
        if c.phase in phases:
            out[c.axis] += c.elements * (1 if itemsize is None else (c.itemsize or itemsize))
    return out
