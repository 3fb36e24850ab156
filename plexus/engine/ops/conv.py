"""The graph convolution stage H' = Â·dropout(H)·W (+ root term) (+ b), aggregate-first or
combine-first per ``plan.order`` (`plexus.core.ops.conv` declares its collectives and costs).

A root term (SAGE's H·Wr, GIN's (1+ε)·H, a residual H) needs H in the output's row layout: S,
the block of the (permuted) identity laid out like Â, brings it there, stacked with Â so that one
SpMM and one all-reduce serve both (`plexus.engine.blocks.stacked_block`). Subclasses (gcn, sage,
gin) say which root term a stage has and how it joins the product.
"""

from __future__ import annotations

import torch

from plexus.core.ops import OPERATORS

from ..primitives import aggregate
from ..masks import dropout
from .base import Stage3D, StageInputs


class ConvStage(Stage3D):
    """Aggregate first: AR([Â;S]·H) over o, then [AGG | S·H]·[W; Wr] (or (AGG + (1+ε)·S·H)·W),
    AR(OUT) over i. Combine first: H·[W | Wr], AR(Z) over i, then AR([Â | S]·[Z; Zr]) over o."""

    def __init__(self, inputs: StageInputs) -> None:
        super().__init__(inputs)
        self.root = OPERATORS[self.plan.op].root(self.plan)
        graph = inputs.graph
        self.a, self.chunks = graph.plain(self.plan) if self.root == "none" else \
            graph.stacked(self.plan)
        self.overlap = inputs.engine.overlap

    def forward(self, H: torch.Tensor, step: int | None = None) -> torch.Tensor:
        """H: rows cut by outer, columns by inner (stage 0: rows cut by depth too, as stored;
        later stages: replicated over depth, as the previous stage left it)."""
        H = self.receive(H)
        drop = self.dropout_args(step)
        if self.plan.order == "agg":  # dropout inside the SpMM's autograd function
            OUT = self._aggregate_first(H, None if drop is None else drop + (self.consume_input,))
        else:
            OUT = self._combine_first(H if drop is None else dropout(H, *drop))
        return self.add_bias(OUT)

    # ---- the root term's hooks (subclasses) -----------------------------------------------
    def root_weight(self, axis: str) -> torch.Tensor:
        """Wr gathered over W's flat axis (SAGE) or the identity block (residual)."""
        raise NotImplementedError

    def one_plus_eps(self) -> torch.Tensor | float:
        """GIN's 1 + ε."""
        raise NotImplementedError

    # ---- the two orders -----------------------------------------------------------------------
    def _aggregate_first(self, H: torch.Tensor, drop: tuple | None = None) -> torch.Tensor:
        o, i, d, c = self.plan.outer, self.plan.inner, self.plan.depth, self.comm
        X = self._aggregate(H, o, drop)                       # AR([Â;S]·H) over o
        X = c.all_reduce_grad(X, o)                           # bwd: AR(d[AGG;R]) over o
        W = self.gathered_weight("W", d)                      # AG(W) over d; bwd: RS(dW) over d
        if self.root != "none":
            AGG, R = X.chunk(2)                               # Â·H and S·H = H in OUT's rows
            if self.root == "gin":
                X = AGG + self.one_plus_eps() * R
            else:                                             # [AGG | R]·[W; Wr]
                X, W = torch.cat([AGG, R], 1), torch.cat([W, self.root_weight(d)], 0)
        return c.all_reduce(self._gemm(X, W), i)              # AR(OUT) over i

    def _combine_first(self, H: torch.Tensor) -> torch.Tensor:
        o, i, c = self.plan.outer, self.plan.inner, self.comm
        W = self.gathered_weight("W", o)                      # AG(W) over o; bwd: RS(dW) over o
        if self.root in ("sage", "res"):                      # H·[W | Wr]
            W = torch.cat([W, self.root_weight(o)], 1)
        Z = c.all_reduce(self._gemm(H, W), i)                 # AR(Z) over i
        Z = c.all_reduce_grad(Z, i)                           # bwd: AR(dZ) over i
        if self.root in ("sage", "res"):
            Z = torch.cat(Z.chunk(2, 1), 0)                   # [H·W; H·Wr]
        elif self.root == "gin":
            Z = torch.cat([Z, self.one_plus_eps() * Z], 0)    # [Z; (1+ε)·Z]
        return self._aggregate(Z, o)                          # AR([Â | S]·Z) over o

    def _aggregate(self, X: torch.Tensor, axis: str, drop: tuple | None = None) -> torch.Tensor:
        """AR(Â·dropout(X)) over ``axis``, chunked and overlapped as configured; ``drop``: the
        dropout's arguments (`plexus.engine.masks.masked`) and whether X may be overwritten,
        None for no dropout."""
        return aggregate(X, self.a, self.comm, axis, self.chunks, self.overlap, drop)
