"""The hand-written collectives of every kind, whose schedule is now recorded from a dry run of
its torch code (`plexus.engine.dryrun`): the graph convolutions (GCN, SAGE, GIN, GraphConv),
GAT, the dense stage and BatchNorm, as `plexus_partition.model.ops` declared them before
(moved here unchanged but for the form), and APPNP's, GCNII's and GATv2's, written by hand from
docs/design.md's tables: the independent oracle `tests/engine/test_dryrun.py` checks the
recording against. Each function is ``(add, z, phase)``, ``add`` the schedule's (name, phase,
op, axis, size, itemsize=None) and
``z`` a stage's `plexus_partition.model.ops.base.StageSizes`; "backward" is the phase of the
backward's."""

from __future__ import annotations

from plexus_partition.model.ops import OPERATORS
from plexus_partition.model.ops.base import div
from plexus_partition.model.ops.conv import ConvOperator

STAT_BYTES = 4  # float32 statistics in every compute precision


def _heads(plan) -> int:
    return getattr(plan.options, "heads", 1)


def _concat(plan) -> bool:
    return getattr(plan.options, "concat", True)


def _attention(add, z, phase: str) -> None:
    """GAT's and GATv2's softmax statistics over o and α-weighted aggregation (averaged heads:
    RS over d first); backward the softmax's row sums and, averaged, AG(dOUT) over d."""
    p, n, H = z.plan, z.n, _heads(z.plan)
    if phase != "backward":
        add("AR-MAX(e)", phase, "all_reduce", p.outer, div(n * H, z.i), STAT_BYTES)
        add("AR-SUM(e)", phase, "all_reduce", p.outer, div(n * H, z.i), STAT_BYTES)
        if not _concat(p):
            add("RS(OUT)", phase, "reduce_scatter", p.depth, div(n * z.D2, z.i))
        add("AR(OUT)", phase, "all_reduce", p.outer, div(n * z.D2, z.i * z.d))
        return
    if not _concat(p):
        add("AG(dOUT)", "backward", "all_gather", p.depth, div(n * z.D2, z.i))
    add("AR(Σα·dα)", "backward", "all_reduce", p.outer, div(n * H, z.i), STAT_BYTES)


def gat(add, z, phase: str) -> None:
    """GAT (combine first): Z = H·W, the node scores, the edge softmax's row statistics, the
    α-weighted aggregation per head, concatenated or averaged."""
    p, n, H = z.plan, z.n, _heads(z.plan)
    o, i, d = p.outer, p.inner, p.depth
    if phase != "backward":
        add("AG(W)", phase, "all_gather", o, div(z.D * z.Di, z.i * z.d))
        add("AR(Z)", phase, "all_reduce", i, div(n * z.Di, z.o * z.d))
        add("AR(s)", phase, "all_reduce", d, div(n * 2 * H, z.o), STAT_BYTES)
        add("AR(s→rows)", phase, "all_reduce", o, div(n * H, z.i), STAT_BYTES)
        _attention(add, z, phase)
        return
    _attention(add, z, phase)
    add("AR(ds→rows)", "backward", "all_reduce", o, div(n * H, z.i), STAT_BYTES)
    add("AR(ds)", "backward", "all_reduce", d, div(n * 2 * H, z.o), STAT_BYTES)
    for axis in (o, i):  # a is replicated over o and i, its gradient partial over both
        add("AR(da)", "backward", "all_reduce", axis, div(2 * z.Di, z.d), STAT_BYTES)
    add("AR(dZ)", "backward", "all_reduce", i, div(n * z.Di, z.o * z.d))
    add("RS(dW)", "backward", "reduce_scatter", o, div(z.D * z.Di, z.i * z.d))


def dense(add, z, phase: str) -> None:
    """A dense stage H·W: AG(W) over o, AR(OUT) over i; backward RS(dW) over o."""
    p = z.plan
    if phase != "backward":
        add("AG(W)", phase, "all_gather", p.outer, div(z.D * z.D2, z.i * z.d))
        add("AR(OUT)", phase, "all_reduce", p.inner, div(z.n * z.D2, z.o * z.d))
        return
    add("RS(dW)", "backward", "reduce_scatter", z.plan.outer, div(z.D * z.D2, z.i * z.d))


def batchnorm(add, z, phase: str) -> None:
    """BatchNorm after a stage: the column sums Σx, Σ(x−mean)² over the output's rows (training
    only: evaluation normalizes with the running statistics); backward their gradients and
    γ's, β's; every one float32."""
    p = z.plan
    if phase == "eval":
        return
    names = (("AR(Σx)", "AR(Σx²)") if phase == "forward"
             else ("AR(dγ)", "AR(dβ)", "AR(dΣx)", "AR(dΣx²)"))
    for what in names:
        add(what, phase, "all_reduce", p.out_rows, div(z.D2, z.size(p.out_cols)), STAT_BYTES)


def conv(add, z, phase: str) -> None:
    """A graph convolution (`plexus_partition.model.ops.conv.ConvOperator`) with its root term:
    aggregate first AR(AGG) over o, AG(W) (and Wr) over d, AR(OUT) over i; combine first AG(W)
    (and Wr) over o, AR(Z) over i, AR(OUT) over o; the sums of a plain block's products (and
    the gather of AGG's gradient) may travel as sparse exchanges of ``rows`` rows."""
    op = OPERATORS[z.plan.op]
    p, n, D, D2 = z.plan, z.n, z.D, z.D2
    o, i, d = p.outer, p.inner, p.depth
    weights = ("W", "Wr") if op.gathers_wr(p) else ("W",)
    if phase != "backward":
        # the sum of a plain block's products may travel as a sparse exchange; a stacked
        # block's S rows are another row set, not exchanged sparsely (yet)
        rows = (op.stacked(p) if p.order == "agg" else 1) * div(n, z.size(p.a_rows))
        sparse = None if op.root(p).stacked else "sum"
        if p.order == "agg":
            add("AR(AGG)", phase, "all_reduce", o, op.stacked(p) * div(n * D, z.d * z.i),
                rows=rows, sparse=sparse)
            for w in weights:
                add(f"AG({w})", phase, "all_gather", d, div(D * D2, z.i * z.o))
            add("AR(OUT)", phase, "all_reduce", i, div(n * D2, z.d * z.o))
        else:
            for w in weights:
                add(f"AG({w})", phase, "all_gather", o, div(D * D2, z.i * z.d))
            add("AR(Z)", phase, "all_reduce", i, op.wide(p) * div(n * D2, z.o * z.d))
            add("AR(OUT)", phase, "all_reduce", o, div(n * D2, z.i * z.d), rows=rows,
                sparse=sparse)
        return
    if op.learns_eps(p):
        for axis in ("x", "y", "z"):  # ε is replicated on every rank
            add("AR(dε)", "backward", "all_reduce", axis, 1)
    if p.order == "agg":
        for w in weights:
            add(f"RS(d{w})", "backward", "reduce_scatter", d, div(D * D2, z.i * z.o))
        if z.needs_dh:  # dAGG only feeds dH; autograd skips both for fixed input features
            # Âᵀ·dAGG reads only the rows the block touches: a sparse gather may carry it
            add("AR(dAGG)", "backward", "all_reduce", o, op.stacked(p) * div(n * D, z.d * z.i),
                rows=div(n, z.size(p.a_rows)), sparse=None if op.root(p).stacked else "gather")
    else:
        add("AR(dZ)", "backward", "all_reduce", i, op.wide(p) * div(n * D2, z.o * z.d))
        for w in weights:
            add(f"RS(d{w})", "backward", "reduce_scatter", o, div(D * D2, z.i * z.d))


def appnp(add, z, phase: str) -> None:
    """APPNP's propagating stage (combine first, written by hand from docs/design.md's table):
    Z = H·W as a dense stage's, b's gradient over o and i, S·Z⁰ over o, each hop's Â·Z over o
    and (all but the last) Sᵀ·Z over i, whose backward marks sum over o and over i."""
    p, n, hops = z.plan, z.n, z.plan.options.hops
    o, i = p.outer, p.inner
    nodes, rows = div(n * z.D2, z.o * z.d), div(n * z.D2, z.i * z.d)  # Z's rows, Â's rows
    if phase != "backward":
        add("AG(W)", phase, "all_gather", o, div(z.D * z.D2, z.i * z.d))
        add("AR(Z)", phase, "all_reduce", i, nodes)
        add("AR(S·Z⁰)", phase, "all_reduce", o, rows)
        for k in range(hops):
            add("AR(Â·Z)", phase, "all_reduce", o, rows)
            if k < hops - 1:
                add("AR(Sᵀ·Z)", phase, "all_reduce", i, nodes)
        return
    for _ in range(hops - 1):
        add("AR(dZ)", "backward", "all_reduce", o, rows)
        add("AR(dZ)", "backward", "all_reduce", i, nodes)
    if p.bias:
        for axis in (o, i):
            add("AR(db)", "backward", "all_reduce", axis, div(z.D2, z.d))
    add("AR(dZ)", "backward", "all_reduce", i, nodes)
    add("RS(dW)", "backward", "reduce_scatter", o, div(z.D * z.D2, z.i * z.d))


def gcn2(add, z, phase: str) -> None:
    """A GCNII stage (aggregate first, by hand from docs/design.md's table): Â·H and S·H⁰
    over o, each weight's AG over d and its product's AR(OUT) over i, H⁰ handed on (S·H⁰·I,
    AR over i) where the next stage reads it; backward H⁰'s AR over d, the two marks over o,
    each weight's RS over d."""
    p, n = z.plan, z.n
    o, i, d = p.outer, p.inner, p.depth
    weights = 1 if getattr(p.options, "shared_weights", True) else 2
    agg, out = div(n * z.D, z.d * z.i), div(n * z.D2, z.d * z.o)
    carries = getattr(p.options, "carries", False)
    if phase != "backward":
        add("AR(AGG)", phase, "all_reduce", o, agg)
        add("AR(S·H⁰)", phase, "all_reduce", o, agg)
        for _ in range(weights):
            add("AG(W)", phase, "all_gather", d, div(z.D * z.D2, z.i * z.o))
            add("AR(OUT)", phase, "all_reduce", i, out)
        if carries:
            add("AR(OUT)", phase, "all_reduce", i, out)
        return
    add("AR(dH⁰)", "backward", "all_reduce", d, z.h_in)
    add("AR(dAGG)", "backward", "all_reduce", o, agg)
    add("AR(dS·H⁰)", "backward", "all_reduce", o, agg)
    for _ in range(weights):
        add("RS(dW)", "backward", "reduce_scatter", d, div(z.D * z.D2, z.i * z.o))


def gatv2(add, z, phase: str) -> None:
    """GATv2 (combine first, by hand from docs/design.md's table): Zl and Zr as GAT's Z, Zr to
    Â's rows, both and a gathered over d (their gradients reduce-scattered), GAT's softmax
    statistics and aggregation; the biases of Wl and Wr summed over o and i."""
    p, n = z.plan, z.n
    o, i, d = p.outer, p.inner, p.depth
    nodes, rows = div(n * z.Di, z.o * z.d), div(n * z.Di, z.i * z.d)
    if phase != "backward":
        for _ in ("Zl", "Zr"):
            add("AG(W)", phase, "all_gather", o, div(z.D * z.Di, z.i * z.d))
            add("AR(Z)", phase, "all_reduce", i, nodes)
        add("AR(S·Zr)", phase, "all_reduce", o, rows)
        add("AG(Z)", phase, "all_gather", d, div(n * z.Di, z.o))
        add("AG(Z)", phase, "all_gather", d, div(n * z.Di, z.i))
        add("AG(a)", phase, "all_gather", d, z.Di)
        _attention(add, z, phase)
        return
    _attention(add, z, phase)
    add("RS(da)", "backward", "reduce_scatter", d, z.Di)
    add("RS(dZ)", "backward", "reduce_scatter", d, div(n * z.Di, z.o))
    add("RS(dZ)", "backward", "reduce_scatter", d, div(n * z.Di, z.i))
    add("AR(dZr→rows)", "backward", "all_reduce", o, rows)
    for axis in (o, i):  # a and the biases are replicated over o and i
        add("AR(da)", "backward", "all_reduce", axis, div(z.Di, z.d))
        if getattr(p.options, "lin_bias", True):
            for _ in ("bl", "br"):
                add("AR(db)", "backward", "all_reduce", axis, div(z.Di, z.d))
    for _ in ("Zl", "Zr"):
        add("AR(dZ)", "backward", "all_reduce", i, nodes)
        add("RS(dW)", "backward", "reduce_scatter", o, div(z.D * z.Di, z.i * z.d))


#: operator name -> its moved declaration (a graph convolution's: `conv`)
DECLARED = {"gat": gat, "dense": dense, "batchnorm": batchnorm, "appnp": appnp, "gcnii": gcn2,
            "gatv2": gatv2}


def declaration(op: str):
    """Operator ``op``'s declaration: its own, or `conv` for a graph convolution (a new kind
    built on `ConvOperator` included)."""
    return DECLARED.get(op) or (conv if isinstance(OPERATORS[op], ConvOperator) else None)
