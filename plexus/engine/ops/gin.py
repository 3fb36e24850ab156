"""GIN's convolution stage (`plexus.core.ops.gin`): (M·H + (1+ε)·H)·W1 (+ b1); the MLP's second
map is a dense stage. ε is one number replicated on every rank: its gradient sums every rank's
block, one AR of one element over each axis."""

from __future__ import annotations

import torch

from .conv import ConvStage


class GINStage(ConvStage):
    def one_plus_eps(self) -> torch.Tensor | float:
        eps = self.param("eps")
        if eps is None:
            return 1.0
        eps = eps.to(self.dtype)
        for axis in self.comm.grid.shape:  # dε sums every rank's block
            eps = self.comm.all_reduce_grad(eps, axis)        # bwd: AR(dε) over each axis
        return 1 + eps


def serial(model, p, H: torch.Tensor, step: int | None) -> torch.Tensor:
    """The serial reference: (M·X + (1+ε)·X) with X = H (aggregate first, then ·W) or
    X = H·W (combine first)."""
    W, eps = model.param("W", p.index), model.param("eps", p.index)
    X = H if p.order == "agg" else H @ W
    AGG = torch.sparse.mm(model.adj, X) + (1 + (eps if eps is not None else 0.0)) * X
    return AGG @ W if p.order == "agg" else AGG
