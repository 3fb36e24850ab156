"""Every kind's collectives recorded from a dry run of its torch code (`plexus.engine.dryrun`)
against the independent oracle of the hand-written declarations moved out of the product into
`tests/declared_collectives.py` (names, sizes, item sizes, the aggregation's rows and sparse
exchanges), on several grids and orders, both stage positions, learnable features, averaged and
concatenated heads and the wire and compute precisions. The multi-rank ledger tests
(`tests/engine_checks.py`, ``check_ledger``) check the recorded schedule against what real runs
send."""

from __future__ import annotations

import dataclasses
import re
from collections import Counter

import pytest
import torch

from declared_collectives import declaration
from plexus.engine.drycomm import DryComm, DryGrid
from plexus.engine.dryrun import (RecordingError, StageRecorder, fit_stage,
                                  run_stage)
from plexus.engine.kinds import LAYERS, KindLayer
from plexus_partition.model.grid import GridShape
from plexus_partition.model.layout import padding
from plexus_partition.model.model import ModelConfig
from plexus_partition.model.ops import OPERATORS, KindSpec
from plexus_partition.model.ops.base import stage_sizes
from plexus_partition.model.schedule import (SparseExchange, UndeclaredError,
                                             epoch_collectives, estimated_rows)

FEATURES, CLASSES, NODES = 20, 5, 50


def declared(op: str, z, phase: str) -> Counter:
    """The oracle: (name, phase, op, axis, size, itemsize, rows, sparse) of every declared
    collective over an axis of more than one rank (rows: a forward's only, where the engine
    cuts the aggregation into row pieces; the schedule keeps no backward's)."""
    out = Counter()

    def add(name, ph, kind, axis, size, itemsize=None, rows=None, sparse=None):
        if z.shape[axis] > 1:
            out[name, ph, kind, axis, size, itemsize, rows if ph != "backward" else None,
                sparse] += 1
    declaration(op)(add, z, phase)
    return out


def recorded(rec: StageRecorder, op: str, z, phase: str) -> Counter:
    return Counter((name, ph, kind, axis, size, itemsize, rows if ph != "backward" else None,
                    sparse)
                   for name, ph, kind, axis, size, itemsize, rows, sparse in rec(op, z, phase))


def stages(kind: str, grid, order: str, learnable: bool, num_layers: int = 3, **options):
    cfg = ModelConfig(num_layers, 16, 0.0, kind=kind, order=order, norm="batch", **options)
    plans = cfg.plans(FEATURES, CLASSES)
    shape = GridShape.of(grid)
    pad = padding(shape, plans, NODES, cfg.widths(FEATURES, CLASSES))
    for z in stage_sizes(plans, shape, pad, OPERATORS, learnable_features=learnable):
        yield z.plan.op, z
        if z.plan.norm:
            yield "batchnorm", z


KINDS = [("gcn", {}), ("gcn", {"residual": True}), ("sage", {}), ("gin", {"train_eps": True}),
         ("mlp", {}), ("gat", {"heads": 2, "out_heads": 3}), ("graphconv", {}),
         ("appnp", {"hops": 3}), ("appnp", {"num_layers": 1, "hops": 1, "bias": False}),
         ("gcnii", {"num_layers": 5}), ("gcnii", {"shared_weights": False}),
         ("gatv2", {"heads": 2, "out_heads": 3}), ("gatv2", {"bias": False})]


def test_recorded_equals_declared_for_every_kind():
    """Every operator of the registry, on four grids (an axis of one rank on three), aggregate
    and combine first, stage 0 with fixed and learnable features: training forward,
    evaluation forward and backward each record what is declared (GAT: hidden layers' heads concatenated, the
    last's averaged)."""
    rec, seen, fails = StageRecorder(), set(), []
    for (grid, order, learnable) in (((2, 2, 2), "agg", False), ((3, 1, 2), "combine", True),
                                     ((1, 4, 2), "agg", True), ((2, 3, 1), "combine", False)):
        for kind, options in KINDS:
            for op, z in stages(kind, grid, order, learnable, **options):
                seen.add(op)
                for phase in ("forward", "eval", "backward"):
                    want, got = declared(op, z, phase), recorded(rec, op, z, phase)
                    if want != got:
                        fails.append(f"{kind} {grid} {order} stage {z.plan.index} {op} "
                                     f"{phase}: declared {dict(want)} recorded {dict(got)}")
    assert not fails, "\n".join(fails[:5])
    assert seen == set(OPERATORS)


@pytest.mark.parametrize("dtype_bytes,wire_bytes", [(2, None), (4, 2)])
def test_statistics_stay_float32_and_payloads_follow_the_run(dtype_bytes, wire_bytes):
    """Under a bf16 compute or a bf16 wire the dry run's ledger records 2 bytes for every
    payload and 4 for the statistics sent exactly (GAT's scores and softmax, BatchNorm's sums),
    and the recorder hands the schedule exactly the declared item sizes (None: the payload)."""
    dtype = torch.bfloat16 if dtype_bytes == 2 else torch.float32
    wire = torch.bfloat16 if wire_bytes == 2 else None
    rec = StageRecorder(dtype_bytes, wire_bytes)
    for kind, options in (("gat", {"heads": 2, "out_heads": 2}), ("gcn", {})):
        for op, z in stages(kind, (2, 2, 2), "agg", False, **options):
            for phase in ("forward", "backward"):
                assert recorded(rec, op, z, phase) == declared(op, z, phase), (kind, op, phase)
            first = z.plan.index == 0
            plan = dataclasses.replace(z.plan, op=op)
            calls = run_stage(plan, (z.o, z.i, z.d), z.n, z.D, z.D2, first=first,
                              training=True, dtype=dtype, wire=wire)
            assert calls and {(c.itemsize, c.exact) for c in calls} <= {(2, False), (4, True)}
            if op in ("gat", "batchnorm"):
                assert any(c.exact for c in calls)


def test_dry_comm_keeps_shapes_and_records_like_comm():
    """All-reduce: the input itself; all-gather: p copies of the rows; reduce-scatter: the
    first 1/p of them; the ledger keys them as the real `Comm` does (full size, layer, phase);
    nothing over an axis of one rank."""
    comm = DryComm(DryGrid(GridShape.of((2, 1, 3)), {"x": 1, "y": 0, "z": 2}))
    x = torch.arange(12.0).reshape(6, 2)
    with comm.at(3, "forward"):
        assert comm.raw_all_reduce(x, "x") is x
        assert torch.equal(comm.raw_all_gather(x, "z"), torch.cat([x, x, x]))
        assert torch.equal(comm.raw_reduce_scatter(x, "z"), x[:2])
        assert comm.raw_all_gather(x, "y") is x
    assert dict(comm.ledger.collectives) == {(3, "forward", "all_reduce", "x", 12, 4): 1,
                                             (3, "forward", "all_gather", "z", 36, 4): 1,
                                             (3, "forward", "reduce_scatter", "z", 12, 4): 1}


def _oracle(op, z, phase):
    out = []

    def add(name, ph, kind, axis, size, itemsize=None, rows=None, sparse=None):
        out.append((name, ph, kind, axis, size, itemsize, rows, sparse))
    declaration(op)(add, z, phase)
    return out


@pytest.mark.parametrize("kind,options", [("gat", {"heads": 2}), ("gcn", {}),
                                          ("sage", {"order": "combine"}),
                                          ("gin", {"train_eps": True})])
def test_the_schedule_is_recorded(kind, options):
    """No built-in kind declares its collectives: without a recorder the schedule says so;
    with one, the whole epoch (training, loss, evaluation) equals the schedule built from the
    moved declarations collective by collective: names, item sizes, the aggregation's rows
    and its sums sent as sparse exchanges (SRS + AG, RS + SAG) where the estimate says so."""
    cfg = ModelConfig(3, 8, 0.0, kind=kind, norm="batch", **options)
    plans = cfg.plans(FEATURES, CLASSES)
    shape = GridShape.of((2, 2, 2))
    pad = padding(shape, plans, NODES, cfg.widths(FEATURES, CLASSES))
    assert not any(op.declares for op in OPERATORS.values())
    with pytest.raises(UndeclaredError, match=f"'{plans[0].op}' declares no collectives"):
        epoch_collectives(plans, shape, pad)
    exchange = SparseExchange("on", estimated_rows(1.5))
    got = epoch_collectives(plans, shape, pad, evaluate=True, exchange=exchange,
                            recorder=StageRecorder())
    want = epoch_collectives(plans, shape, pad, evaluate=True, exchange=exchange,
                             recorder=_oracle)
    assert Counter(got) == Counter(want) and len(got) > 20
    assert any(c.name.startswith("SRS") for c in got) is (kind == "gcn")  # no root term


class _Uneven(KindSpec):
    """A stage's spec whose layer (`_UnevenLayer`) all-reduces n·D/(|o||i|) + D/|i| elements:
    no monomial of n, D, D2."""

    name = "uneven"
    graph = False

    def params(self, plan, d_in, d_out):
        return []


class _UnevenLayer(KindLayer):
    name = "uneven"

    def stage(self, g, H, step):
        return g.comm.all_reduce(torch.cat([H.flatten(), H[0]]), g.plan.inner)[:1, None]


def test_a_size_that_is_no_monomial_is_refused(monkeypatch):
    monkeypatch.setitem(OPERATORS, "uneven", _Uneven())
    monkeypatch.setitem(LAYERS, "uneven", _UnevenLayer())
    plan = dataclasses.replace(next(stages("mlp", (1, 2, 1), "agg", False))[1].plan,
                               op="uneven")
    with pytest.raises(RecordingError, match="no monomial"):
        fit_stage(plan, (1, 2, 1), first=False, training=False)


class _Probe(KindSpec):
    """A parameterless stage's spec (a graph stage: Â's block is built for it); its layer is
    `_ProbeLayer`."""

    name = "probe"

    def params(self, plan, d_in, d_out):
        return []


class _ProbeLayer(KindLayer):
    """All-reduces what ``sent(g, H)`` gives over the stage's outer axis."""

    name = "probe"

    def __init__(self, sent) -> None:
        super().__init__()
        self.sent = sent

    def stage(self, g, H, step):
        g.comm.all_reduce(self.sent(g, H), g.plan.outer)
        return H


def _fit_probe(monkeypatch, sent, kind: str, dims):
    monkeypatch.setitem(OPERATORS, "probe", _Probe())
    monkeypatch.setitem(LAYERS, "probe", _ProbeLayer(sent))
    plan = dataclasses.replace(next(stages(kind, dims, "combine", False))[1].plan, op="probe")
    return fit_stage(plan, dims, first=False, training=False)


def test_a_size_that_moves_with_the_graphs_degree_is_refused(monkeypatch):
    """A per-edge all-reduce (GATv2's kind of collective) has no variable in the fit: the probe
    of 3 non-zeros per row, beside the others' 2, finds it (issue 57: it was fitted as if every
    node had two edges, 8x under-priced on ogbn-papers100M)."""
    with pytest.raises(RecordingError, match="moves with the non-zeros") as refused:
        _fit_probe(monkeypatch, lambda g, H: g.edge_values().float().clone(), "gat", (2, 2, 2))
    two, three = map(int, re.search(r"\((\d+) elements at 2 per row, (\d+) at 3",
                                    str(refused.value)).groups())
    assert three * 2 == two * 3  # the block's edges: rows × degree
    # the same stage sending a node-sized tensor fits: one monomial, n/(|o|) rows of H
    fit = _fit_probe(monkeypatch, lambda g, H: H.clone(), "gat", (2, 2, 2))
    assert len(fit) == 1 and fit[0].op == "all_reduce"


def test_a_size_only_the_check_probe_sees_is_refused(monkeypatch):
    """n·D/|o| elements, and one more where H's rows are a multiple of 3: at the base probe,
    the sizes' and the axes' (H's rows 4, 8 and 4 on an outer axis of 2, 2 and 4 ranks) it
    is one monomial; only the check probe (6 ranks, 12 rows) disagrees. Without that probe
    the fit would take the wrong size."""
    def sent(g, H):
        return torch.cat([H.flatten(), H[0, :1]]) if H.shape[0] % 3 == 0 else H.flatten()
    with pytest.raises(RecordingError, match="the check probe disagrees"):
        _fit_probe(monkeypatch, sent, "mlp", (2, 1, 1))
