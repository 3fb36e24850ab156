"""The distributed GCN: one rank's view of the model, built from its `RankShard`."""

from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from plexus.core.layout import block, layer_plans, padding
from plexus.partitioners.plan import RankShard, block_key

from .comm import Comm
from .config import EngineConfig, ModelConfig
from .gemm import GemmTuner
from .layer import GCNLayer3D, relu, weight_block
from .loss import accuracy, cross_entropy, predict
from .seeding import glorot_weights
from .spmm import SparseBlock, build_blocks


class DistributedGCN(nn.Module):
    """GCN layers on the grid; ``forward`` returns this rank's block of the logits.

    Parameter names match `plexus.engine.serial.SerialGCN` ("W0", "b0", ..., "features"), and
    `full_parameter` / `shard_of` convert between a rank's shard and the full, unpadded,
    grid-independent tensor (checkpoints and tests use them).
    """

    def __init__(self, comm: Comm, shard: RankShard, cfg: ModelConfig, seed: int,
                 engine: EngineConfig | None = None) -> None:
        super().__init__()
        engine = engine or EngineConfig()
        self.comm, self.cfg, self.seed = comm, cfg, seed
        grid = comm.grid
        device, shape, coords = grid.device, grid.shape, grid.coords
        if shard.shape != shape or shard.coords != coords:
            raise ValueError(f"shard is for grid {shard.shape} at {shard.coords}, but this rank is "
                             f"at {coords} of {shape}")
        if shard.num_layers != cfg.num_layers:
            raise ValueError(f"shard was cut for {shard.num_layers} layers, model has "
                             f"{cfg.num_layers}")
        self.plans = layer_plans(cfg.num_layers, list(shard.orders))
        self.widths = cfg.widths(shard.num_features, shard.num_classes)
        self.pad = padding(shape, self.plans, shard.num_nodes, self.widths)
        self.num_classes = shard.num_classes
        blocks, chunks = self._sparse_blocks(shard, engine)
        tuner = GemmTuner(enabled=engine.tune_gemms)
        self.input_ids = [torch.from_numpy(ids).to(device) for ids in shard.input_ids]
        self.layers = nn.ModuleList(
            GCNLayer3D(p, comm, blocks[block_key(p)], w, cfg.bias, self.input_ids[p.index],
                       cfg.dropout, seed, chunks[block_key(p)], engine.overlap, tuner)
            for p, w in zip(self.plans, self._padded_weights()))
        for layer in self.layers[1:]:  # forward hands each a fresh ReLU output it never reuses
            layer.consume_input = True
        feats = torch.from_numpy(shard.features).to(device)
        if cfg.learnable_features:
            self.features = nn.Parameter(feats)
        else:
            self.register_buffer("features", feats, persistent=False)
        last = self.plans[-1]
        self.class_start = block(self.pad.widths_padded[-1], shape[last.out_cols],
                                 coords[last.out_cols]).start
        self.labels = torch.from_numpy(shard.labels).to(device)
        self.masks = {k: torch.from_numpy(m).to(device) for k, m in shard.masks.items()}
        self.counts = dict(shard.mask_counts)

    def _sparse_blocks(self, shard: RankShard, engine: EngineConfig):
        """One SparseBlock per distinct block of Â this rank uses, and its forward row chunks.

        Blocks are identified by (matrix, row range, column range): layers of the none/single
        permutations use one matrix (Â1 = Â2), so equal blocks are stored once. When Â is
        symmetric, the transpose of a block is the block at the swapped ranges of the other
        matrix (Â1ᵀ = Â2); if this rank holds it anyway, the backward reuses it.
        """
        shape, coords, n = self.comm.grid.shape, self.comm.grid.coords, shard.nodes_padded
        same = shard.perm in ("none", "single")

        def ident(plan):
            rows = block(n, shape[plan.a_rows], coords[plan.a_rows])
            cols = block(n, shape[plan.a_cols], coords[plan.a_cols])
            return (1 if same else plan.adj, rows.start, rows.stop, cols.start, cols.stop)

        mats, key_of = {}, {}
        for plan in self.plans:
            key_of[block_key(plan)] = ident(plan)
            mats.setdefault(ident(plan), shard.blocks[block_key(plan)])
        transposes = {}
        if shard.meta.get("symmetric", False):
            for k, r0, r1, c0, c1 in mats:
                t = (k if same else 3 - k, c0, c1, r0, r1)
                if t in mats:
                    transposes[(k, r0, r1, c0, c1)] = t
        device = self.comm.grid.device
        built = build_blocks(mats, transposes, device, engine.spmm_backend)
        blocks = {key: built[i] for key, i in key_of.items()}
        chunks = {}
        for key, i in key_of.items():
            m = mats[i]
            if engine.agg_chunks <= 1:
                chunks[key] = [built[i]]
                continue
            bounds = np.linspace(0, m.shape[0], engine.agg_chunks + 1).astype(int)
            chunks[key] = [SparseBlock.build(m[a:b], device, engine.spmm_backend, transpose=False)
                           for a, b in zip(bounds[:-1], bounds[1:]) if b > a]
        return blocks, chunks

    def _padded_weights(self) -> list[torch.Tensor]:
        out = []
        for l, w in enumerate(glorot_weights(self.seed, self.widths)):
            full = torch.zeros(self.pad.widths_padded[l], self.pad.widths_padded[l + 1])
            full[: w.shape[0], : w.shape[1]] = w
            out.append(full)
        return out

    def forward(self, step: int | None = None) -> torch.Tensor:
        """Logits block (rows cut by the last layer's out_rows, classes by its out_cols).
        Dropout is applied when training, with masks keyed by ``step``."""
        H = self.features
        for l, layer in enumerate(self.layers):
            H = layer(H, step)
            if l < len(self.layers) - 1:
                H = relu(H, inplace=True)  # H's only use; saves a copy per layer
        return H

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
        l = int(name[1:]) if name[0] in "Wb" else 0
        plan = self.plans[l]
        rows, cols = weight_block(plan, shape, coords, self.pad.widths_padded[l],
                                  self.pad.widths_padded[l + 1])
        if name[0] == "W":
            return (rows, cols), True
        if name[0] == "b":  # replicated over out_rows and out_replicated: coordinate 0 speaks
            return (cols,), coords[plan.out_rows] == 0 and coords[plan.out_replicated] == 0
        raise KeyError(name)

    def named_shards(self) -> dict[str, nn.Parameter]:
        """Trainable shards by grid-independent name."""
        out = {}
        for l, layer in enumerate(self.layers):
            out[f"W{l}"] = layer.W
            if layer.b is not None:
                out[f"b{l}"] = layer.b
        if self.cfg.learnable_features:
            out["features"] = self.features
        return out

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
        l = int(name[1:])
        dims = (self.pad.widths_padded[l], self.pad.widths_padded[l + 1])
        full = torch.zeros(dims if name[0] == "W" else dims[1:], device=shard.device)
        if speaks:
            full[index] = shard.detach()
        dist.all_reduce(full)
        real = (self.widths[l], self.widths[l + 1]) if name[0] == "W" else (self.widths[l + 1],)
        return full[tuple(slice(0, r) for r in real)]

    def shard_of(self, name: str, full: torch.Tensor) -> torch.Tensor:
        """This rank's shard of the full unpadded tensor ``full``."""
        full = full.to(self.comm.grid.device)
        if name == "features":
            ids, cols = self._feature_rows()
            padded = torch.zeros(len(ids), self.pad.widths_padded[0], device=full.device)
            real = ids >= 0
            padded[real, : full.shape[1]] = full[ids[real]]
            return padded[:, cols].clone()
        l = int(name[1:])
        dims = (self.pad.widths_padded[l], self.pad.widths_padded[l + 1])
        padded = torch.zeros(dims if name[0] == "W" else dims[1:], device=full.device)
        padded[tuple(slice(0, s) for s in full.shape)] = full
        return padded[self._placement(name)[0]].clone()
