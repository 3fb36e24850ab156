"""`check_layer` on a layer without parameters (issue 59: an APPNP propagation got "element 0 of
tensors does not require grad" on every grid): it runs behind a dense probe and is compared by
its outputs and input gradients; a layer that raises is a FAIL line saying what it raised, with
no "max abs diff" figures, and two hops without `g.to_nodes` are told to use it."""

from __future__ import annotations

import pytest

from plexus.nn import check_layer

pytestmark = pytest.mark.slow  # local worlds of 2 ranks

GRIDS = [(1, 1, 1), (2, 1, 1), (1, 2, 1)]


def test_a_propagation_without_parameters_passes_on_every_grid():
    lines = []
    checks = check_layer("nn_layers:Propagate", GRIDS, report=lines.append)
    assert len(checks) == 2 * len(GRIDS) and all(c.passed for c in checks), lines
    assert all(c.compared and "grads" in line for c, line in zip(checks, lines)), lines


def test_a_layer_that_raises_says_so_and_names_the_fix():
    lines = []
    checks = check_layer("nn_layers:TwoHopsWithoutToNodes", GRIDS, report=lines.append)
    assert not any(c.passed for c in checks)
    for line in lines:
        assert line.startswith("FAIL") and "the layer raised" in line, line
        assert "max abs diff" not in line, line
    assert any("g.to_nodes" in line for line in lines), lines
