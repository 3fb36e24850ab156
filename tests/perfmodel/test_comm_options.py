"""What moves per epoch under issue 45's options, by hand: sparse exchanges (exact and
estimated rows, the auto rule), the kept layer-0 input, the payload precision; the memory they
cost; the per-collective account of plexus-model --explain."""

from __future__ import annotations

import pytest

from plexus_partition.model.schedule import SparseExchange, estimated_rows, exact_rows
from plexus.perfmodel import Calibration, ModelSpec
from plexus.perfmodel.cli import model_main
from plexus.perfmodel.explain import account
from plexus.perfmodel.model import epoch_memory, epoch_volume, estimate

# N=16, one aggregate-first layer 8 -> 4 on 2x1x1: (o,i,d) = (x,y,z), Â's block 16 rows (d=1)
# by 8 columns; AR(AGG) over x of 16·8 = 128 elements (128 moved), nothing else over x but the
# loss's AR of 1 element over the rows axis... the loss sums over z and y: size 1 (not issued).
ONE = dict(num_layers=1, hidden=8, bias=False, order="agg", keep_input=False)


def by_name(v):
    return {(c.name, c.op): (c.size, c.elements) for c in v.collectives}


def test_sparse_sum_by_hand():
    spec = ModelSpec.of(16, 100, 8, 4, sparse_comm="on", **ONE)
    dense = epoch_volume(ModelSpec.of(16, 100, 8, 4, sparse_comm="off", **ONE), (2, 1, 1))
    assert by_name(dense)[("AR(AGG)", "all_reduce")] == (128, 128)
    # this rank sends 3 touched rows of width 8 to the other; the sum's pieces are gathered:
    # 64 of 128 elements moved
    v = epoch_volume(spec, (2, 1, 1), exchange=SparseExchange("on", exact_rows(
        {(0, "sum"): (3, 5)})))
    names = by_name(v)
    assert ("AR(AGG)", "all_reduce") not in names
    assert names[("SRS(AGG)", "all_to_all")] == (24, 24)
    assert names[("AG(AGG)", "all_gather")] == (128, 64)
    assert v.total_elements == pytest.approx(dense.total_elements - 128 + 24 + 64)


def test_auto_keeps_the_all_reduce_where_a_rank_sends_half_the_rows():
    # the exchange replaces the all-reduce's reduce-scatter half, (p-1)/p·16 = 8 rows' worth
    spec = ModelSpec.of(16, 100, 8, 4, **ONE)
    for most, sparse in ((7, True), (8, False)):
        v = epoch_volume(spec, (2, 1, 1), exchange=SparseExchange("auto", exact_rows(
            {(0, "sum"): (2, most)})))
        assert (("SRS(AGG)", "all_to_all") in by_name(v)) is sparse


def test_estimated_rows_by_hand():
    # mean degree 3 over p = 2: a row is touched with probability 1 - (1/2)^3 = 7/8, and
    # (p-1)/p of the 16 rows lie in the other rank's piece: 7 rows sent
    assert estimated_rows(3.0)(0, "sum", "x", 16, 2) == (7.0, 7.0)
    v = epoch_volume(ModelSpec.of(16, 48, 8, 4, **ONE), (2, 1, 1))
    assert by_name(v)[("SRS(AGG)", "all_to_all")] == (56, 56)


def test_gather_of_the_gradient_by_hand():
    # two aggregate-first layers on 2x1x1: layer 1 has (o,i,d) = (z,x,y), so take 1x1x2 for
    # its outer axis z: layer 1's AR(dAGG) over z of 16·8 = 128 becomes RS(dAGG) (64 moved)
    # and the sparse gather of 5 rows of width 8
    spec = ModelSpec.of(16, 100, 8, 4, num_layers=2, hidden=8, bias=False, order="agg",
                        keep_input=False)
    counts = {(1, "sum"): (4, 4), (1, "gather"): (5, 6)}
    names = by_name(epoch_volume(spec, (1, 1, 2), exchange=SparseExchange("on", exact_rows(
        counts))))
    assert names[("RS(dAGG)", "reduce_scatter")] == (128, 64)
    assert names[("SAG(dAGG)", "all_to_all")] == (40, 40)
    assert names[("SRS(AGG)", "all_to_all")] == (32, 32)


def test_kept_input_leaves_out_the_gather_and_costs_the_block():
    # 2x2x2, N=16, F=8: AG(H) over z of N·F/(|o|·|i|) = 32 elements (16 moved); kept, the
    # rank holds that block (32 elements of 4 bytes) instead of its shard (16)
    base = dict(num_layers=2, hidden=8, bias=False, order="agg", sparse_comm="off")
    gathered = ModelSpec.of(16, 100, 8, 4, keep_input=False, **base)
    kept = ModelSpec.of(16, 100, 8, 4, keep_input=True, **base)
    a, b = epoch_volume(gathered, (2, 2, 2)), epoch_volume(kept, (2, 2, 2))
    assert a.total_elements - b.total_elements == pytest.approx(16)
    assert ("AG(H)", "all_gather") not in by_name(b)
    assert (epoch_memory(kept, (2, 2, 2)).features
            - epoch_memory(gathered, (2, 2, 2)).features) == (32 - 16) * 4
    learn = ModelSpec.of(16, 100, 8, 4, keep_input=True, learnable_features=True, **base)
    assert ("AG(H)", "all_gather") in by_name(epoch_volume(learn, (2, 2, 2)))


def test_bf16_payloads_halve_every_layer_collective_not_the_loss():
    base = dict(num_layers=2, hidden=8, bias=True, order="agg", sparse_comm="off",
                keep_input=False)
    fp32 = epoch_volume(ModelSpec.of(16, 100, 8, 4, **base), (2, 2, 2))
    bf16 = epoch_volume(ModelSpec.of(16, 100, 8, 4, comm_dtype_bytes=2, **base), (2, 2, 2))
    for a, b in zip(fp32.collectives, bf16.collectives):
        assert a.name == b.name
        # the engine rounds every float32 message of a layer (activations, gradients, gathered
        # weights and their gradients); the loss's statistics travel as declared (fp32/fp64)
        want = 2 if a.layer is not None else a.itemsize
        assert b.itemsize == want, a.name
    assert {a.itemsize for a in fp32.collectives if a.layer is not None} == {4}
    assert any(a.name == "AG(W)" for a in bf16.collectives)
    assert bf16.total_elements == fp32.total_elements
    assert bf16.total_bytes < fp32.total_bytes


def test_explain_adds_up_to_the_prediction(capsys):
    spec = ModelSpec.of(5000, 60_000, 64, 8, num_layers=3, hidden=32)
    pred = estimate(spec, (2, 2, 2), Calibration())
    rows = account(spec, pred, Calibration())
    assert sum(r.seconds for r in rows) == pytest.approx(pred.comm_s)
    assert sum(r.bytes for r in rows) == pytest.approx(pred.volume.total_bytes)
    assert model_main(["--nodes", "5000", "--nnz", "60000", "--features", "64", "--classes",
                       "8", "--grid", "2x2x2", "--explain", "--comm-dtype", "bf16"]) == 0
    out = capsys.readouterr().out
    assert "collective by collective" in out and "SRS(" in out


def test_bad_options_exit_2(capsys):
    for argv in (["--sparse-comm", "maybe"], ["--comm-dtype", "fp8"], ["--agg-chunks", "0"]):
        assert model_main(["--nodes", "100", "--nnz", "300", "--features", "4", "--classes",
                           "2", "--world-size", "2", *argv]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and argv[0] in err
