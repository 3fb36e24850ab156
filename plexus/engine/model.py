"""The model on the grid: `GridModel`, what every model on the engine is built with (the
engine's `DistributedModel` from a `ModelConfig`, and `plexus.nn.Network` from users' layers),
and the `DistributedModel` itself, one rank's view of it, built from its `RankShard`."""

from __future__ import annotations

from contextlib import ExitStack, nullcontext
from dataclasses import replace
from typing import Callable, Sequence

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from plexus_partition.model.layout import LayerPlan, block, padding
from plexus_partition.model.ops import NORM_OP, OPERATORS, Param
from plexus_partition.model.schedule import SETUP
from plexus_partition.plan import RankShard

from .blocks import GraphBlocks, stage_output_ids
from .comm import Comm, all_reduce_staged, global_norm
from .config import EngineConfig, ModelConfig
from .gemm import GemmTuner
from .loss import ClassifierHead
from .stage import ShardMap, Stage3D
from .stagespec import StageContext, StageSpec
from .primitives import activate
from .seeding import StepCounter, initial_values, parameter_layer, stage_params


def keeps_input(option: str, learnable: bool, depth: int, stored_bytes: float,
                budget: float) -> bool:
    """Whether layer 0's fixed input features are gathered once at set-up and kept
    (`plexus.engine.config.EngineConfig.keep_input`): never when they learn or nothing is
    gathered (a depth axis of 1); "auto" keeps them when the gathered block (``depth`` times the
    ``stored_bytes`` of this rank's shard) fits ``budget``, the bytes a pass's temporaries may
    take (`plexus.engine.pieces`): every forward gathers that block anyway."""
    if option == "on" and learnable:
        raise ValueError("keep_input on needs fixed input features: learnable ones change "
                         "every step (use auto or off)")
    if learnable or depth == 1 or option == "off":
        return False
    return option == "on" or depth * stored_bytes <= budget


class GridModel(ClassifierHead, nn.Module):
    """The one builder of a model on the grid (the engine's and `plexus.nn.Network`): the
    shard map of its declared parameters and their initial values (`initial_values`, drawn
    full-size from the seed by grid-independent name, then cut), BatchNorm's stage, the
    classifier head on the last stage's output, and the conversions between shards and full
    tensors. A subclass calls `_start`, declares its parameters with `_initial_shards`, and
    holds each by name (`_hold`)."""

    def _start(self, comm: Comm, shard: RankShard, plans: Sequence[LayerPlan],
               widths: Sequence[int], seed: int, engine: EngineConfig) -> None:
        """The model's plan, padding, shard map and classifier head from ``shard``."""
        grid = comm.grid
        shape, coords, device = grid.shape, grid.coords, grid.device
        self.comm, self.seed, self.plans, self.widths = comm, seed, list(plans), list(widths)
        comm.wire = engine.wire_dtype()  # the payload precision of this model's collectives
        comm.place(engine.collectives, engine.gpus_per_node,  # collective: sub-groups
                   {c: (a, b) for c, a, b in engine.link_rates}, engine.node_block)
        self.dtype, self.steps = engine.torch_dtype(), StepCounter()
        self.pad = padding(shape, self.plans, shard.num_nodes, self.widths)
        wp = self.pad.widths_padded
        self.shards = ShardMap(grid, self.widths, wp)
        self.decls = self.shards.decls
        self.held: dict[str, tuple[nn.Module, str]] = {}  # name -> (module, attribute)
        self.out_ids = stage_output_ids(shard)
        self.num_nodes = shard.num_nodes
        last = self.plans[-1]
        self.class_start = block(wp[-1], shape[last.out_cols], coords[last.out_cols]).start
        self.num_classes = shard.num_classes
        self.labels = self.head_labels(shard.labels, self.class_start,
                                       wp[-1] // shape[last.out_cols], device)
        self.masks = {k: torch.from_numpy(m).to(device) for k, m in shard.masks.items()}
        self.counts = dict(shard.mask_counts)
        self.graph_name = shard.name
        # the forward loop's policy (`forward`), set by the subclass where it differs
        self.recompute = engine.recompute
        # each stage's activation (`plexus_partition.model.ops.ACTIVATIONS`; None: none, as
        # after the last)
        self.activations: list[str | None] = ["relu"] * len(self.plans)
        self.fresh_outputs = False  # a stage's output is its own: a ReLU may overwrite it
        self.norm_stages: list[Stage3D] = []  # every BatchNorm's (a recomputation freezes them)

    def _initial_shards(self, decls: Sequence[tuple[str, LayerPlan, Param]]
                        ) -> dict[str, torch.Tensor]:
        """Declare each (name, stage, declaration) in the shard map and give this rank's shard
        of its initial value."""
        for name, p, decl in decls:
            self.shards.declare(name, p, decl)
        full = initial_values(self.seed, [(name, decl) for name, _, decl in decls])
        return {name: self.shards.shard_of_full(name, value) for name, value in full.items()}

    def _hold(self, name: str, module: nn.Module, attribute: str) -> None:
        """Where the live tensor of parameter or statistic ``name`` is."""
        self.held[name] = (module, attribute)

    def _norm_stage(self, p: LayerPlan, ctx: StageContext, name: Callable[[str], str],
                    shards: dict[str, torch.Tensor]) -> Stage3D:
        """Stage ``p``'s BatchNorm (`plexus_partition.model.ops.batchnorm`, run by a `Stage3D`
        in the model's ``ctx``) from its parameters' and statistics' ``shards``, each kind's
        under ``name(kind)``."""
        d = self.widths[p.index + 1]
        decls = OPERATORS[NORM_OP].params(p, d, d)
        wp, device = self.pad.widths_padded[p.index + 1], self.comm.grid.device
        ids = torch.from_numpy(self.out_ids[p.index]).to(device)
        norm = Stage3D(ctx, StageSpec(replace(p, op=NORM_OP), ids, wp, wp, (d, d), ids),
                       {x.kind: shards[name(x.kind)] for x in decls if not x.buffer},
                       {x.kind: shards[name(x.kind)] for x in decls if x.buffer})
        for x in decls:
            self._hold(name(x.kind), norm if x.buffer else norm.params, x.kind)
        self.norm_stages.append(norm)
        return norm

    # ---- the one forward loop: the engine's kinds and users' layers, stage by stage --------
    def forward(self, step: int | None = None) -> torch.Tensor:
        """Logits block (rows cut by the last stage's out_rows, classes by its out_cols), in
        float32: the loss and the accuracy never see the compute precision's rounding of their
        own arithmetic. Dropout is applied when training, with masks keyed by ``step``; without
        one, every training call takes the next step of an internal counter
        (`plexus.engine.seeding.StepCounter`), so no two calls reuse a mask by accident.

        Every model on the grid runs this loop (PyG's ``BasicGNN`` shape): per stage its own
        computation with its input's dropout (`_compute`: a built-in kind's `Stage3D`, or a
        user's layer through its `plexus.nn.LayerGraph`), its BatchNorm, its activation (none
        after the last stage), then the earlier outputs that later stages read (`_keep`).

        With ``recompute`` (and autograd on), each stage with its BatchNorm and activation is one
        checkpointed segment: backward keeps only the segment's inputs and runs the segment
        again to get what it saved. The re-run issues the segment's collectives again, in the
        same order on every rank, and draws the same dropout masks (a hash of the step and
        global ids, no generator state); BatchNorm does not update its running statistics a
        second time (`_frozen_stats`).
        """
        step = self.steps(step, self.training)
        H = self.features.to(self.dtype)  # a learnable float32 parameter: cast at use
        kept: dict[int, torch.Tensor] = {}
        segments = self.recompute and torch.is_grad_enabled()
        for s in range(len(self.plans)):
            if segments:
                H, kept = checkpoint(self._stage, s, H, kept, step, use_reentrant=False,
                                     preserve_rng_state=False,  # dropout draws no random numbers
                                     context_fn=lambda: (nullcontext(), self._frozen_stats()))
            else:
                H, kept = self._stage(s, H, kept, step)
        return H.float()

    def _stage(self, s: int, H: torch.Tensor, kept: dict[int, torch.Tensor],
               step: int | None) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
        """Stage ``s`` with its BatchNorm and activation, and what it hands on (collectives
        recorded as the stage's)."""
        p = self.plans[s]
        with self.comm.at(p.index, "forward" if self.training else "eval"):
            H = self._compute(s, H, kept, step)
            if p.norm:
                H = self.norms[str(p.index)](H)
            act = self.activations[s]
            if s < len(self.plans) - 1 and act is not None and act != "none":
                # fresh: H's only use, a ReLU overwrites it (saves a copy)
                H = activate(act, H, inplace=self.fresh_outputs)
            return H, self._keep(s, H, kept)

    def _compute(self, s: int, H: torch.Tensor, kept: dict[int, torch.Tensor],
                 step: int | None) -> torch.Tensor:
        """Stage ``s``'s own computation on the previous stage's output ``H``, dropout of its
        input included (``kept``: the earlier outputs it reads, in its input's layout)."""
        raise NotImplementedError

    def _keep(self, s: int, H: torch.Tensor, kept: dict[int, torch.Tensor]
              ) -> dict[int, torch.Tensor]:
        """The earlier outputs later stages read, after stage ``s`` (output ``H``) ran: none."""
        return kept

    def _frozen_stats(self) -> ExitStack:
        """Every BatchNorm's running statistics kept as they are (a recomputation's pass)."""
        stack = ExitStack()
        for norm in self.norm_stages:
            stack.enter_context(norm.frozen_stats())
        return stack

    def named_shards(self) -> dict[str, nn.Parameter]:
        """Trainable shards by grid-independent name."""
        return {n: getattr(m, a) for n, (m, a) in self.held.items() if not self.decls[n][1].buffer}

    def named_stats(self) -> dict[str, torch.Tensor]:
        """BatchNorm running statistics (shards) by grid-independent name."""
        return {n: getattr(m, a) for n, (m, a) in self.held.items() if self.decls[n][1].buffer}

    def full_parameter(self, name: str, shard: torch.Tensor) -> torch.Tensor:
        """The full unpadded tensor of ``name`` from every rank's ``shard`` (a collective over
        the whole world; every rank gets the result)."""
        return self.shards.full_of_shard(name, shard)

    def full_parameters(self) -> dict[str, torch.Tensor]:
        """Every parameter and running statistic as a full tensor (collective)."""
        return {name: self.full_parameter(name, t).cpu()
                for name, t in {**self.named_shards(), **self.named_stats()}.items()}

    def shard_of(self, name: str, full: torch.Tensor) -> torch.Tensor:
        """This rank's shard of the full unpadded tensor ``full``."""
        return self.shards.shard_of_full(name, full.to(self.comm.grid.device))

    def owns(self, name: str) -> bool:
        """Whether this rank's shard of ``name`` is the replica that counts it in a sum over
        the full tensor (every element once over the world)."""
        return self.shards.owns(name)

    def grad_norm(self) -> torch.Tensor:
        """The 2-norm of the full gradient (collective): what clipping compares with its limit,
        the same on every grid."""
        return global_norm([p.grad for n, p in self.named_shards().items()
                            if p.grad is not None and self.owns(n)], self.comm.grid.device)


class DistributedModel(GridModel):
    """The model of a `ModelConfig` on the grid; ``forward`` returns this rank's logits block
    (float32 whatever the engine's compute precision).

    Parameter names match `plexus.engine.serial.SerialModel` ("W0", "b0", "Wr0", "eps0",
    "att_src0", "gamma0", ..., "features"), and `full_parameter` / `shard_of` convert between
    a rank's shard and the full, unpadded, grid-independent tensor (checkpoints, exports and
    tests use them). Every stage, BatchNorm's too, is a `Stage3D` running its operator's torch
    code from the parameters its declaration lists (`plexus_partition.model.ops`).
    """

    def __init__(self, comm: Comm, shard: RankShard, cfg: ModelConfig, seed: int,
                 engine: EngineConfig | None = None) -> None:
        super().__init__()
        engine = engine or EngineConfig()
        grid = comm.grid
        device, shape, coords = grid.device, grid.shape, grid.coords
        if shard.shape != shape or shard.coords != coords:
            raise ValueError(f"shard is for grid {shard.shape} at {shard.coords}, but this rank is "
                             f"at {coords} of {shape}")
        plans = cfg.plans(shard.num_features, shard.num_classes)
        if tuple(p.order for p in plans) != tuple(shard.orders):
            raise ValueError(f"shard was cut for stages {'/'.join(shard.orders)}, the model has "
                             f"{'/'.join(p.order for p in plans)}")
        if shard.meta.get("aggregation", "gcn") != cfg.aggregation:  # older stores: GCN's
            raise ValueError(f"shard holds the {shard.meta.get('aggregation', 'gcn')} "
                             "aggregation, the "
                             f"{cfg.kind} model needs {cfg.aggregation}")
        self._start(comm, shard, plans, cfg.widths(shard.num_features, shard.num_classes),
                    seed, engine)
        self.cfg, self.fresh_outputs = cfg, True  # a stage's output: its bias added in place
        self.activations = [cfg.activation if cfg.activates(p) else None for p in self.plans]
        self.input_ids = [torch.from_numpy(ids).to(device) for ids in shard.input_ids]
        graph = GraphBlocks(shard, self.plans, shape, coords, device, self.dtype, engine)
        tuner = GemmTuner(enabled=engine.tune_gemms)
        shards = self._initial_shards([(x.name(p.index), p, x)
                                       for p, x in stage_params(self.plans, self.widths)])
        wp, stages, norms = self.pad.widths_padded, [], {}
        ctx = StageContext(comm, graph, seed, self.dtype, tuner, cfg, engine, self.num_nodes)
        for p in self.plans:
            names = {x.kind: x.name(p.index) for x in OPERATORS[p.op].params(p, 1, 1)}
            spec = StageSpec(p, self.input_ids[p.index], wp[p.index], wp[p.index + 1],
                             (self.widths[p.index], self.widths[p.index + 1]),
                             torch.from_numpy(self.out_ids[p.index]).to(device),
                             cfg.dropout if cfg.drops_input(p) else 0.0)
            stages.append(Stage3D(ctx, spec, {kind: shards[name] for kind, name in names.items()}))
            for kind, name in names.items():
                self._hold(name, stages[-1].params, kind)
            if p.norm:
                norms[str(p.index)] = self._norm_stage(p, ctx, f"{{}}{p.index}".format, shards)
        self.layers, self.norms = nn.ModuleList(stages), nn.ModuleDict(norms)
        # each earlier output a stage reads -> the last stage reading it (carried until then)
        self.reads = {p.index: OPERATORS[p.op].reads(p) for p in self.plans}
        self.carry_until = {k: max(s for s, ks in self.reads.items() if k in ks)
                            for ks in self.reads.values() for k in ks}
        # forward hands each a fresh ReLU output it never reuses (the ReLU keeps a mask, not
        # it); under recompute that output is the next segment's saved input, which the
        # recomputation reads again. Another activation's output may be what its backward
        # keeps (tanh's), and "none" hands on the stage's own output: not overwritten.
        # An input that a later stage reads too (GCNII's H⁰) is never overwritten.
        for s, layer in enumerate(self.layers[1:], 1):
            layer.consume_input = (not self.recompute and self.activations[s - 1] == "relu"
                                   and self.carry_until.get(s - 1, -1) < s)
        feats = torch.from_numpy(shard.features).to(device)
        self.kept_input = keeps_input(engine.keep_input, cfg.learnable_features,
                                      shape[self.plans[0].depth],
                                      feats.numel() * self.dtype.itemsize, comm.budget)
        if cfg.learnable_features:  # a float32 parameter like the weights, cast at use
            self.features = nn.Parameter(feats)
        else:  # held in the compute precision: no float32 copy stays alive
            feats = feats.to(self.dtype)
            if self.kept_input:  # gathered once (the features never change), exactly
                with comm.at(0, SETUP), comm.exact(), comm.labelled("AG(H)"):
                    feats = comm.raw_all_gather(feats, self.plans[0].depth)  # over d
            self.register_buffer("features", feats, persistent=False)
        self.layers[0].g.input_kept = self.kept_input

    def exchange_counts(self) -> dict[tuple[int, str], tuple[int, int]]:
        """The rows each stage's sparse exchanges send, {(stage, "sum"/"gather"): (this
        rank's, the most of its axis)}, once the stages have run (`plexus.engine.exchange`;
        `plexus_partition.model.schedule.exact_rows` prices them)."""
        return {k: v for layer in self.layers for k, v in layer.g.exchange_counts().items()}

    def _compute(self, s: int, H: torch.Tensor, kept: dict[int, torch.Tensor],
                 step: int | None) -> torch.Tensor:
        """Stage ``s``'s `Stage3D` (its input's dropout inside its kind's code: fused into
        the SpMM where it aggregates first), with the earlier outputs it reads."""
        return self.layers[s](H, step, {k: kept[k] for k in self.reads[s]})

    def _keep(self, s: int, H: torch.Tensor, kept: dict[int, torch.Tensor]
              ) -> dict[int, torch.Tensor]:
        """The earlier outputs later stages read, as stage ``s`` handed them on in the next
        stage's input layout (`KindSpec.carries`), and stage ``s``'s own output ``H`` if a
        later stage reads it."""
        if not self.carry_until:
            return kept
        carried = self.layers[s].g.carried
        out = {k: c for k, c in carried.items() if self.carry_until[k] > s}
        missing = [k for k in self.carry_until if k < s < self.carry_until[k] and k not in out]
        if missing:
            raise ValueError(f"stage {s} ({self.plans[s].op}) does not hand on stage "
                             f"{missing[0]}'s output, which stage {self.carry_until[missing[0]]} "
                             "reads: every stage between them must read and carry it")
        if self.carry_until.get(s, -1) > s:
            out[s] = H
        return out

    def named_shards(self) -> dict[str, nn.Parameter]:
        """Trainable shards by grid-independent name, the learnable input features last."""
        out = super().named_shards()
        if self.cfg.learnable_features:
            out["features"] = self.features
        return out

    def parameter_layer(self, name: str) -> int | None:
        """The GNN layer of a parameter (None: the input features)."""
        return parameter_layer(self.plans, name)

    def _feature_rows(self) -> tuple[torch.Tensor, slice]:
        plan, shape, coords = self.plans[0], self.comm.grid.shape, self.comm.grid.coords
        ids = self.input_ids[0]
        sub = block(len(ids), shape[plan.depth], coords[plan.depth])
        cols = block(self.pad.widths_padded[0], shape[plan.in_cols], coords[plan.in_cols])
        return ids[sub], cols

    def full_parameter(self, name: str, shard: torch.Tensor) -> torch.Tensor:
        """Assemble the full unpadded tensor from every rank's ``shard`` (a collective over the
        whole world; every rank gets the result)."""
        if name == "features":
            ids, cols = self._feature_rows()
            n, f = self.pad.num_nodes, self.widths[0]
            full = torch.zeros(n, self.pad.widths_padded[0], device=shard.device)
            real = ids >= 0
            full[ids[real], cols] = shard.detach()[real]
            all_reduce_staged(full)
            return full[:, :f]
        return super().full_parameter(name, shard)

    def owns(self, name: str) -> bool:
        """Whether this rank's shard of ``name`` is the replica that counts it in a sum over
        the full tensor (every element once over the world; the input features are cut, never
        replicated)."""
        return name == "features" or super().owns(name)

    def shard_of(self, name: str, full: torch.Tensor) -> torch.Tensor:
        """This rank's shard of the full unpadded tensor ``full``."""
        full = full.to(self.comm.grid.device)
        if name == "features":
            ids, cols = self._feature_rows()
            padded = torch.zeros(len(ids), self.pad.widths_padded[0], device=full.device)
            real = ids >= 0
            padded[real, : full.shape[1]] = full[ids[real]]
            return padded[:, cols].clone()
        return super().shard_of(name, full)

