"""A GCN layer's collectives, sizes worked out by hand at two mean degrees on two grids (issue 58
item 1: the schedule's sizes were compared only with a recording of the same code).

The layer: N = 16 nodes, 8 input features -> 4 classes, aggregate first, no bias, on Px1x1 (only
the outer axis x is cut, P ranks): Â·H is summed over x, a block of N x 8 = 128 elements. As a
dense all-reduce that is AR(AGG) of 128 elements. As a sparse exchange (``--sparse-comm on``)
each rank sends the rows of its partial sum that another rank owns and that its columns touch:
a row of degree k touches one of the P column blocks with probability 1 - (1 - 1/P)^k, so a rank
sends N·(P-1)/P·(1 - (1 - 1/P)^k) rows of 8 elements (an all-to-all, SRS), rounded to whole
elements, then the sums are all-gathered (AG, 128 elements). The mean degree k is nnz / N.

  P = 2, k = 1.5: 16·(1/2)·(1 - 0.5^1.5) = 5.1716 rows -> 41.37 -> 41 elements
  P = 2, k = 3:   16·(1/2)·(1 - 0.125)   = 7 rows      -> 56 elements
  P = 4, k = 1.5: 16·(3/4)·(1 - 0.75^1.5) = 4.2058 rows -> 33.65 -> 34 elements
  P = 4, k = 2:   16·(3/4)·(1 - 0.5625)  = 5.25 rows   -> 42 elements

Bytes per rank by the ring's formula at 4 bytes per element: an all-gather of s elements sends
(P-1)/P·s, an all-reduce 2·(P-1)/P·s, an all-to-all its s.
"""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from plexus.perfmodel.cli import model_main

LAYER = ["--nodes", "16", "--features", "8", "--classes", "4", "--layers", "1", "--hidden", "8",
         "--order", "agg", "--no-bias"]


def _layer_rows(grid: str, nnz: int, sparse: str) -> list[dict]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert model_main([*LAYER, "--nnz", str(nnz), "--grid", grid, "--sparse-comm", sparse,
                           "--explain", "--json"]) == 0
    return [r for r in json.loads(out.getvalue())["explain"] if r["layer"] == 0]


@pytest.mark.parametrize("p, nnz, sent", [(2, 24, 41), (2, 48, 56), (4, 24, 34), (4, 32, 42)])
def test_the_sparse_sum_sends_the_touched_rows_worked_out_by_hand(p, nnz, sent):
    rows = _layer_rows(f"{p}x1x1", nnz, "on")
    got = [(r["phase"], r["name"], r["op"], r["axis"], r["size"]) for r in rows]
    assert got == [("forward", "SRS(AGG)", "all_to_all", "x", sent),
                   ("forward", "AG(AGG)", "all_gather", "x", 128)]
    assert rows[0]["bytes"] == 4 * sent
    assert rows[1]["bytes"] == pytest.approx(4 * (p - 1) / p * 128, rel=1e-12)


@pytest.mark.parametrize("p", [2, 4])
@pytest.mark.parametrize("nnz", [24, 48])
def test_the_dense_sum_is_one_all_reduce_of_the_whole_block_at_any_degree(p, nnz):
    rows = _layer_rows(f"{p}x1x1", nnz, "off")
    got = [(r["phase"], r["name"], r["op"], r["axis"], r["size"]) for r in rows]
    assert got == [("forward", "AR(AGG)", "all_reduce", "x", 128)]
    assert rows[0]["bytes"] == pytest.approx(4 * 2 * (p - 1) / p * 128, rel=1e-12)
