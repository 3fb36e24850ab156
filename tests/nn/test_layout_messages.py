"""The fix a layout mistake's message gives fits the mistake (issue 59: a softmax or a mean over
a cut dimension got the 2-norm advice; two hops without `g.to_nodes` were told it "cannot")."""

from __future__ import annotations

import pytest
import torch

from plexus.nn.graph import _move
from plexus.nn.layouts import LayoutError, _refuse_cut

X = torch.ones(3, 4)


@pytest.mark.parametrize("op,says,not_says", [
    (torch.softmax, "the loss takes the softmax over the classes", "2-norm for"),
    (torch.log_softmax, "g.edge_softmax normalizes over a node's edges", "2-norm for"),
    (torch.mean, "no plain reduction over a node's features", "g.normalize_rows"),
    (torch.sum, "g.linear(x, self.<weight>)", "g.normalize_rows"),
    (torch.norm, "g.row_norm(x) or g.normalize_rows(x) for a row's 2-norm", "softmax"),
])
def test_a_reduction_over_cut_columns_gets_its_own_fix(op, says, not_says):
    name = f"torch.{op.__name__}"
    with pytest.raises(LayoutError) as e:
        _refuse_cut(name, op, "nodes×out", (X,), {"dim": 1})
    assert says in str(e.value) and not_says not in str(e.value), str(e.value)


def test_rows_back_to_the_input_name_g_to_nodes():
    assert "g.to_nodes(x) moves" in _move("Â-rows×in", "nodes×in")
    assert "cannot" not in _move("Â-rows×in", "nodes×in")
