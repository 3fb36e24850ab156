"""GraphSAGE's stage (`plexus.core.ops.sage`): H' = mean_{j→i} H_j·W + H_i·Wr + b."""

from __future__ import annotations

import torch

from .conv import ConvStage


class SAGEStage(ConvStage):
    def root_weight(self, axis: str) -> torch.Tensor:
        return self.gathered_weight("Wr", axis)           # AG(Wr) over W's flat axis; bwd: RS(dWr)


def serial(model, p, H: torch.Tensor, step: int | None) -> torch.Tensor:
    """The serial reference: (M_mean·H)·W + H·Wr, in the configured order."""
    W = model.param("W", p.index)
    OUT = torch.sparse.mm(model.adj, H) @ W if p.order == "agg" else \
        torch.sparse.mm(model.adj, H @ W)
    return OUT + H @ model.param("Wr", p.index)
