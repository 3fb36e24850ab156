"""GIN (PyG's GINConv with MLP = Linear, ReLU, Linear): H' = MLP((1+ε)·H_i + Σ_{j→i} H_j).

A GIN layer is two stages: this convolution with the MLP's first linear map, then a dense stage
with its second (`plexus_partition.model.ops.dense`).
"""

from __future__ import annotations

from dataclasses import dataclass

from .base import ACTIVATION_MODULES, ModelKind, Param, option, stage_option
from .conv import ConvOperator, RootTerm
from .dense import pyg_linear


@dataclass(frozen=True)
class Options:
    """GIN's options (`plexus_partition.model.model.ModelConfig` fields, flags of the tools)."""

    train_eps: bool = option(True, "GIN: learn ε (default on)", negatable=True)


@dataclass(frozen=True)
class StageOptions:
    """A GIN convolution stage's: whether it trains ε."""

    learnable_eps: bool = False


class GIN(ConvOperator):
    name = "gin"
    bias_pyg = "nn.0.bias"

    def root(self, plan) -> RootTerm:
        return RootTerm.SCALED

    def learns_eps(self, plan) -> bool:
        return stage_option(plan, "learnable_eps", False)

    def params(self, plan, d_in, d_out):
        out = [Param("W", (d_in, d_out), "weight", "glorot", stream=0, pyg="nn.0.weight",
                     transform="T"), *self.bias_param(plan, d_out)]
        if self.learns_eps(plan):
            out.append(Param("eps", (1,), "scalar", "zeros", pyg="eps"))
        return out

    def pyg_extras(self, plan, d_in, d_out, model_bias):
        extra = super().pyg_extras(plan, d_in, d_out, model_bias)
        if not self.learns_eps(plan):  # PyG's GINConv holds ε as a buffer: fixed at 0
            extra.append(Param("eps", (1,), "scalar", "zeros", pyg="eps"))
        return extra


def _activation(name: str) -> dict:
    """The MLP's activation module between its two maps (Identity for "none": the second map
    stays ``nn.2``)."""
    return {"class": ACTIVATION_MODULES[name]}



# PyG's GINConv takes its MLP, not widths: the MLP is described module by module, hidden wide
# inside (ModelConfig.widths), so an export records every width of it.
KIND = ModelKind("gin", ("gin", "dense"), "sum", "GINConv", ("convs.{l}.", "convs.{l}.nn.2."),
                 "GINConv(Sequential(Linear, activation, Linear), train_eps): sum over in-neighbours "
                 "plus (1+ε) times the node itself, then the MLP",
                 options=Options,
                 stage_options=lambda cfg, layer, pos, d_in, d_out:
                     StageOptions(cfg.options.train_eps) if pos == 0 else None,
                 pyg_kwargs=lambda cfg, layer, d_in, d_out: {
                     "train_eps": cfg.options.train_eps,
                     "nn": [pyg_linear(d_in, cfg.hidden, cfg.bias), _activation(cfg.activation),
                            pyg_linear(cfg.hidden, d_out, cfg.bias)]})
