"""The hand-written collectives of the kinds whose schedule is now recorded from a dry run of
their torch code (`plexus.engine.dryrun`): GAT, the dense stage and BatchNorm, as
`plexus_partition.model.ops` declared them before (moved here unchanged), the independent
oracle `tests/engine/test_dryrun.py` checks the recording against. Each function is
``(add, z, phase)``, ``add`` the schedule's (name, phase, op, axis, size, itemsize=None) and
``z`` a stage's `plexus_partition.model.ops.base.StageSizes`; "backward" is the phase of the
backward's."""

from __future__ import annotations

from plexus_partition.model.ops.base import div

STAT_BYTES = 4  # float32 statistics in every compute precision


def _heads(plan) -> int:
    return getattr(plan.options, "heads", 1)


def _concat(plan) -> bool:
    return getattr(plan.options, "concat", True)


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
        add("AR-MAX(e)", phase, "all_reduce", o, div(n * H, z.i), STAT_BYTES)
        add("AR-SUM(e)", phase, "all_reduce", o, div(n * H, z.i), STAT_BYTES)
        if not _concat(p):
            add("RS(OUT)", phase, "reduce_scatter", d, div(n * z.D2, z.i))
        add("AR(OUT)", phase, "all_reduce", o, div(n * z.D2, z.i * z.d))
        return
    if not _concat(p):
        add("AG(dOUT)", "backward", "all_gather", d, div(n * z.D2, z.i))
    add("AR(Σα·dα)", "backward", "all_reduce", o, div(n * H, z.i), STAT_BYTES)
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


#: operator name -> its moved declaration
DECLARED = {"gat": gat, "dense": dense, "batchnorm": batchnorm}
