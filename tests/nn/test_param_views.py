"""A layer's own parameter (its shard as ``self.<name>`` in forward, `plexus.nn.layouts.param_view`)
used directly on a laid tensor is refused, naming the parameter and the one operation that makes
its use right on a grid (issue 58's mutation run: with the check off, every test passed; the
check of a raw ``nn.Parameter`` is `tests/engine/test_independent_oracles.py`'s)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from plexus.nn.layouts import LayoutError, laid, param_view


@pytest.mark.parametrize("kind, fix", [("weight", "g.linear(x, self.p)"),
                                       ("vector", "g.add_bias(out, self.p)"),
                                       ("scalar", "g.replicate(self.p)")])
def test_a_layers_own_parameter_used_directly_is_refused_naming_its_fix(kind, fix):
    x = laid(torch.ones(3, 2), "nodes×in")
    p = param_view(nn.Parameter(torch.ones(2)), kind, "p")
    with pytest.raises(LayoutError) as err:
        x * p
    message = str(err.value)
    assert f"the {kind} self.p used directly on a nodes×in tensor" in message, message
    assert fix in message, message
    # the same parameter through plain arithmetic with no laid tensor is not refused
    assert torch.equal(torch.as_tensor(torch.ones(3, 2) * torch.as_tensor(p)), torch.ones(3, 2))
