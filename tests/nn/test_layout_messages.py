"""The fix a layout mistake's message gives fits the mistake (issue 59): two hops without
`g.to_nodes` were told the rows "cannot" go back; a reduction over cut columns gets the fix of
what it computes (`test_reductions_and_reshapes_over_cut_dimensions_are_refused` in
tests/nn/test_nn_layouts.py)."""

from __future__ import annotations

from plexus.nn.graph import _move


def test_rows_back_to_the_input_name_g_to_nodes():
    assert "g.to_nodes(x) moves" in _move("Â-rows×in", "nodes×in")
    assert "cannot" not in _move("Â-rows×in", "nodes×in")
