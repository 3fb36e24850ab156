"""The numerics of every wire precision, on hand-made tensors, exact to the bit (issue 58 item 2).

A low-precision all-reduce (`plexus.engine.comm.Comm.raw_all_reduce` under ``wire``) rounds each
rank's partial to the wire precision once, sums them in float32 and rounds the sum again (two
roundings, the same bits on every rank); a reduce-scatter is the first half (one rounding); an
all-gather rounds each block once; the sparse exchange (`plexus.engine.exchange.sparse_sum`,
`sparse_gather`) rounds like the all-reduce it replaces, a rank's own partial too. The expected
values are computed here from scalars: bf16 by round-to-nearest-even on the float32 bit pattern,
fp16 by numpy's cast (`tests/wire_world.py`), never by the collectives under test. Each input is
checked to tell the right rule from its likely mistakes (a +0.5 ulp bias, a +0.78 % bias, a
partial left unrounded, one rounding or three, a low-precision accumulator), so a test that
passes cannot pass for the mistake too.

The ranks are threads over an in-process fake of the axis's group (`tests/wire_world.py`): no
world is started. The engine's ``auto`` rule for sparse exchanges (`RowExchange.use`) and the
model's copy (`SparseExchange.rows`) are tested at their boundaries: one row below, at and above
(p-1)/p of the rows.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from plexus.engine.exchange import RowExchange, sparse_gather, sparse_sum
from plexus_partition.model.schedule import SparseExchange

from wire_world import ROUND, bf16, f32, fp16, fsum, run_axis

WIRES = {"bf16": torch.bfloat16, "fp16": torch.float16}
MANTISSA = {torch.bfloat16: 7, torch.float16: 10}  # stored fraction bits
ULP = {w: 2.0 ** -m for w, m in MANTISSA.items()}  # the ulp in [1, 2)


# ---- the reference rounding itself, by hand ---------------------------------------------------
def test_the_reference_roundings_agree_with_hand_worked_values():
    u = 2.0 ** -7  # bf16's ulp in [1, 2)
    assert bf16(1.0 + u / 4) == 1.0
    assert bf16(1.0 + u / 2) == 1.0  # a tie: to the even neighbour (1.0)
    assert bf16(1.0 + 3 * u / 2) == 1.0 + 2 * u  # a tie: 1+u is odd, so up
    assert bf16(1.0 + 0.75 * u) == 1.0 + u
    assert bf16(-(1.0 + 0.75 * u)) == -(1.0 + u)
    assert bf16(3.0 + 2 ** -7) == 3.0  # ulp 2^-6 in [2, 4): a tie, 3's last bit is even
    assert bf16(3.0 + 2 ** -7 - 2 ** -20) == 3.0  # just below the tie: down
    assert bf16(3.0 + 2 ** -7 + 2 ** -20) == 3.0 + 2 ** -6  # just above: up
    assert bf16(0.1) == 0.10009765625  # 0x3DCD
    assert fp16(1.0 + 2.0 ** -11) == 1.0  # fp16's ulp in [1, 2) is 2^-10: a tie, to even
    assert fp16(1.0 + 3 * 2.0 ** -11) == 1.0 + 2.0 ** -9
    assert fp16(0.1) == 0.0999755859375  # 0x2E66
    assert f32(0.1) == 0.100000001490116119384765625


def _ulp(x: float, wire: torch.dtype) -> float:
    return 0.0 if x == 0 else 2.0 ** (math.frexp(x)[1] - 1 - MANTISSA[wire])


# ---- what each rule, and each mistake, gives for one element -----------------------------------
def _two_roundings(parts: list[float], rnd) -> float:
    return rnd(fsum(rnd(v) for v in parts))


MISTAKES = {
    # a systematic +0.5 ulp before the final rounding
    "+0.5 ulp": lambda parts, rnd, wire: rnd(f32(fsum(rnd(v) for v in parts)
                                                 + 0.5 * _ulp(fsum(rnd(v) for v in parts), wire))),
    # the issue's +0.78 % (1 + 2^-7) on every sum
    "+0.78 %": lambda parts, rnd, wire: rnd(f32(fsum(rnd(v) for v in parts) * (1 + 2 ** -7))),
    "rank 0's partial unrounded": lambda parts, rnd, wire: rnd(fsum([parts[0]] + [rnd(v) for v
                                                                                in parts[1:]])),
    "partials unrounded": lambda parts, rnd, wire: rnd(fsum(parts)),
    "sum unrounded": lambda parts, rnd, wire: fsum(rnd(v) for v in parts),
    "accumulated in the wire precision": lambda parts, rnd, wire: rnd(
        _accumulate_rounded([rnd(v) for v in parts], rnd)),
}


def _accumulate_rounded(values: list[float], rnd) -> float:
    total = values[0]
    for v in values[1:]:
        total = rnd(f32(total + v))
    return total


def _partials(p: int, n: int, seed: int, u: float = 2.0 ** -7,
              hand: bool = True) -> list[list[float]]:
    """p ranks' partials of n float32 elements: random ones with more bits than the wire keeps
    (so the rounding matters), of mixed signs and magnitudes, and first hand-placed columns in
    units of ``u``, the wire's ulp at 1: (1 + u/4, u/2) is a tie after rounding each partial
    (to 1) and above one before (to 1 + u); (1, u/2, u/2) is 1 + u summed in float32 but 1
    accumulated in the wire precision; (1 + 3u/8, u/8) a sum the wire cannot hold."""
    rng = np.random.default_rng(seed)
    out = []
    for q in range(p):
        vals = (rng.standard_normal(n) * np.float32(2.0) ** rng.integers(-3, 4, n)).astype(
            np.float32)
        out.append([float(v) for v in vals])
    columns = [[1.0 + u / 4, u / 2, 0.0], [1.0, u / 2, u / 2], [1.0 + 3 * u / 8, u / 8, 0.0],
            [-(1.0 + u / 4), -u / 2, 0.0], [-1.0, -u / 2, -u / 2], [1e-3, 1.0 + u / 4, u / 2]]
    for i, column in enumerate(columns[:n] if hand else []):
        for q in range(p):
            out[q][i] = f32(column[q])
    return out


def _as_tensors(parts: list[list[float]], shape) -> list[torch.Tensor]:
    return [torch.tensor(v, dtype=torch.float32).reshape(shape) for v in parts]


def _expected(parts: list[list[float]], rule) -> list[float]:
    return [rule([parts[q][i] for q in range(len(parts))]) for i in range(len(parts[0]))]


def _bits(t: torch.Tensor) -> list[float]:
    return [float(v) for v in t.reshape(-1).tolist()]


def _assert_the_input_tells_the_rule_from_each_mistake(parts, rnd, wire, p, mistakes=MISTAKES):
    """The test's own power: on these partials every mistake gives another result somewhere."""
    right = _expected(parts, lambda col: _two_roundings(col, rnd))
    for name, mistake in mistakes.items():
        if name == "accumulated in the wire precision" and p == 2:
            continue  # two bf16 terms: rounding their float32 sum once is the same thing
        wrong = _expected(parts, lambda col: mistake(col, rnd, wire))
        assert wrong != right, f"the partials cannot expose {name!r}"


# ---- the dense all-reduce ----------------------------------------------------------------------
@pytest.mark.parametrize("wire", list(WIRES))
@pytest.mark.parametrize("p", [2, 3])
def test_low_precision_all_reduce_rounds_each_partial_then_the_float32_sum(p, wire):
    """Every rank gets, bit for bit, round(Σ_q round(x_q)) in float32, with 2·n·(p-1)/p
    elements of 2 bytes in the ledger; 13 elements, so the last of the p blocks is padded."""
    dtype, n = WIRES[wire], 13
    rnd = ROUND[dtype]
    parts = _partials(p, n, seed=p, u=ULP[dtype])
    _assert_the_input_tells_the_rule_from_each_mistake(parts, rnd, dtype, p)
    expected = _expected(parts, lambda col: _two_roundings(col, rnd))
    tensors = _as_tensors(parts, (n,))

    def body(comm, rank):
        x = tensors[rank].clone()
        out = comm.raw_all_reduce(x, "x")
        assert out is x  # in place
        return _bits(x), dict(comm.ledger.collectives), comm.ledger.bytes["x", "all_reduce"]

    for rank, (got, collectives, moved) in enumerate(run_axis(p, body, dtype)):
        assert got == expected, f"rank {rank}"
        assert collectives == {(None, "forward", "all_reduce", "x", n, 2): 1}
        assert moved == 2 * (p - 1) / p * n * 2


@pytest.mark.parametrize("p", [2, 3])
def test_a_two_dimensional_block_sums_elementwise(p):
    """A (3, 2) block: the all-reduce flattens it and pads, the rounding is per element."""
    parts = _partials(p, 6, seed=10 + p)
    expected = _expected(parts, lambda col: _two_roundings(col, bf16))
    tensors = _as_tensors(parts, (3, 2))

    def body(comm, rank):
        x = tensors[rank].clone()
        comm.raw_all_reduce(x, "x")
        return x.shape, _bits(x)

    for shape, got in run_axis(p, body, torch.bfloat16):
        assert shape == (3, 2) and got == expected


def test_an_exact_block_and_other_ops_travel_in_float32():
    """Under `Comm.exact` (statistics) a float32 sum is float32's own, bit for bit: the sum in
    rank order, never rounded to the wire; so is a float64 tensor."""
    p = 3
    parts = _partials(p, 5, seed=7)
    exact = [fsum(parts[q][i] for q in range(p)) for i in range(5)]
    assert exact != _expected(parts, lambda col: _two_roundings(col, bf16))
    tensors = _as_tensors(parts, (5,))

    def body(comm, rank):
        with comm.exact():
            a = comm.raw_all_reduce(tensors[rank].clone(), "x")
        d = comm.raw_all_reduce(tensors[rank].double(), "x")
        return _bits(a), _bits(d), dict(comm.ledger.collectives)

    for got, doubles, collectives in run_axis(p, body, torch.bfloat16):
        assert got == exact
        assert doubles == [float(sum(np.float64(parts[q][i]) for q in range(p)))
                           for i in range(5)]
        assert collectives == {(None, "forward", "all_reduce", "x", 5, 4): 1,
                               (None, "forward", "all_reduce", "x", 5, 8): 1}


# ---- reduce-scatter and all-gather ---------------------------------------------------------------
@pytest.mark.parametrize("wire", list(WIRES))
@pytest.mark.parametrize("p", [2, 3])
def test_low_precision_reduce_scatter_rounds_each_partial_once(p, wire):
    """Rank r keeps block r of Σ_q round(x_q), summed in float32 and not rounded again (the
    all-reduce's first half)."""
    dtype, rows = WIRES[wire], 2
    rnd = ROUND[dtype]
    parts = _partials(p, p * rows * 2, seed=20 + p, u=ULP[dtype])
    one = _expected(parts, lambda col: fsum(rnd(v) for v in col))
    assert one != _expected(parts, lambda col: _two_roundings(col, rnd))  # a second rounding shows
    assert one != _expected(parts, lambda col: fsum(col))  # unrounded partials show
    assert one != _expected(parts, lambda col: fsum([col[0]] + [rnd(v) for v in col[1:]]))
    tensors = _as_tensors(parts, (p * rows, 2))

    def body(comm, rank):
        out = comm.raw_reduce_scatter(tensors[rank].clone(), "x")
        return out.dtype, tuple(out.shape), _bits(out), dict(comm.ledger.collectives)

    for rank, (dt, shape, got, collectives) in enumerate(run_axis(p, body, dtype)):
        assert (dt, shape) == (torch.float32, (rows, 2))
        assert got == one[rank * rows * 2:(rank + 1) * rows * 2], f"rank {rank}"
        assert collectives == {(None, "forward", "reduce_scatter", "x", p * rows * 2, 2): 1}


@pytest.mark.parametrize("wire", list(WIRES))
def test_low_precision_all_gather_rounds_each_block_once(wire):
    dtype, p = WIRES[wire], 3
    rnd = ROUND[dtype]
    parts = _partials(p, 4, seed=30, u=ULP[dtype])
    tensors = _as_tensors(parts, (2, 2))

    def body(comm, rank):
        out = comm.raw_all_gather(tensors[rank].clone(), "x")
        return out.dtype, tuple(out.shape), _bits(out), dict(comm.ledger.collectives)

    expected = [rnd(v) for q in range(p) for v in parts[q]]
    assert expected != [v for q in range(p) for v in parts[q]]
    for dt, shape, got, collectives in run_axis(p, body, dtype):
        assert (dt, shape) == (torch.float32, (6, 2))
        assert got == expected
        assert collectives == {(None, "forward", "all_gather", "x", 12, 2): 1}


# ---- the sparse exchange -------------------------------------------------------------------------
# Rows 0..5 over p = 3 ranks (pieces {0,1}, {2,3}, {4,5}), each rank's touched rows:
TOUCHED = [[0, 1, 2, 4], [1, 3, 4], [0, 2, 3, 4, 5]]  # row 4 by all three
ROWS, COLS = 6, 2


def _counted_by_hand(touched: list[list[int]], rows: int) -> tuple[list[int], list[int]]:
    """Rows each rank sends: in the sum, its touched rows inside the others' pieces; in the
    gather, the others' touched rows inside its own piece (sets, not the partitioner's code)."""
    p = len(touched)
    piece = [set(range(q * rows // p, (q + 1) * rows // p)) for q in range(p)]
    summed = [len(set(touched[r]) - piece[r]) for r in range(p)]
    gathered = [sum(len(set(touched[q]) & piece[r]) for q in range(p) if q != r)
                for r in range(p)]
    return summed, gathered


def _sparse_partials(seed: int, u: float, dense: bool) -> list[list[list[float]]]:
    """Rank q's partial: random, zero outside its touched rows (unless ``dense``: a gradient);
    rows touched by several ranks carry hand-placed values (``u`` the wire's ulp at 1) where a
    rank's own partial left unrounded changes the rounded sum."""
    parts = _partials(3, ROWS * COLS, seed, u, hand=False)
    # row 1 (rank 0's piece, touched by ranks 0 and 1), row 4 (rank 2's, touched by 0 and 2):
    # own 1 + u/4 rounds to 1; + 2^-8 from the other is a tie (to 1) where the own partial is
    # rounded, above the tie (to 1 + u) where it is not
    parts[0][1 * COLS + 0], parts[1][1 * COLS + 0] = 1.0 + u / 4, u / 2
    parts[2][4 * COLS + 1], parts[0][4 * COLS + 1], parts[1][4 * COLS + 1] = 1.0 + u / 4, u / 2, 0.0
    # row 4 again: 1 + u summed in float32, 1 accumulated in the wire precision (in rank
    # order, or the own partial first)
    parts[0][4 * COLS], parts[1][4 * COLS], parts[2][4 * COLS] = 1.0, u / 2, u / 2
    # row 3 (rank 1's piece, touched by 1 and 2): rank 1's own partial unrounded shows too
    parts[1][3 * COLS + 0], parts[2][3 * COLS + 0] = -(1.0 + u / 4), -u / 2
    # row 2 (rank 1's piece, touched by 0 and 2) and row 3 (rank 1's, by 1 and 2): sums the
    # wire cannot hold
    parts[0][2 * COLS + 1], parts[2][2 * COLS + 1] = 1.0 + u / 8, u / 2
    parts[1][3 * COLS + 1], parts[2][3 * COLS + 1] = -(1.0 + 3 * u / 8), -u / 8
    for q in range(3 if not dense else 0):
        for i in range(ROWS):
            if i not in TOUCHED[q]:
                for j in range(COLS):
                    parts[q][i * COLS + j] = 0.0
    return [[parts[q][i * COLS:(i + 1) * COLS] for i in range(ROWS)] for q in range(3)]


def _exchange_world(wire, body, seed=40, dense=False):
    parts = _sparse_partials(seed, ULP.get(wire, 2.0 ** -7), dense)
    tensors = [torch.tensor(parts[q], dtype=torch.float32) for q in range(3)]

    def run(comm, rank):
        ex = RowExchange.build(comm, "x", np.array(TOUCHED[rank], dtype=np.int64), ROWS)
        return body(comm, rank, ex, tensors[rank].clone())

    return parts, run_axis(3, run, wire)


def test_the_row_exchange_lists_are_the_touched_rows_by_piece():
    assert _counted_by_hand(TOUCHED, ROWS) == ([2, 2, 3], [2, 3, 2])  # counted on paper

    def body(comm, rank, ex, y):
        return (ex.summed, ex.gathered, ex.out_rows.tolist(), ex.out_splits, ex.in_rows.tolist(),
                ex.in_splits, (ex.piece.start, ex.piece.stop))

    _, results = _exchange_world(None, body)
    summed, gathered = _counted_by_hand(TOUCHED, ROWS)
    for rank, (s, g, out_rows, out_splits, in_rows, in_splits, piece) in enumerate(results):
        assert (s, g) == (summed, gathered)
        assert piece == (2 * rank, 2 * rank + 2)
        mine = [r for r in TOUCHED[rank] if not 2 * rank <= r < 2 * rank + 2]
        assert out_rows == mine
        assert out_splits == [sum(1 for r in mine if 2 * q <= r < 2 * q + 2) for q in range(3)]
        theirs = [[r - 2 * rank for r in TOUCHED[q] if 2 * rank <= r < 2 * rank + 2]
                  if q != rank else [] for q in range(3)]
        assert in_rows == [r for t in theirs for r in t]
        assert in_splits == [len(t) for t in theirs]


@pytest.mark.parametrize("wire", list(WIRES) + ["fp32"])
def test_sparse_sum_rounds_like_the_all_reduce_it_replaces_own_partial_included(wire):
    """Every rank gets round(Σ_q round(y_q)) on every row, its own partial rounded too, bit for
    bit; fp32: the exact float32 sum."""
    dtype = WIRES.get(wire)
    rnd = ROUND[dtype] if dtype is not None else f32

    def body(comm, rank, ex, y):
        return _bits(sparse_sum(comm, y, ex)), dict(comm.ledger.collectives)

    parts, results = _exchange_world(dtype, body)
    flat = [[v for row in parts[q] for v in row] for q in range(3)]
    right = _expected(flat, lambda col: _two_roundings(col, rnd))
    if dtype is not None:
        _assert_the_input_tells_the_rule_from_each_mistake(flat, rnd, dtype, 3)
        for q in range(3):  # each rank's own partial left unrounded shows on its own piece
            own = _expected(flat, lambda col: rnd(fsum(v if r == q else rnd(v)
                                                       for r, v in enumerate(col))))
            assert own[2 * q * COLS:(2 * q + 2) * COLS] != right[2 * q * COLS:(2 * q + 2) * COLS]
    summed, _ = _counted_by_hand(TOUCHED, ROWS)
    itemsize = 4 if dtype is None else 2
    for rank, (got, collectives) in enumerate(results):
        assert got == right, f"rank {rank}"
        assert collectives == {(None, "forward", "all_to_all", "x", summed[rank] * COLS,
                                itemsize): 1,
                               (None, "forward", "all_gather", "x", ROWS * COLS, itemsize): 1}


@pytest.mark.parametrize("wire", list(WIRES))
def test_sparse_gather_gives_the_rounded_sum_on_the_rows_a_rank_reads_and_zero_elsewhere(wire):
    """The sum's adjoint: rank r gets, on its own piece and its touched rows, the reduce-
    scattered sum rounded once more (as the others receive it, the own piece too), and zeros on
    the rows it does not read (a gradient: dense, every rank's partial non-zero there too)."""
    dtype = WIRES[wire]
    rnd = ROUND[dtype]

    def body(comm, rank, ex, y):
        return _bits(sparse_gather(comm, y, ex))

    parts, results = _exchange_world(dtype, body, seed=50, dense=True)
    flat = [[v for row in parts[q] for v in row] for q in range(3)]
    right = _expected(flat, lambda col: _two_roundings(col, rnd))
    once = _expected(flat, lambda col: fsum(rnd(v) for v in col))
    for q in range(3):  # the own piece left at one rounding would show
        assert once[2 * q * COLS:(2 * q + 2) * COLS] != right[2 * q * COLS:(2 * q + 2) * COLS]
    for rank, got in enumerate(results):
        read = set(TOUCHED[rank]) | {2 * rank, 2 * rank + 1}
        want = [right[i * COLS + j] if i in read else 0.0 for i in range(ROWS)
                for j in range(COLS)]
        assert got == want, f"rank {rank}"


# ---- the auto rules at their boundary ------------------------------------------------------
def _hand_rule(most: int, p: int, rows: int) -> bool:
    """An exchange where the most rows a rank sends is below (p-1)/p of the rows (integers)."""
    return most * p < (p - 1) * rows


# (p, rows, the boundary (p-1)/p·rows): integral and not
BOUNDARIES = [(2, 10, 5), (3, 9, 6), (4, 8, 6), (3, 10, 20 / 3)]


def _exchange(p: int, rows: int, summed: list[int], gathered: list[int]) -> RowExchange:
    empty = torch.zeros(0, dtype=torch.int64)
    return RowExchange("x", rows, slice(0, rows // p), empty, [0] * p, empty, [0] * p,
                       summed, gathered)


@pytest.mark.parametrize("p,rows,edge", BOUNDARIES)
def test_the_engines_auto_rule_at_its_boundary(p, rows, edge):
    """One row below (p-1)/p·R the engine exchanges, at it and one above it all-reduces; the
    most any rank sends decides, for the sum and the gather each from its own counts."""
    low, high = math.ceil(edge) - 1, math.floor(edge) + 1
    cases = [(low, True), (high, False)] + ([(int(edge), False)] if edge == int(edge) else [])
    for most, want in cases:
        assert _hand_rule(most, p, rows) is want
        counts = [0] * (p - 1) + [most]  # the last rank sends the most
        few = [0] * p
        assert _exchange(p, rows, counts, few).use("sum", "auto") is want, (most, "sum")
        assert _exchange(p, rows, few, counts).use("gather", "auto") is want, (most, "gather")
        # each kind reads its own counts: the other's are never consulted
        assert _exchange(p, rows, few, counts).use("sum", "auto") is True
        assert _exchange(p, rows, counts, few).use("gather", "auto") is True
        assert _exchange(p, rows, counts, counts).use("sum", "on") is True


@pytest.mark.parametrize("p,rows,edge", BOUNDARIES)
def test_the_models_auto_rule_at_its_boundary(p, rows, edge):
    low, high = math.ceil(edge) - 1, math.floor(edge) + 1
    cases = [(low, True), (high, False)] + ([(int(edge), False)] if edge == int(edge) else [])
    for most, want in cases:
        rule = SparseExchange("auto", lambda stage, kind, axis, r, q, m=most: (1, m))
        assert (rule.rows(0, "sum", "x", rows, p) is not None) is want, most
        assert SparseExchange("on", lambda *a, m=most: (1, m)).rows(0, "sum", "x", rows, p) == 1
    assert SparseExchange("auto", lambda *a: (0, 0)).rows(0, "sum", "x", rows, 1) is None
