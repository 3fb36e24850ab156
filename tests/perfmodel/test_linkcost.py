"""The pair operator's price from sizes alone, against sizes and α-β times worked out by hand:
a 2-layer encoder of 7 output columns (padded to 8) on 2x2x2, whose last stage cuts rows over y
and columns over z (4 columns a rank), 10 pairs in batches of 4, 4 and 2."""

from __future__ import annotations

import pytest

from plexus_partition.model.pairs import pair_bytes, pair_collectives
from plexus.perfmodel.calibration import Calibration
from plexus.perfmodel.linkcost import link_cost, link_memory
from plexus.perfmodel.memory import rank_memory
from plexus.perfmodel.spec import ModelSpec, spec_layout

GRID = {"x": 2, "y": 2, "z": 2}
ORDERS = ["agg", "agg"]


def _spec() -> ModelSpec:
    return ModelSpec.of(37, 200, 11, 7, num_layers=2, hidden=6)


def test_pair_bytes_by_hand():
    # dot: 3 floats per end of 2 ends plus 3 per pair, a block of 4 columns: 36 floats, 6 ids
    assert pair_bytes(4, 8, "dot") == 36 * 4 + 48
    # mlp: and the gathered product twice (16), five per hidden layer (2 hidden of 5: 50), 2
    assert pair_bytes(4, 8, "mlp", hidden=5, layers=3) == (36 + 16 + 50 + 2) * 4 + 48


def test_pair_collectives_sizes_by_hand():
    plans, pad = spec_layout(_spec(), GRID, ORDERS)
    last = plans[-1]
    assert (last.out_rows, last.out_cols, pad.widths_padded[-1]) == ("y", "z", 8)
    dot = pair_collectives(last, GRID, 8, num_pairs=5, num_ends=9, decoder="dot")
    assert [(c.op, c.axis, c.size) for c in dot] == [("all_reduce", "y", 9 * 4),
                                                     ("all_reduce", "z", 5)]
    mlp = pair_collectives(last, GRID, 8, num_pairs=5, num_ends=9, decoder="mlp", phase="eval")
    assert [(c.op, c.axis, c.size, c.phase) for c in mlp] == [
        ("all_reduce", "y", 36, "eval"), ("all_gather", "z", 5 * 8, "eval")]
    flat = pair_collectives(last, {"x": 2, "y": 1, "z": 1}, 8, 5, 9, "dot")
    assert flat == []  # nothing to sum or gather where the rows and columns are whole


@pytest.mark.parametrize("decoder", ["dot", "mlp"])
def test_link_cost_by_hand(decoder):
    spec, cal = _spec(), Calibration()
    per_pair = pair_bytes(4, 8, decoder, 5, 3)
    cost = link_cost(spec, GRID, ORDERS, 10, decoder, hidden=5, layers=3,
                     budget=4 * per_pair + 1, calibration=cal)
    assert cost.batch == 4
    # per batch of b pairs (and again for its negatives): the AR of 2b ends × 4 columns over y,
    # then the dot's AR of b over z, or the MLP's AG of full size 8b over z; on 2 ranks a ring
    # all-reduce of n elements moves n per rank, an all-gather of full size n moves n/2
    ends = sum(2 * (2 * b * 4) for b in (4, 4, 2))
    over_z = sum(2 * (b if decoder == "dot" else 4 * b) for b in (4, 4, 2))
    assert cost.bytes_per_axis == {"x": 0.0, "y": ends * 4.0, "z": over_z * 4.0}
    alpha, beta = cal.link("y")
    steps = 2 * 3 * (2 + (2 if decoder == "dot" else 1))  # AR: 2 steps, AG: 1, on 2 ranks
    assert cost.seconds == pytest.approx(steps * alpha + (ends + over_z) * 4 * beta, rel=1e-12)
    # one batch of 4 pairs with at most 8 ends, blocks of 4 columns (8 padded), 40/2 rows:
    # each graph keeps 2·4 floats a pair, 3 int64 a pair and 12 bytes an end: 320 bytes; the MLP
    # adds its product (8) and two buffers per hidden layer (2·2·5) a pair: 768
    kept = 320 if decoder == "dot" else 768
    # both graphs and the second's newest (the dot: a product and the ends' rows, (4+8)·4
    # floats; the MLP: a hidden layer's output, mask and hash, 4·5·(4+1+2) bytes), or one graph
    # and the ends' gradient beside the block's zeros and index_add ((8 + 2·20)·4 floats)
    newest = 12 * 4 * 4 if decoder == "dot" else 4 * 5 * 7
    peak = max(2 * kept + newest, kept + 48 * 4 * 4) + 2 * 4 * 8  # and the negatives' ids
    assert cost.buffer_bytes == peak + 2 * 20 * 4 * 4  # the embedding block and its gradient
    node, mem = rank_memory(spec, GRID, ORDERS), link_memory(spec, GRID, ORDERS, cost)
    # the positives' ids (2·10) and the block's sorted ids and order (2·20), int64
    assert mem.features == node.features + (2 * 10 + 2 * 20) * 8
    # the MLP 7 → 5 → 5 → 1: 76 parameters, float32, their gradients, then two moments
    params = 0 if decoder == "dot" else 76 * 4
    assert (mem.weights, mem.optimizer) == (node.weights + 2 * params,
                                            node.optimizer + 2 * params)
    assert mem.activations + mem.workspace >= cost.buffer_bytes
