"""The engine's ``keep_input`` rule at its boundary (issue 58 item 2's auto rules):
`plexus.engine.model.keeps_input` keeps layer 0's gathered input under "auto" exactly when the
gathered block (depth × this rank's stored bytes) fits the pass's budget, at it included; "off",
learnable features and a depth of 1 never keep it, "on" always (and refuses learnable features).
The expected decisions are written here by hand."""

from __future__ import annotations

import pytest

from plexus.engine.model import keeps_input


@pytest.mark.parametrize("depth, stored, budget, kept", [
    (2, 100.0, 199.0, False),  # one byte short
    (2, 100.0, 200.0, True),  # exactly the budget
    (2, 100.0, 201.0, True),
    (4, 250.0, 999.0, False),
    (4, 250.0, 1000.0, True),
    (3, 1.0, 1e18, True),
])
def test_auto_keeps_the_input_where_the_gathered_block_fits_the_budget(depth, stored, budget,
                                                                       kept):
    assert keeps_input("auto", False, depth, stored, budget) is kept


def test_off_learnable_and_one_deep_never_keep_and_on_always_does():
    assert keeps_input("off", False, 2, 1.0, 1e18) is False
    assert keeps_input("auto", True, 2, 1.0, 1e18) is False  # learnable: changes every step
    assert keeps_input("auto", False, 1, 1.0, 1e18) is False  # nothing gathered
    assert keeps_input("on", False, 1, 1.0, 1e18) is False
    assert keeps_input("on", False, 2, 1e12, 0.0) is True  # whatever the budget
    with pytest.raises(ValueError, match="fixed input features"):
        keeps_input("on", True, 2, 1.0, 1e18)
