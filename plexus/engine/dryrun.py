"""A stage's collectives recorded from a dry run of its torch code, at any size.

The schedule (`plexus_partition.model.schedule`) lists what every stage sends; no built-in
operator declares its collectives by hand (`KindSpec.forward`/`backward`): this module runs
the operator's own torch code (its layer's ``stage``, `plexus.engine.kinds`, forward and
backward) in this one process for one simulated rank, with a `DryComm`
(`plexus.engine.drycomm`) whose collectives do not communicate but keep their shapes and
record every call in a `Ledger`, as the real `Comm` does. Only the stage's own part is run: not
the framework's receive (AG(H), AR(dH)), bias (AR(db)) or BatchNorm, which the schedule adds
itself.

Sizes at scale without running at scale: each collective's size is a monomial in the stage's
padded sizes n, D, D2 and its roles' axis sizes |outer|, |inner|, |depth| (every size a
product of blocks of them; `VARIABLES`), times a constant of its options. The stage runs at a
small base probe (each axis of more than one rank at 2), once with n, D, D2 times 2, 3, 5
(padding multiples kept), whose size ratios factor into their exponents, once with those axes
times 2, 3, 5 (theirs), and once at other multiples, which checks the fit; every probe's block
of Â has 2 non-zeros per row, and the base probe runs once more with 3, which checks that no size
moves with the graph's degree (a per-edge collective: the fit has no variable for it, so
`RecordingError` rather than a size priced as if every node had two edges). `StageRecorder`
caches it per (operator, order, options, which roles' axes have more than one rank, first
stage or not, learnable features, precisions): a fit holds on every grid, so no probe grows
with the grid and a ranking of every grid of 2^20 ranks fits a few times. A size that is not
one monomial (a data-dependent exchange) cannot be recorded: `RecordingError`.

What the torch code names (`plexus.engine.comm.Comm.labelled`, on the stage toolkit's lines)
the recording keeps: each collective's name in the forward and in the backward, and for the
aggregation's sums their rows (cut into the engine's row pieces) and whether they may travel
as a sparse exchange. An unnamed collective is called by its operation and the role of its
axis ("AR(outer)", "AR-MAX(outer)").
"""

from __future__ import annotations

import dataclasses
import functools
import math
from contextlib import contextmanager
from dataclasses import dataclass
from fractions import Fraction
from typing import Iterator

import numpy as np
import scipy.sparse as sp
import torch

from plexus_partition.model.grid import GridShape
from plexus_partition.model.layout import LayerPlan, block
from plexus_partition.model.model import ModelConfig
from plexus_partition.model.ops import KINDS, OPERATORS
from plexus_partition.model.ops.base import StageSizes
from plexus_partition.plan import block_key

from .blocks import GraphBlocks
from .config import EngineConfig
from .drycomm import Call, DryComm, DryGrid
from .graph3d import StageGraph
from .kinds import layer_of
from .stage import padded_shape, shard_of_full
from .stagespec import StageContext, StageSpec

#: the roles' axes on the probe grid: a recorded axis is a role of the stage, mapped back to
#: the plan's own axes
ROLE_AXES = {"outer": "x", "inner": "y", "depth": "z"}
_DTYPES = {2: torch.bfloat16, 4: torch.float32}


class RecordingError(ValueError):
    """A stage's collectives cannot be recorded: its sizes are no monomial of n, D, D2, move
    with the non-zeros of Â's block, or differ in number or kind between probes."""


@dataclass
class _ProbeShard:
    """The parts of a `plexus_partition.plan.RankShard` a stage's blocks read."""

    blocks: dict
    input_ids: list
    output_ids: np.ndarray
    nodes_padded: int
    perm: str = "none"
    meta: dict = dataclasses.field(default_factory=lambda: {"symmetric": False})

    def touched_rows(self, layer: int) -> np.ndarray:  # sparse exchanges are off
        return np.arange(self.blocks[next(iter(self.blocks))].shape[0])


#: a fit's variables: the stage's padded sizes, then its roles' axis sizes
VARIABLES = ("n", "D", "D2", "|outer|", "|inner|", "|depth|")
Monomial = tuple[Fraction, tuple[int, ...]]  # (coef, one exponent per variable)


@dataclass(frozen=True)
class Recorded:
    """One collective of a stage as recorded: ``size`` its elements, a `Monomial` of the
    `VARIABLES`; ``role`` the stage role of its axis; ``itemsize`` its own (a statistic sent
    exactly) or None (the run's payload); ``label`` the name the torch code gives it
    (`plexus.engine.comm.Comm.labelled`), ``sparse`` and ``rows`` (a `Monomial` too) where it
    sums a sparse product."""

    phase: str  # "forward" (training, or "eval" in an evaluation pass) or "backward"
    op: str
    role: str
    size: Monomial
    itemsize: int | None
    reduce: str = "sum"  # an all-reduce's operation: "sum", "max" or "min"
    label: str = ""
    sparse: str | None = None
    rows: Monomial | None = None

    @property
    def name(self) -> str:
        """What the schedule calls it: its label, else the operation and the role of its
        axis, e.g. "AR(outer)", "AR-MAX(outer)", "AG(depth)"."""
        if self.label:
            return self.label
        short = {"all_reduce": "AR", "all_gather": "AG", "reduce_scatter": "RS"}[self.op]
        if self.reduce != "sum":
            short += "-" + self.reduce.upper()
        return f"{short}({self.role})"

    def numel(self, values: tuple[int, ...]) -> int:
        """Its size at ``values`` (one per `VARIABLES`)."""
        return _evaluate(self.size, values)

    def row_count(self, values: tuple[int, ...]) -> int | None:
        return None if self.rows is None else _evaluate(self.rows, values)


def _evaluate(m: Monomial, values: tuple[int, ...]) -> int:
    coef, exps = m
    out = coef * math.prod(Fraction(v) ** e for v, e in zip(values, exps))
    if out.denominator != 1:
        raise RecordingError(f"a recorded size is not whole at {dict(zip(VARIABLES, values))}:"
                             f" these sizes are not padded as the stage cuts them")
    return int(out)


def _operator_config(op: str) -> ModelConfig:
    """A model config whose kind runs operator ``op`` (its options at their defaults; what a
    stage reads per stage is in its plan)."""
    for kind in KINDS.values():
        if op in kind.stage_ops:
            return ModelConfig(2, 8, 0.0, kind=kind.name)
    return ModelConfig(2, 8, 0.0)


def _probe_plan(plan: LayerPlan, first: bool) -> LayerPlan:
    """``plan`` as the probe runs it: its roles on the probe grid's axes (`ROLE_AXES`), stage
    0 or 1, no BatchNorm after it (the schedule adds BatchNorm's own)."""
    return dataclasses.replace(plan, index=0 if first else 1, layer=0 if first else 1,
                               adj=1, norm=False, **ROLE_AXES)


def run_stage(plan: LayerPlan, dims: tuple[int, int, int], n: int, D: int, D2: int, *,
              first: bool, training: bool, learnable_features: bool = False,
              dtype: torch.dtype = torch.float32, wire: torch.dtype | None = None,
              seed: int = 0, degree: int = 2) -> list[Call]:
    """Run one stage's torch code (forward, and backward when ``training``) once for rank 0 of
    a grid whose outer, inner and depth axes have ``dims`` ranks, with padded sizes ``n``,
    ``D``, ``D2`` and ``degree`` non-zeros in each row of Â's block; return what its `DryComm`
    recorded, in program order."""
    p = _probe_plan(plan, first)
    shape = GridShape.of(dims)
    grid = DryGrid(shape, {"x": 0, "y": 0, "z": 0})
    comm = DryComm(grid, wire)
    operator = OPERATORS[p.op]
    gen = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    o, i, _ = dims
    rows_a, cols_a = n // shape[p.a_rows], n // shape[p.a_cols]
    blocks = {}
    if operator.graph and not p.dense:
        # ``degree`` non-zeros per row (values do not matter, only shapes do)
        r = np.repeat(np.arange(rows_a), degree)
        c = (r * 7 + np.tile(np.arange(degree), rows_a)) % cols_a
        m = sp.csr_matrix((rng.random(len(r), dtype=np.float32), (r, c)),
                          shape=(rows_a, cols_a))
        m.sum_duplicates()
        blocks[block_key(p)] = m
    in_ids = np.arange(n)[block(n, shape[p.in_rows], 0)]
    out_ids = np.arange(n)[block(n, shape[p.out_rows], 0)]
    ids = [in_ids, out_ids] if first else [None, in_ids, out_ids]
    shard = _ProbeShard(blocks, ids, out_ids, n)
    engine = EngineConfig(sparse_comm="off")
    graph = GraphBlocks(shard, [p], shape, grid.coords, grid.device, dtype, engine)
    cfg = _operator_config(p.op)
    ctx = StageContext(comm, graph, seed, dtype, model=cfg, engine=engine, num_nodes=n)
    spec = StageSpec(p, torch.from_numpy(in_ids), D, D2, output_ids=torch.from_numpy(out_ids))
    params, buffers = {}, {}  # the parameters' shards; running statistics (BatchNorm's)
    for decl in operator.params(p, D, D2):
        full = torch.rand(padded_shape(decl, p, D, D2), generator=gen)
        shard = shard_of_full(decl, p, grid, full, D, D2)
        if decl.buffer:
            buffers[decl.kind] = shard
        else:
            params[decl.kind] = torch.nn.Parameter(shard)
    g = StageGraph(ctx, spec, params=params)
    g.training, g.stats = training, buffers
    if operator.follows:  # runs on a stage's output: rows by the output's rows, cols by its cols
        H = torch.rand(n // shape[p.out_rows], D2 // shape[p.out_cols], generator=gen)
    else:
        H = torch.rand(n // o, D // i, generator=gen)
    needs_dh = operator.follows or not first or learnable_features  # BatchNorm: a stage's output
    H = H.to(dtype).requires_grad_(training and needs_dh)
    # the earlier outputs it reads: in H's layout, learned (their gradients go back)
    g.outputs = {k: torch.rand(H.shape, generator=gen).to(dtype).requires_grad_(training)
                 for k in operator.reads(p)}
    with (comm.at(p.layer, "forward" if training else "eval"),
            torch.enable_grad() if training else torch.no_grad(),
            comm.exact(operator.statistics)):
        OUT = layer_of(p.op).stage(g, H, 0)
    if training:  # through the output and what the stage hands on
        with comm.at(p.layer, "backward"):
            sum(Y.float().mul(torch.rand(Y.shape, generator=gen)).sum()
                for Y in [OUT, *g.carried.values()]).backward()
    return comm.calls


_REVERSE = {v: k for k, v in ROLE_AXES.items()}


def _probe_sizes(plan: LayerPlan, dims: tuple[int, int, int],
                 times: tuple[int, int, int] = (1, 1, 1)) -> tuple[int, int, int]:
    """Small probe sizes (n, D, D2) on ``dims`` that every cut of the stage divides, and every
    count its per-stage options hold (a GAT stage's heads split its width), each ``times``
    a base."""
    counts = [v for v in (dataclasses.astuple(plan.options)
                          if dataclasses.is_dataclass(plan.options) else ())
              if isinstance(v, int) and not isinstance(v, bool) and v > 0]
    axes = math.lcm(*dims)  # D is cut by the inner axis, then by W's flat axis
    base = (4 * axes, 2 * dims[1] * axes, 3 * math.lcm(axes, *counts))
    return tuple(b * t for b, t in zip(base, times))


def fit_stage(plan: LayerPlan, dims: tuple[int, int, int], *, first: bool, training: bool,
              learnable_features: bool = False, dtype: torch.dtype = torch.float32,
              wire: torch.dtype | None = None) -> list[Recorded]:
    """The stage's collectives on a grid whose roles have ``dims`` ranks (only which axes have
    more than one matters: the fit holds for every grid where the same do), as monomials of
    the `VARIABLES`, from three dry runs: a base probe (each such axis of 2 ranks), one with
    n, D, D2 times `PRIMES` (their exponents), one with those axes times `PRIMES` too (theirs);
    checked at a fourth (`RecordingError` if a size is no monomial or the probes disagree on
    what is issued)."""
    with _one_thread():
        return _fit(plan, tuple(d > 1 for d in dims), first, training, learnable_features,
                    dtype, wire)


@contextmanager
def _one_thread() -> Iterator[None]:
    """Within: torch computes on one thread. The probes are tiny; more threads only wait on
    each other (seconds per fit on a busy machine, against tens of milliseconds)."""
    saved = torch.get_num_threads()
    if saved != 1:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        if saved != 1:
            torch.set_num_threads(saved)


#: the factors of the variables in the probes that read their exponents (distinct primes, so a
#: size's ratio to the base's factors into them uniquely), and in the probe that checks them;
#: the non-zeros per row of Â's block in every probe, and in the one that checks no size moves
#: with them (a per-edge collective: the fit has no variable for the graph's degree)
PRIMES, CHECK = (2, 3, 5), (3, 2, 2)
DEGREE, CHECK_DEGREE = 2, 3


def _fit(plan: LayerPlan, active: tuple[bool, ...], first: bool, training: bool,
         learnable_features: bool, dtype: torch.dtype, wire: torch.dtype | None
         ) -> list[Recorded]:
    def scaled(factors):  # the active axes times ``factors``
        return tuple(2 * f if a else 1 for a, f in zip(active, factors))
    base = scaled((1, 1, 1))
    probes = [(base, _probe_sizes(plan, base)), (base, _probe_sizes(plan, base, PRIMES))]
    probes.append((scaled(PRIMES), _probe_sizes(plan, scaled(PRIMES))))
    probes.append((scaled(CHECK), _probe_sizes(plan, scaled(CHECK), CHECK)))
    kw = dict(first=first, training=training, learnable_features=learnable_features,
              dtype=dtype, wire=wire)
    runs = [run_stage(plan, dims, *sizes, degree=DEGREE, **kw) for dims, sizes in probes]
    denser = run_stage(plan, probes[0][0], *probes[0][1], degree=CHECK_DEGREE, **kw)
    shapes = {tuple(c._replace(size=0, rows=None) for c in r) for r in [*runs, denser]}
    if len(shapes) != 1:
        raise RecordingError(f"operator {plan.op!r}: its collectives differ between probe sizes")
    for c, d in zip(runs[0], denser):
        if (c.size, c.rows) != (d.size, d.rows):
            raise RecordingError(
                f"operator {plan.op!r}: a {c.op} over its {_REVERSE[c.axis]} axis moves with the "
                f"non-zeros of Â's block ({c.size} elements at {DEGREE} per row, {d.size} at "
                f"{CHECK_DEGREE}): a per-edge collective, which the fit in {VARIABLES} cannot "
                "price")
    at = [sizes + dims for dims, sizes in probes]  # each probe's values of the VARIABLES
    out = []
    for j, c in enumerate(runs[0]):
        what = (f"operator {plan.op!r}: a {c.op} over its {_REVERSE[c.axis]} axis is no "
               f"monomial of {VARIABLES}")
        size = _fit_monomial(at, [r[j].size for r in runs], what)
        rows = None if c.rows is None else _fit_monomial(at, [r[j].rows for r in runs], what)
        out.append(Recorded("backward" if c.phase == "backward" else "forward", c.op,
                            _REVERSE[c.axis], size, c.itemsize if c.exact else None, c.reduce,
                            c.name, c.sparse, rows))
    return out


def _fit_monomial(at: list[tuple[int, ...]], got: list[int], what: str) -> Monomial:
    """The monomial of the `VARIABLES` that is ``got[k]`` at ``at[k]`` for the base, the
    sizes', the axes' and the check probe."""
    sizes = _exponents(Fraction(got[1], got[0]), what)
    axes_part = Fraction(got[2], got[0]) / math.prod(
        Fraction(a, b) ** e for a, b, e in zip(at[2][:3], at[0][:3], sizes))
    axes = _exponents(axes_part, what)
    exps = sizes + axes
    coef = Fraction(got[0]) / math.prod(Fraction(v) ** e for v, e in zip(at[0], exps))
    if _evaluate((coef, exps), at[3]) != got[3]:
        raise RecordingError(what + " (the check probe disagrees)")
    return coef, exps


def _exponents(ratio: Fraction, what: str) -> tuple[int, int, int]:
    """The exponents (e_2, e_3, e_5) with ratio = 2^e_2·3^e_3·5^e_5 (`PRIMES`)."""
    exps = []
    num, den = ratio.numerator, ratio.denominator
    for prime in PRIMES:
        e = 0
        while num % prime == 0:
            num, e = num // prime, e + 1
        while den % prime == 0:
            den, e = den // prime, e - 1
        exps.append(e)
    if num != 1 or den != 1:
        raise RecordingError(what)
    return tuple(exps)


@functools.lru_cache(maxsize=None)
def _cached_fit(plan: LayerPlan, active: tuple[bool, ...], first: bool, training: bool,
                learnable_features: bool, dtype: torch.dtype, wire: torch.dtype | None
                ) -> tuple[Recorded, ...]:
    """`fit_stage` memoized (a fit depends on nothing else: the plan is normalized to its
    roles, so every grid and stage of one kind with the same axes of more than one rank shares
    it)."""
    with _one_thread():
        return tuple(_fit(plan, active, first, training, learnable_features, dtype, wire))


class StageRecorder:
    """The schedule's recorder of an operator's collectives
    (`plexus_partition.model.schedule.Recorder`): dry-run fits, cached per stage kind and grid
    roles for the life of the process. ``dtype_bytes``: the compute precision's;
    ``wire_bytes``: the wire's under a float32 compute (None: payloads sent as computed; a
    payload's item size is the schedule's to fill in either way)."""

    def __init__(self, dtype_bytes: int = 4, wire_bytes: int | None = None) -> None:
        self.dtype = _DTYPES[dtype_bytes]
        self.wire = None if wire_bytes in (None, dtype_bytes) else _DTYPES[wire_bytes]

    def fits(self, op: str, z: StageSizes, training: bool) -> tuple[Recorded, ...]:
        """The fits of operator ``op`` at stage ``z`` on its grid (training: forward and
        backward; else the evaluation's forward)."""
        first = z.plan.index == 0
        plan = _probe_plan(dataclasses.replace(z.plan, op=op), first)
        return _cached_fit(plan, (z.o > 1, z.i > 1, z.d > 1), first, training,
                           first and z.learnable_features, self.dtype, self.wire)

    def __call__(self, op: str, z: StageSizes, phase: str) -> list[tuple]:
        """Operator ``op``'s collectives of ``phase`` ("forward", "eval" or "backward") at
        stage sizes ``z`` (its own or, BatchNorm, those of the stage it follows), in program
        order, as ``(name, phase, op, axis, size, itemsize, rows, sparse)`` (the schedule's
        ``add`` arguments)."""
        training = phase != "eval"
        want = "backward" if phase == "backward" else "forward"
        p, out, values = z.plan, [], (z.n, z.D, z.D2, z.o, z.i, z.d)
        for r in self.fits(op, z, training):
            if r.phase != want:
                continue
            out.append((r.name, phase, r.op, getattr(p, r.role), r.numel(values), r.itemsize,
                        r.row_count(values), r.sparse))
        return out


__all__ = ["DryComm", "DryGrid", "Recorded", "RecordingError", "StageRecorder", "fit_stage",
           "run_stage"]
