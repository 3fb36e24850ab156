"""The one 3D stage every built-in kind runs as (`Stage3D`): its parameter shards (cut as the
kind's spec in `plexus_partition.model.ops` declares them) and the stage toolkit its kind's torch
code is written with, BatchNorm's too; a kind's serial reference as the engine calls it
(`serial_of`); and where each declared parameter's shard sits in the full tensor (`placement`,
`ShardMap`), which the models use to convert between shards and grid-independent tensors. A
kind's torch code and serial reference live in its layer file in `plexus.engine.kinds`; the
engine runs every kind through `Stage3D` and `serial_of`.

Symbols follow docs/design.md: Â (this rank's block of the adjacency), H (input block),
W (weight block, stored cut over one more axis and gathered before use), OUT. Each collective is
one line naming its axis; its backward counterpart is in the comment. The same collectives, with
their sizes, are recorded from a dry run of the kind's torch code (`plexus.engine.dryrun`; the
toolkit names each, `Comm.labelled`); the schedule, the performance model and the ledger test
read them, and the ledger test checks that the engine issues exactly them.

Parameters are float32 (the master weights); a stage casts them to its compute precision
``dtype`` at use, before their collective, so they travel in that precision and their gradients
come back into the float32 parameters through the cast. With float32 the casts are no-ops.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterator, Mapping, Sequence

import torch
from torch import nn

from plexus_partition.model.layout import LayerPlan, block
from plexus_partition.model.ops import OPERATORS, Param

from .comm import all_reduce_staged
from .graph3d import StageGraph
from .kinds import layer_of
from .stagespec import StageContext, StageSpec


def serial_of(op: str) -> Callable:
    """Operator ``op``'s serial reference: ``(model, plan, H, step) -> OUT`` before the bias."""
    return layer_of(op).serial


def weight_block(plan: LayerPlan, shape: Mapping[str, int], coords: Mapping[str, int],
                 d_in: int, d_out: int) -> tuple[slice, slice]:
    """Rows and columns of the padded full W (d_in × d_out) that this rank stores: rows cut by
    inner then again by W's flat axis, columns by ``plan.w_cols``."""
    rows = block(d_in, shape[plan.inner], coords[plan.inner])
    rows = block(rows.stop - rows.start, shape[plan.w_flat], coords[plan.w_flat])
    offset = block(d_in, shape[plan.inner], coords[plan.inner]).start
    return (slice(offset + rows.start, offset + rows.stop),
            block(d_out, shape[plan.w_cols], coords[plan.w_cols]))


def padded_shape(decl: Param, plan: LayerPlan, d_in: int, d_out: int) -> tuple[int, ...]:
    """The shape of a declared parameter for widths ``d_in``, ``d_out`` (real or padded)."""
    inner = OPERATORS[plan.op].inner_width(plan, d_out)
    return {"weight": (d_in, inner), "inner": (inner,), "vector": (d_out,),
            "scalar": tuple(decl.shape)}[decl.layout]


def embed(decl: Param, plan: LayerPlan, full: torch.Tensor, d_in: int, d_out: int
          ) -> torch.Tensor:
    """``full`` (real widths) zero-padded to the padded widths ``d_in``, ``d_out``; columns of
    an inner width of several head blocks pad each block (h·F + f -> h·F_pad + f)."""
    out = torch.zeros(padded_shape(decl, plan, d_in, d_out), dtype=full.dtype,
                      device=full.device)
    blocks = OPERATORS[plan.op].head_blocks(plan)
    if decl.layout in ("weight", "inner") and blocks > 1:
        src = full.reshape(*full.shape[:-1], blocks, -1)
        dst = out.view(*out.shape[:-1], blocks, -1)
        dst[tuple(slice(0, k) for k in src.shape)] = src
    else:
        out[tuple(slice(0, k) for k in full.shape)] = full
    return out


def extract(decl: Param, plan: LayerPlan, padded: torch.Tensor, d_in: int, d_out: int
            ) -> torch.Tensor:
    """The real part of a padded full parameter (the inverse of `embed`)."""
    real = padded_shape(decl, plan, d_in, d_out)
    blocks = OPERATORS[plan.op].head_blocks(plan)
    if decl.layout in ("weight", "inner") and blocks > 1:
        view = padded.reshape(*padded.shape[:-1], blocks, -1)
        index = tuple(slice(0, k) for k in real[:-1]) + (slice(None),
                                                          slice(0, real[-1] // blocks))
        return view[index].reshape(real).clone()
    return padded[tuple(slice(0, k) for k in real)].clone()


def placement(decl: Param, plan: LayerPlan, shape: Mapping[str, int],
              coords: Mapping[str, int], d_in: int, d_out: int
              ) -> tuple[tuple[slice, ...], bool]:
    """Where this rank's shard of a declared parameter sits in the padded full tensor (padded
    widths ``d_in``, ``d_out``), and whether this rank is the one replica that contributes it
    when the full tensor is assembled."""
    inner = OPERATORS[plan.op].inner_width(plan, d_out)
    rows, cols = weight_block(plan, shape, coords, d_in, inner)
    lead = coords[plan.out_rows] == 0 and coords[plan.out_replicated] == 0
    if decl.layout == "weight":  # cut over all three axes: every element on one rank
        return (rows, cols), True
    if decl.layout == "inner":  # cut like W's columns, replicated over the other two axes
        return (cols,), lead
    if decl.layout == "vector":  # cut like the output's columns
        return (block(d_out, shape[plan.out_cols], coords[plan.out_cols]),), lead
    return (slice(None),), all(c == 0 for c in coords.values())  # scalar: everywhere


def shard_of_full(decl: Param, plan: LayerPlan, grid: Any, full: torch.Tensor, d_in: int,
                  d_out: int) -> torch.Tensor:
    """This rank's shard of a declared parameter from its full (real-width) tensor, on
    ``grid.device`` (``grid``: shape, coords, device)."""
    index, _ = placement(decl, plan, grid.shape, grid.coords, d_in, d_out)
    return embed(decl, plan, full.cpu(), d_in, d_out)[index].clone().to(grid.device)


def full_from_shards(decl: Param, plan: LayerPlan, grid: Any, shard: torch.Tensor,
                     real: tuple[int, int], d_in: int, d_out: int) -> torch.Tensor:
    """The full real-width tensor of a declared parameter from every rank's ``shard``: each
    element's one contributing replica writes it into a zero tensor, one all-reduce over the
    whole world (collective; every rank gets the result)."""
    index, speaks = placement(decl, plan, grid.shape, grid.coords, d_in, d_out)
    full = torch.zeros(padded_shape(decl, plan, d_in, d_out), device=shard.device)
    if speaks:
        full[index] = shard.detach()
    all_reduce_staged(full)
    return extract(decl, plan, full, *real)


class ShardMap:
    """Every declared parameter and statistic of a model by its grid-independent name, and the
    conversions between this rank's shard and the full, unpadded tensor: the one rule of the
    engine's model and of `plexus.nn.Network`. ``widths``/``padded``: every stage's real and
    padded input widths, then the output's."""

    def __init__(self, grid: Any, widths: Sequence[int], padded: Sequence[int]) -> None:
        self.grid, self.widths, self.padded = grid, list(widths), list(padded)
        self.decls: dict[str, tuple[LayerPlan, Param]] = {}

    def declare(self, name: str, plan: LayerPlan, decl: Param) -> None:
        self.decls[name] = (plan, decl)

    def _where(self, name: str) -> tuple[LayerPlan, Param, int, int, int, int]:
        p, decl = self.decls[name]
        s = p.index
        return p, decl, self.widths[s], self.widths[s + 1], self.padded[s], self.padded[s + 1]

    def shard_of_full(self, name: str, full: torch.Tensor) -> torch.Tensor:
        """This rank's shard of ``name`` from its full tensor, on the grid's device."""
        p, decl, _, _, d_in, d_out = self._where(name)
        return shard_of_full(decl, p, self.grid, full, d_in, d_out)

    def full_of_shard(self, name: str, shard: torch.Tensor) -> torch.Tensor:
        """The full tensor of ``name`` from every rank's ``shard`` (collective)."""
        p, decl, real_in, real_out, d_in, d_out = self._where(name)
        return full_from_shards(decl, p, self.grid, shard, (real_in, real_out), d_in, d_out)

    def owns(self, name: str) -> bool:
        """Whether this rank's shard of ``name`` is the replica that counts in a sum over the
        full tensor (every element once over the world)."""
        p, decl, _, _, d_in, d_out = self._where(name)
        return placement(decl, p, self.grid.shape, self.grid.coords, d_in, d_out)[1]


class Stage3D(nn.Module):
    """One stage on the grid: its parameter shards (``params``, by kind), its running
    statistics (buffers by kind: BatchNorm's) and the stage toolkit ``g``
    (`plexus.engine.graph3d.StageGraph`) its operator's torch code runs on. ``forward``
    receives H (not after a stage: BatchNorm), runs the kind's ``stage(g, H, step)``
    (its layer, `plexus.engine.kinds`) and adds the bias: the built-in kinds are written with
    the same operations as users' layers.

    ``input_ids`` are the original node ids of the rows of H as this stage sees them (after
    stage 0's all-gather; -1 for padding): dropout masks are keyed by them, the seed, the step
    and the GNN layer, never by the rank, so every grid drops the same elements as the serial
    model. ``dtype`` is the compute precision of H, OUT and the messages.
    """

    def __init__(self, ctx: StageContext, spec: StageSpec, shards: Mapping[str, torch.Tensor],
                 stats: Mapping[str, torch.Tensor] | None = None) -> None:
        """``ctx``: the model's `StageContext`; ``spec``: this stage's `StageSpec`; ``shards``:
        its parameter shards by kind ("W", "b", ...); ``stats``: its running statistics'
        shards by kind (BatchNorm's)."""
        super().__init__()
        self.plan, self.comm, self.dtype = spec.plan, ctx.comm, ctx.dtype
        self.operator = OPERATORS[self.plan.op]
        self.layer = layer_of(self.plan.op)  # its torch code
        self.params = nn.ParameterDict({k: nn.Parameter(v) for k, v in shards.items()})
        for kind, value in (stats or {}).items():
            self.register_buffer(kind, value)
        self.g = StageGraph(ctx, spec, params=self.params)
        self.stat_kinds = tuple(stats or {})

    def param(self, kind: str) -> torch.Tensor | None:
        """The shard of parameter ``kind`` ("W", "b", ...), None if the stage has none."""
        return self.g.param(kind)

    @property
    def consume_input(self) -> bool:
        """Set by a model that passes H to this stage and never reads it again (e.g. a fresh
        ReLU output): the stage may then overwrite H (aggregate-first dropout). Held by the
        toolkit, which is what reads it."""
        return self.g.consume_input

    @consume_input.setter
    def consume_input(self, value: bool) -> None:
        self.g.consume_input = value

    @contextmanager
    def frozen_stats(self) -> Iterator[None]:
        """Within: training passes leave the running statistics alone (a recomputed pass must
        not count the step twice)."""
        self.g.update_stats = False
        try:
            yield
        finally:
            self.g.update_stats = True

    def forward(self, H: torch.Tensor, step: int | None = None,
                outputs: Mapping[int, torch.Tensor] | None = None) -> torch.Tensor:
        """H: rows cut by outer, columns by inner (stage 0: rows cut by depth too, as stored;
        later stages: replicated over depth, as the previous stage left it); ``outputs``: the
        earlier outputs the kind reads (`KindSpec.reads`), in H's layout; those the stage
        hands on are in ``g.carried`` after it."""
        g = self.g
        g.training, g.stats = self.training, {k: getattr(self, k) for k in self.stat_kinds}
        g.outputs, g.carried = dict(outputs or {}), {}
        with self.comm.exact(self.operator.statistics):
            OUT = self.layer.stage(g, H if self.operator.follows else g.receive(
                H, self.operator.reads_input_by_aggregation(self.plan)), step)
        b = None if self.operator.own_bias else self.param("b")
        return OUT if b is None else g.add_bias(OUT, b, inplace=True)  # a fresh OUT
