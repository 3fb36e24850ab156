"""The distributed model: one rank's view of it, built from its `RankShard`."""

from __future__ import annotations

from contextlib import ExitStack, nullcontext
from typing import Sequence

import numpy as np
import scipy.sparse as sp
import torch
import torch.distributed as dist
from torch import nn
from torch.utils.checkpoint import checkpoint

from plexus.core.layout import LayerPlan, block, padding
from plexus.partitioners.plan import RankShard, block_key

from .comm import Comm
from .config import EngineConfig, ModelConfig
from .gemm import GemmTuner
from .layer import ConvLayer3D, DenseLayer3D, relu, weight_block
from .loss import accuracy, cross_entropy, predict
from .norm import BatchNorm3D
from .seeding import initial_parameters, initial_stats, parameter_layer, split_name
from .spmm import SparseBlock, build_blocks


_STAGE_PARAMS = ("W", "Wr", "b", "eps", "gamma", "beta")
_VECTORS = ("b", "gamma", "beta", "mean", "var")  # cut like the output's columns


class DistributedModel(nn.Module):
    """The model of a `ModelConfig` on the grid; ``forward`` returns this rank's logits block
    (float32 whatever the engine's compute precision).

    Parameter names match `plexus.engine.serial.SerialModel` ("W0", "b0", "Wr0", "eps0",
    "gamma0", ..., "features"), and `full_parameter` / `shard_of` convert between a rank's shard
    and the full, unpadded, grid-independent tensor (checkpoints, exports and tests use them).
    """

    def __init__(self, comm: Comm, shard: RankShard, cfg: ModelConfig, seed: int,
                 engine: EngineConfig | None = None) -> None:
        super().__init__()
        engine = engine or EngineConfig()
        self.comm, self.cfg, self.seed = comm, cfg, seed
        self.dtype, self.recompute = engine.torch_dtype(), engine.recompute
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
        blocks, chunks = self._sparse_blocks(shard, out_ids, engine)
        tuner = GemmTuner(enabled=engine.tune_gemms)
        init = initial_parameters(seed, self.plans, self.widths, cfg.bias, cfg.train_eps)
        stats = initial_stats(self.plans, self.widths)
        stages, norms = [], {}
        for p in self.plans:
            params = {k: self._padded(f"{k}{p.index}", init[f"{k}{p.index}"])
                      for k in _STAGE_PARAMS if f"{k}{p.index}" in init}
            drop = cfg.dropout if cfg.drops_input(p) else 0.0
            ids = self.input_ids[p.index]
            if p.dense:
                stages.append(DenseLayer3D(p, comm, params, ids, drop, seed, tuner, self.dtype))
            else:
                stages.append(ConvLayer3D(p, comm, params, ids, blocks[p.index], drop, seed,
                                          chunks[p.index], engine.overlap, tuner, self.dtype))
            if p.norm:
                st = {k: self._padded(f"{k}{p.index}", stats[f"{k}{p.index}"])
                      for k in ("mean", "var")}
                cols = self._placement(f"gamma{p.index}")[0][0]
                norms[str(p.index)] = BatchNorm3D(p, comm, cols, params, st,
                                                  torch.from_numpy(out_ids[p.index] >= 0),
                                                  shard.num_nodes)
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
        self.labels = torch.from_numpy(shard.labels).to(device)
        self.masks = {k: torch.from_numpy(m).to(device) for k, m in shard.masks.items()}
        self.counts = dict(shard.mask_counts)

    def _sparse_blocks(self, shard: RankShard, out_ids: list[np.ndarray], engine: EngineConfig):
        """Per convolution stage: the SparseBlock it multiplies by, and its forward row chunks.

        Plain blocks are identified by (matrix, row range, column range): stages of the
        none/single permutations use one matrix (Â1 = Â2), so equal blocks are stored once. When
        Â is symmetric, the transpose of a block is the block at the swapped ranges of the other
        matrix (Â1ᵀ = Â2); if this rank holds it anyway, the backward reuses it. A stage with a
        root term gets its own stacked block [Â; S] or [Â | S] (`stacked_block`).
        """
        shape, coords, n = self.comm.grid.shape, self.comm.grid.coords, shard.nodes_padded
        same = shard.perm in ("none", "single")
        convs = [p for p in self.plans if not p.dense]

        def ident(plan):
            rows = block(n, shape[plan.a_rows], coords[plan.a_rows])
            cols = block(n, shape[plan.a_cols], coords[plan.a_cols])
            return (1 if same else plan.adj, rows.start, rows.stop, cols.start, cols.stop)

        mats, key_of, stacked = {}, {}, {}
        for plan in convs:
            a = shard.blocks[block_key(plan)]
            if plan.root == "none":
                key_of[plan.index] = ident(plan)
                mats.setdefault(ident(plan), a)
            else:
                stacked[plan.index] = stacked_block(a, out_ids[plan.index],
                                                    shard.input_ids[plan.index], plan.order)
        transposes = {}
        if shard.meta.get("symmetric", False):
            for k, r0, r1, c0, c1 in mats:
                t = (k if same else 3 - k, c0, c1, r0, r1)
                if t in mats:
                    transposes[(k, r0, r1, c0, c1)] = t
        device, backend, dtype = self.comm.grid.device, engine.spmm_backend, self.dtype
        built = build_blocks(mats, transposes, device, backend, dtype)
        blocks = {s: built[i] for s, i in key_of.items()}
        matrix = {s: mats[i] for s, i in key_of.items()}
        for s, m in stacked.items():
            blocks[s], matrix[s] = SparseBlock.build(m, device, backend, dtype=dtype), m
        chunks = {}
        for s, m in matrix.items():
            if engine.agg_chunks <= 1:
                chunks[s] = [blocks[s]]
                continue
            bounds = np.linspace(0, m.shape[0], engine.agg_chunks + 1).astype(int)
            chunks[s] = [SparseBlock.build(m[a:b], device, backend, False, dtype)
                         for a, b in zip(bounds[:-1], bounds[1:]) if b > a]
        return blocks, chunks

    def _padded(self, name: str, full: torch.Tensor) -> torch.Tensor:
        """``full`` zero-padded to the padded widths."""
        padded = torch.zeros(_shape(name, self.pad.widths_padded))
        padded[tuple(slice(0, d) for d in full.shape)] = full
        return padded

    def forward(self, step: int | None = None) -> torch.Tensor:
        """Logits block (rows cut by the last stage's out_rows, classes by its out_cols), in
        float32: the loss and the accuracy never see the compute precision's rounding of their
        own arithmetic. Dropout is applied when training, with masks keyed by ``step``.

        With ``recompute`` (and autograd on), each stage with its BatchNorm and ReLU is one
        checkpointed segment: backward keeps only the segment's input and runs the segment
        again to get what it saved. The re-run issues the segment's collectives again, in the
        same order on every rank, and draws the same dropout masks (a hash of the step and
        global ids, no generator state); BatchNorm does not update its running statistics a
        second time (`_frozen_stats`).
        """
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

    # ---- loss and metrics on the last layer's layout ------------------------------------------
    def _axes(self) -> tuple[str, str]:
        return self.plans[-1].out_rows, self.plans[-1].out_cols

    def loss(self, logits: torch.Tensor, mask: str = "train") -> torch.Tensor:
        """Mean cross-entropy over the nodes of ``mask`` (the same value on every rank)."""
        rows, classes = self._axes()
        return cross_entropy(logits, self.labels, self.masks[mask], self.counts[mask],
                             self.class_start, self.num_classes, self.comm, rows, classes)

    def accuracy(self, logits: torch.Tensor) -> dict[str, float]:
        """Accuracy on the train/val/test masks."""
        rows, classes = self._axes()
        return accuracy(logits, self.labels, self.masks, self.counts, self.class_start,
                        self.num_classes, self.comm, rows, classes)

    def predict(self, logits: torch.Tensor) -> torch.Tensor:
        """Predicted class per logits row (padded rows included)."""
        return predict(logits, self.class_start, self.num_classes, self.comm, self._axes()[1])

    # ---- conversion between shards and full tensors ---------------------------------------
    def _placement(self, name: str) -> tuple[tuple[slice, ...], bool]:
        """Where this rank's ``name`` sits in the padded full tensor, and whether this rank is
        the one replica that contributes it when assembling the full tensor."""
        shape, coords = self.comm.grid.shape, self.comm.grid.coords
        kind, s = split_name(name)
        plan = self.plans[s]
        rows, cols = weight_block(plan, shape, coords, self.pad.widths_padded[s],
                                  self.pad.widths_padded[s + 1])
        if kind in ("W", "Wr"):
            return (rows, cols), True
        if kind in _VECTORS:  # replicated over out_rows and out_replicated: coordinate 0 speaks
            return (cols,), coords[plan.out_rows] == 0 and coords[plan.out_replicated] == 0
        if kind == "eps":  # replicated everywhere
            return (slice(None),), all(c == 0 for c in coords.values())
        raise KeyError(name)

    def named_shards(self) -> dict[str, nn.Parameter]:
        """Trainable shards by grid-independent name."""
        out = {}
        for l, layer in enumerate(self.layers):
            for kind in ("W", "Wr", "b", "eps"):
                value = getattr(layer, kind)
                if isinstance(value, nn.Parameter):
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
            dist.all_reduce(full)
            return full[:, :f]
        index, speaks = self._placement(name)
        full = torch.zeros(_shape(name, self.pad.widths_padded), device=shard.device)
        if speaks:
            full[index] = shard.detach()
        dist.all_reduce(full)
        return full[tuple(slice(0, r) for r in _shape(name, self.widths))]

    def shard_of(self, name: str, full: torch.Tensor) -> torch.Tensor:
        """This rank's shard of the full unpadded tensor ``full``."""
        full = full.to(self.comm.grid.device)
        if name == "features":
            ids, cols = self._feature_rows()
            padded = torch.zeros(len(ids), self.pad.widths_padded[0], device=full.device)
            real = ids >= 0
            padded[real, : full.shape[1]] = full[ids[real]]
            return padded[:, cols].clone()
        return self._padded(name, full.cpu()).to(full.device)[self._placement(name)[0]].clone()


def _shape(name: str, widths: Sequence[int]) -> tuple[int, ...]:
    """The shape of parameter or statistic ``name`` for stage widths ``widths`` (real or
    padded): a stage's weights are D_s × D_s+1, ε one number, the rest one per output column."""
    kind, s = split_name(name)
    if kind in ("W", "Wr"):
        return (widths[s], widths[s + 1])
    return (1,) if kind == "eps" else (widths[s + 1],)


def stage_output_ids(shard: RankShard) -> list[np.ndarray]:
    """Per stage, the original node id of each of its output rows on this rank (-1: padding):
    the next stage's input rows, and the logits rows after the last."""
    return list(shard.input_ids[1:]) + [shard.output_ids]


def stacked_block(a: sp.csr_matrix, out_ids: np.ndarray, in_ids: np.ndarray,
                  order: str) -> sp.csr_matrix:
    """Â's block with S, the identity's block in the same layout (S[i, j] = 1 where output row i
    and input row j are the same real node), stacked as [Â; S] for aggregate-first stages (one
    SpMM gives Â·H and H in the output's rows) or [Â | S] for combine-first ones (Â·Z + S·Zr)."""
    size = int(max(in_ids.max(initial=-1), out_ids.max(initial=-1))) + 1
    position = np.full(size + 1, -1, dtype=np.int64)  # slot ``size`` answers the -1 padding
    real_in = in_ids >= 0
    position[in_ids[real_in]] = np.nonzero(real_in)[0]
    cols = position[np.where(out_ids >= 0, out_ids, size)]
    rows = np.nonzero(cols >= 0)[0]
    cols = cols[rows]
    S = sp.csr_matrix((np.ones(len(rows), dtype=np.float32), (rows, cols)), shape=a.shape)
    out = sp.vstack([a, S]) if order == "agg" else sp.hstack([a, S])
    out = out.tocsr().astype(np.float32)
    out.sort_indices()
    return out
