"""The distributed model: one rank's view of it, built from its `RankShard`."""

from __future__ import annotations

from contextlib import ExitStack, nullcontext

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from plexus.core.layout import LayerPlan, block, padding
from plexus.core.ops import NORM_OP, OPERATORS, split_name
from plexus.partitioners.plan import RankShard

from .blocks import GraphBlocks, stage_output_ids
from .comm import Comm, all_reduce_staged, global_norm
from .config import EngineConfig, ModelConfig
from .gemm import GemmTuner
from .loss import ClassifierHead
from .ops import NORM_STAGE, ShardMap, Stage3D, StageInputs
from .primitives import relu
from .seeding import StepCounter, initial_parameters, initial_stats, parameter_layer, stage_params


class DistributedModel(ClassifierHead, nn.Module):
    """The model of a `ModelConfig` on the grid; ``forward`` returns this rank's logits block
    (float32 whatever the engine's compute precision).

    Parameter names match `plexus.engine.serial.SerialModel` ("W0", "b0", "Wr0", "eps0",
    "att_src0", "gamma0", ..., "features"), and `full_parameter` / `shard_of` convert between
    a rank's shard and the full, unpadded, grid-independent tensor (checkpoints, exports and
    tests use them). Every stage is built by its operator's torch code (`plexus.engine.ops`)
    from the parameters its declaration lists (`plexus.core.ops`).
    """

    def __init__(self, comm: Comm, shard: RankShard, cfg: ModelConfig, seed: int,
                 engine: EngineConfig | None = None) -> None:
        super().__init__()
        engine = engine or EngineConfig()
        self.comm, self.cfg, self.seed = comm, cfg, seed
        self.dtype, self.recompute = engine.torch_dtype(), engine.recompute
        self.steps = StepCounter()
        grid = comm.grid
        device, shape, coords = grid.device, grid.shape, grid.coords
        if shard.shape != shape or shard.coords != coords:
            raise ValueError(f"shard is for grid {shard.shape} at {shard.coords}, but this rank is "
                             f"at {coords} of {shape}")
        self.plans = cfg.plans(shard.num_features, shard.num_classes)
        if tuple(p.order for p in self.plans) != tuple(shard.orders):
            raise ValueError(f"shard was cut for stages {'/'.join(shard.orders)}, the model has "
                             f"{'/'.join(p.order for p in self.plans)}")
        if shard.meta.get("aggregation", "gcn") != cfg.aggregation:  # older stores: GCN's
            raise ValueError(f"shard holds the {shard.meta.get('aggregation', 'gcn')} "
                             "aggregation, the "
                             f"{cfg.kind} model needs {cfg.aggregation}")
        self.widths = cfg.widths(shard.num_features, shard.num_classes)
        self.pad = padding(shape, self.plans, shard.num_nodes, self.widths)
        self.num_classes = shard.num_classes
        self.input_ids = [torch.from_numpy(ids).to(device) for ids in shard.input_ids]
        out_ids = stage_output_ids(shard)
        graph = GraphBlocks(shard, self.plans, shape, coords, device, self.dtype, engine)
        tuner = GemmTuner(enabled=engine.tune_gemms)
        self.shards = ShardMap(grid, self.widths, self.pad.widths_padded)
        for p, decl in stage_params(self.plans, self.widths):
            self.shards.declare(decl.name(p.index), p, decl)
        self.decls = self.shards.decls
        full = {**initial_parameters(seed, self.plans, self.widths),
                **initial_stats(self.plans, self.widths)}
        shards = {name: self.shards.shard_of_full(name, value) for name, value in full.items()}
        stages, norms = [], {}
        for p in self.plans:
            own = {self.decls[n][1].kind: shards[n] for n in shards
                   if split_name(n)[1] == p.index}
            wp = self.pad.widths_padded
            inputs = StageInputs(
                p, comm, {k: v for k, v in own.items() if k not in _NORM_KINDS},
                wp[p.index], wp[p.index + 1], (self.widths[p.index], self.widths[p.index + 1]),
                self.input_ids[p.index], torch.from_numpy(out_ids[p.index]).to(device),
                cfg.dropout if cfg.drops_input(p) else 0.0, seed, tuner, self.dtype, engine,
                graph, cfg)
            stages.append(Stage3D(inputs))
            if p.norm:
                norms[str(p.index)] = NORM_STAGE(
                    p, comm, {k: own[k] for k in _NORM_KINDS},
                    torch.from_numpy(out_ids[p.index] >= 0), shard.num_nodes)
        self.layers = nn.ModuleList(stages)
        self.norms = nn.ModuleDict(norms)
        # forward hands each a fresh ReLU output it never reuses; under recompute that output
        # is the next segment's saved input, which the recomputation reads again
        for layer in self.layers[1:]:
            layer.consume_input = not self.recompute
        feats = torch.from_numpy(shard.features).to(device)
        if cfg.learnable_features:  # a float32 parameter like the weights, cast at use
            self.features = nn.Parameter(feats)
        else:  # held in the compute precision: no float32 copy stays alive
            self.register_buffer("features", feats.to(self.dtype), persistent=False)
        last = self.plans[-1]
        self.class_start = block(self.pad.widths_padded[-1], shape[last.out_cols],
                                 coords[last.out_cols]).start
        self.labels = self.head_labels(shard.labels, self.class_start,
                                       self.pad.widths_padded[-1] // shape[last.out_cols], device)
        self.masks = {k: torch.from_numpy(m).to(device) for k, m in shard.masks.items()}
        self.counts = dict(shard.mask_counts)

    def forward(self, step: int | None = None) -> torch.Tensor:
        """Logits block (rows cut by the last stage's out_rows, classes by its out_cols), in
        float32: the loss and the accuracy never see the compute precision's rounding of their
        own arithmetic. Dropout is applied when training, with masks keyed by ``step``; without
        one, every training call takes the next step of an internal counter
        (`plexus.engine.seeding.StepCounter`), so no two calls reuse a mask by accident.

        With ``recompute`` (and autograd on), each stage with its BatchNorm and ReLU is one
        checkpointed segment: backward keeps only the segment's input and runs the segment
        again to get what it saved. The re-run issues the segment's collectives again, in the
        same order on every rank, and draws the same dropout masks (a hash of the step and
        global ids, no generator state); BatchNorm does not update its running statistics a
        second time (`_frozen_stats`).
        """
        step = self.steps(step, self.training)
        H = self.features.to(self.dtype)  # a learnable float32 parameter: cast at use
        segments = self.recompute and torch.is_grad_enabled()
        for p, layer in zip(self.plans, self.layers):
            if segments:
                H = checkpoint(self._stage, p, layer, H, step, use_reentrant=False,
                               preserve_rng_state=False,  # dropout draws no random numbers
                               context_fn=lambda: (nullcontext(), self._frozen_stats()))
            else:
                H = self._stage(p, layer, H, step)
        return H.float()

    def _stage(self, p: LayerPlan, layer: nn.Module, H: torch.Tensor,
               step: int | None) -> torch.Tensor:
        """One stage, its BatchNorm and its ReLU."""
        H = layer(H, step)
        if p.norm:
            H = self.norms[str(p.index)](H)
        if self.cfg.activates(p):
            H = relu(H, inplace=True)  # H's only use; saves a copy per stage
        return H

    def _frozen_stats(self) -> ExitStack:
        """Every BatchNorm's running statistics kept as they are (a recomputation's pass)."""
        stack = ExitStack()
        for norm in self.norms.values():
            stack.enter_context(norm.frozen_stats())
        return stack

    # ---- conversion between shards and full tensors ---------------------------------------
    def named_shards(self) -> dict[str, nn.Parameter]:
        """Trainable shards by grid-independent name."""
        out = {}
        for l, layer in enumerate(self.layers):
            for kind, value in layer.params.items():
                out[f"{kind}{l}"] = value
            if str(l) in self.norms:
                out[f"gamma{l}"] = self.norms[str(l)].gamma
                out[f"beta{l}"] = self.norms[str(l)].beta
        if self.cfg.learnable_features:
            out["features"] = self.features
        return out

    def named_stats(self) -> dict[str, torch.Tensor]:
        """BatchNorm running statistics (shards) by grid-independent name."""
        out = {}
        for s, norm in self.norms.items():
            out[f"mean{s}"], out[f"var{s}"] = norm.mean, norm.var
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
        return self.shards.full_of_shard(name, shard)

    def owns(self, name: str) -> bool:
        """Whether this rank's shard of ``name`` is the replica that counts it in a sum over
        the full tensor (every element once over the world; the input features are cut, never
        replicated)."""
        return name == "features" or self.shards.owns(name)

    def grad_norm(self) -> torch.Tensor:
        """The 2-norm of the full gradient (collective): what clipping compares with its limit,
        the same on every grid."""
        return global_norm([p.grad for n, p in self.named_shards().items()
                            if p.grad is not None and self.owns(n)], self.comm.grid.device)

    def shard_of(self, name: str, full: torch.Tensor) -> torch.Tensor:
        """This rank's shard of the full unpadded tensor ``full``."""
        full = full.to(self.comm.grid.device)
        if name == "features":
            ids, cols = self._feature_rows()
            padded = torch.zeros(len(ids), self.pad.widths_padded[0], device=full.device)
            real = ids >= 0
            padded[real, : full.shape[1]] = full[ids[real]]
            return padded[:, cols].clone()
        return self.shards.shard_of_full(name, full).to(full.device)


# BatchNorm's parameter and statistic kinds (its declaration's), among a stage's
_NORM_KINDS = tuple(d.kind for d in OPERATORS[NORM_OP].params(LayerPlan(0, "dense", "x", "y", "z"),
                                                             1, 1))
