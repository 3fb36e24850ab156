"""GCN's stage (`plexus.core.ops.gcn`): H' = Â·H·W + b, or with a residual Â·H·W + H + b (the
residual multiplies S·H by a fixed identity block as Wr, so it joins the GEMM)."""

from __future__ import annotations

import torch

from plexus.core.layout import block

from .base import StageInputs
from .conv import ConvStage


class GCNStage(ConvStage):
    def __init__(self, inputs: StageInputs) -> None:
        super().__init__(inputs)
        if self.root == "res":  # H = H·I: the identity's block, a constant, gathered already
            shape, coords = self.comm.grid.shape, self.comm.grid.coords
            d_out = self.params["W"].shape[1] * shape[self.plan.w_cols]
            eye = torch.eye(inputs.d_in, d_out)
            rows = block(eye.shape[0], shape[self.plan.inner], coords[self.plan.inner])
            cols = block(eye.shape[1], shape[self.plan.w_cols], coords[self.plan.w_cols])
            self.register_buffer("I", eye[rows, cols].clone().to(self.comm.grid.device,
                                                                 self.dtype),
                                 persistent=False)

    def root_weight(self, axis: str) -> torch.Tensor:
        return self.I


def serial(model, p, H: torch.Tensor, step: int | None) -> torch.Tensor:
    """The serial reference: Â·H·W (+ H) in the configured order (for like rounding)."""
    W = model.param("W", p.index)
    OUT = torch.sparse.mm(model.adj, H) @ W if p.order == "agg" else \
        torch.sparse.mm(model.adj, H @ W)
    return OUT + H if p.residual else OUT
