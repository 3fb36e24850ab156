"""BatchNorm on the grid (`plexus.core.ops.batchnorm`): per-feature statistics over all real
nodes.

OUT's block has rows cut by the stage's output-rows axis r and columns by its output-columns axis,
and is replicated over the third axis. The column sums are all-reduced over r (padding rows
excluded), so every rank normalizes with the statistics of the whole graph, as
``torch.nn.BatchNorm1d`` on the full matrix does; γ and β are replicated like a bias.

The statistics and the normalization are computed in float32 whatever the compute precision
(a bfloat16 variance of a sum over all nodes loses most of its digits); the output is cast
back to the input's precision.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from plexus.core.layout import LayerPlan

from ..comm import Comm

MOMENTUM, EPS = 0.1, 1e-5  # torch.nn.BatchNorm1d's defaults


class BatchNorm3D(nn.Module):
    """y = (x − mean) / sqrt(var + eps) · γ + β over the real rows; running statistics as
    BatchNorm1d (momentum 0.1, unbiased running variance) for evaluation."""

    def __init__(self, plan: LayerPlan, comm: Comm, shards: dict[str, torch.Tensor],
                 real_rows: torch.Tensor, num_nodes: int) -> None:
        super().__init__()
        self.plan, self.comm, self.n = plan, comm, num_nodes
        device = comm.grid.device
        self.gamma = nn.Parameter(shards["gamma"].to(device))
        self.beta = nn.Parameter(shards["beta"].to(device))
        self.register_buffer("mean", shards["mean"].to(device))
        self.register_buffer("var", shards["var"].to(device))
        self.register_buffer("real", real_rows.to(device).unsqueeze(1), persistent=False)
        self.update_stats = True  # off while a recomputation repeats a forward pass

    @contextmanager
    def frozen_stats(self) -> Iterator[None]:
        """Within: training passes normalize with the batch statistics as always but leave the
        running statistics alone (a recomputed pass must not count the epoch twice)."""
        self.update_stats = False
        try:
            yield
        finally:
            self.update_stats = True

    def _column_sum(self, x: torch.Tensor) -> torch.Tensor:
        r, c = self.plan.out_rows, self.comm
        total = c.all_reduce((x * self.real).sum(0), r)       # AR(Σx) over r
        return c.all_reduce_grad(total, r)                    # bwd: AR(dΣx) over r

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        dtype, x = x.dtype, x.float()  # float32 statistics (a no-op on float32)
        if self.training:
            mean = self._column_sum(x) / self.n
            xc = x - mean
            var = self._column_sum(xc * xc) / self.n
            if self.update_stats:
                with torch.no_grad():
                    self.mean.mul_(1 - MOMENTUM).add_(MOMENTUM * mean.detach())
                    unbiased = var.detach() * (self.n / max(self.n - 1, 1))
                    self.var.mul_(1 - MOMENTUM).add_(MOMENTUM * unbiased)
        else:
            xc, var = x - self.mean, self.var
        r, c = self.plan.out_rows, self.comm
        gamma = c.all_reduce_grad(self.gamma, r)              # bwd: AR(dγ) over r
        beta = c.all_reduce_grad(self.beta, r)                # bwd: AR(dβ) over r
        return (xc * torch.rsqrt(var + EPS) * gamma + beta).to(dtype)


def serial(model, p: LayerPlan, OUT: torch.Tensor) -> torch.Tensor:
    """The serial reference: ``torch.nn.functional.batch_norm`` with the model's running
    statistics (updated when training), momentum 0.1, eps 1e-5."""
    s = p.index
    return F.batch_norm(OUT, model.stat("mean", s), model.stat("var", s),
                        model.param("gamma", s), model.param("beta", s), model.training,
                        MOMENTUM, EPS)
