"""The dense stage (`plexus.core.ops.dense`): OUT = dropout(H)·W (+ b), no aggregation; the rows
stay where they are (an MLP layer, GIN's second linear map)."""

from __future__ import annotations

import torch

from ..masks import dropout
from .base import Stage3D


class DenseStage(Stage3D):
    def forward(self, H: torch.Tensor, step: int | None = None) -> torch.Tensor:
        """H: rows cut by outer, columns by inner; OUT: rows by outer, columns by depth."""
        o, i, c = self.plan.outer, self.plan.inner, self.comm
        H = self.receive(H)
        drop = self.dropout_args(step)
        H = H if drop is None else dropout(H, *drop)
        W = self.gathered_weight("W", o)                      # AG(W) over o; bwd: RS(dW) over o
        return self.add_bias(c.all_reduce(self._gemm(H, W), i))  # AR(OUT) over i


def serial(model, p, H: torch.Tensor, step: int | None) -> torch.Tensor:
    """The serial reference: H·W."""
    return H @ model.param("W", p.index)
