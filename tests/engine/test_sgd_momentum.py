"""SGD's momentum at values other than the default 0.9 (issue 58 item 3): on a linear loss c·w
(a constant gradient c) torch's heavy ball gives v_t = m·v_{t-1} + c, w_t = w_{t-1} - lr·v_t,
so after three steps w_3 = w_0 - lr·(3 + 2m + m²)·c, written here by hand per momentum."""

from __future__ import annotations

import pytest
import torch

from test_independent_oracles import LinearModel
from plexus.engine.config import TrainConfig
from plexus.engine.trainer import Trainer

W0 = torch.tensor([1.0, 2.0], dtype=torch.float64)


@pytest.mark.parametrize("momentum, factor", [(0.0, 3.0), (0.25, 3.5625), (0.5, 4.25),
                                              (0.9, 5.61)])
def test_sgd_moves_by_its_own_momentum(momentum, factor):
    lr = 0.1
    t = Trainer(LinearModel(), TrainConfig(epochs=3, lr=lr, weight_decay=0.0, optimizer="sgd",
                                           momentum=momentum, eval_every=0))
    t.fit()
    want = W0 - lr * factor * t.model.c
    assert torch.allclose(t.model.w.detach(), want, rtol=0, atol=1e-12), (momentum,
                                                                          t.model.w.detach())


def test_sgd_with_weight_decay_adds_it_to_the_gradient():
    """Decay d at momentum 0.5, one step: v_1 = c + d·w_0, w_1 = w_0 - lr·v_1."""
    lr, d = 0.1, 0.01
    t = Trainer(LinearModel(), TrainConfig(epochs=1, lr=lr, weight_decay=d, optimizer="sgd",
                                           momentum=0.5, eval_every=0))
    t.fit()
    want = W0 - lr * (t.model.c + d * W0)
    assert torch.allclose(t.model.w.detach(), want, rtol=0, atol=1e-12)
