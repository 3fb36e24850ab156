"""GCN (PyG's GCNConv): H' = Â·H·W + b, Â = D^-1/2 (M + I) D^-1/2; optionally + H (residual)."""

from __future__ import annotations

from dataclasses import dataclass

from .base import ModelKind, Param, option, stage_option
from .conv import ConvOperator, RootTerm


@dataclass(frozen=True)
class Options:
    """GCN's options (`plexus_partition.model.model.ModelConfig` fields, flags of the tools)."""

    residual: bool = option(False, "GCN only: add each layer's input to its output where the "
                                   "widths agree")


@dataclass(frozen=True)
class StageOptions:
    """A GCN stage's: whether it adds its input (the widths agree)."""

    residual: bool = False


class GCN(ConvOperator):
    name = "gcn"
    bias_pyg = "bias"

    def root(self, plan) -> RootTerm:
        return RootTerm.RESIDUAL if self.adds_input(plan) else RootTerm.NONE

    def adds_input(self, plan) -> bool:
        return stage_option(plan, "residual", False)

    def params(self, plan, d_in, d_out):
        return [Param("W", (d_in, d_out), "weight", "glorot", stream=0, pyg="lin.weight",
                      transform="T"), *self.bias_param(plan, d_out)]


KIND = ModelKind("gcn", ("gcn",), "gcn", "GCNConv", ("convs.{l}.",),
                 "GCNConv: symmetric-normalized sum over in-neighbours and the node itself",
                 options=Options, takes_edge_weights=True,
                 stage_options=lambda cfg, layer, pos, d_in, d_out: StageOptions(
                     cfg.options.residual and d_in == d_out))
