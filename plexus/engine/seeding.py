"""Grid-independent initialization and the step that keys dropout masks.

Every initial parameter is drawn full-size from generators seeded by the seed alone, in stage
order, and cut afterwards, never per rank, so a seeded run starts from the same numbers on every
grid and on the serial reference. The masks themselves: `plexus.engine.masks`.
"""

from __future__ import annotations

from typing import Sequence

import torch

from plexus_partition.model.layout import LayerPlan
from plexus_partition.model.ops import NORM_OP, OPERATORS, Param, split_name
from plexus_partition.model.ops.base import glorot_bound


def glorot(shape: Sequence[int], gen: torch.Generator,
           fans: tuple[int, int] | None = None) -> torch.Tensor:
    """A Glorot-uniform tensor of ``shape`` drawn from ``gen``: uniform in ±`glorot_bound` of
    ``fans`` (default its first and last dimensions; PyG's attention vectors: heads and
    per-head width)."""
    rows, cols = fans or (shape[0], shape[-1])
    return (torch.rand(tuple(shape), generator=gen) * 2 - 1) * glorot_bound(rows, cols)


def stage_params(plans: Sequence[LayerPlan], widths: Sequence[int]) -> list[tuple[LayerPlan, Param]]:
    """Every declared parameter and running statistic of a model, stage by stage
    (`plexus_partition.model.ops`: the stage's operator, then its BatchNorm)."""
    out = []
    for p in plans:
        d_in, d_out = widths[p.index], widths[p.index + 1]
        decls = OPERATORS[p.op].params(p, d_in, d_out)
        if p.norm:
            decls = decls + OPERATORS[NORM_OP].params(p, d_in, d_out)
        out += [(p, decl) for decl in decls]
    return out


def _initial(decl: Param, gens: list[torch.Generator]) -> torch.Tensor:
    if decl.init == "glorot":
        return glorot(decl.shape, gens[decl.stream])
    if decl.init == "glorot_heads":  # PyG's attention vectors: the bound of (heads, width)
        return glorot(decl.shape, gens[decl.stream], (decl.heads, decl.shape[0] // decl.heads))
    if decl.init == "linear":  # torch's kaiming_uniform(a=√5): uniform ±1/√fan_in
        fan_in = decl.fan_in or decl.shape[0]
        return (torch.rand(tuple(decl.shape), generator=gens[decl.stream]) * 2 - 1) / fan_in**0.5
    if decl.init in ("zeros", "ones"):
        return (torch.ones if decl.init == "ones" else torch.zeros)(decl.shape)
    if decl.init == "identity" and len(decl.shape) == 2:  # a weight that starts as X·I
        return torch.eye(*decl.shape)
    raise ValueError(f"unknown init {decl.init!r}; use glorot, linear, zeros, ones or identity "
                     "(a weight)")


def initial_values(seed: int, decls: Sequence[tuple[str, Param]]) -> dict[str, torch.Tensor]:
    """The one initialization rule of every model (the engine's, the serial one, a
    `plexus.nn.Network`): each declared parameter or statistic, by its grid-independent name,
    drawn full-size and unpadded in the order given, never per rank: Glorot-uniform or
    PyG's `Linear` default (``decl.init``) from generator ``decl.stream`` (0 seeded with
    ``seed``, 1 with ``seed + 1``), else zeros or ones. Every grid, and the serial model, start
    from the same numbers."""
    gens = [torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed + 1)]
    return {name: _initial(decl, gens) for name, decl in decls}


def initial_parameters(seed: int, plans: Sequence[LayerPlan], widths: Sequence[int]
                       ) -> dict[str, torch.Tensor]:
    """Every trainable parameter of a model at initialization, full and unpadded, by
    grid-independent name ("W0", "b0", "att_src1", ...), as each operator declares it
    (`initial_values`: the weights W from stream 0 in stage order, the other random ones,
    SAGE's and GraphConv's Wr and bias and GAT's attention vectors, from stream 1; the other
    biases and ε zero, γ one, β zero)."""
    return initial_values(seed, [(decl.name(p.index), decl)
                                 for p, decl in stage_params(plans, widths) if not decl.buffer])


def initial_stats(plans: Sequence[LayerPlan], widths: Sequence[int]) -> dict[str, torch.Tensor]:
    """Running statistics at initialization (BatchNorm: mean{s} zeros, var{s} ones)."""
    return initial_values(0, [(decl.name(p.index), decl)
                              for p, decl in stage_params(plans, widths) if decl.buffer])


def parameter_layer(plans: Sequence[LayerPlan], name: str) -> int | None:
    """The GNN layer a parameter belongs to (None for the learnable input features)."""
    return None if name == "features" else plans[split_name(name)[1]].layer


class StepCounter:
    """The step that keys dropout masks: the one given, else (training) the next of an internal
    count, so calling a model again without ``step`` never reuses a mask. An explicit step moves
    the count past it; evaluation (no dropout) takes step 0 and leaves the count alone."""

    def __init__(self) -> None:
        self.next = 0

    def __call__(self, step: int | None, training: bool) -> int:
        if step is not None:
            self.next = int(step) + 1
            return int(step)
        if not training:
            return 0
        step, self.next = self.next, self.next + 1
        return step
