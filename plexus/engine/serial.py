"""The serial reference model: plain full-graph PyTorch, the oracle for every distributed test.

It takes the same `ModelConfig`, the same seeded initial parameters and the same
grid-independent dropout masks as the distributed model, so the two agree to float rounding; it in
turn equals PyG's layers of the same names (tests/engine/test_pyg_reference.py).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from plexus_partition.model.ops import NORM_OP, OPERATORS
from plexus_datasets.graph import Graph

from .config import ModelConfig
from .stage import serial_of
from .loss import TaskMetrics
from .rocauc import serial_rocauc
from .masks import dropout, edge_keep
from .primitives import activation_module
from .seeding import StepCounter, initial_parameters, initial_stats, parameter_layer


def sparse_tensor(adj_hat) -> torch.Tensor:
    """scipy sparse -> torch COO (autograd-friendly for the dense operand)."""
    coo = adj_hat.tocoo()
    idx = torch.from_numpy(np.vstack([coo.row, coo.col]).astype(np.int64))
    return torch.sparse_coo_tensor(idx, torch.from_numpy(coo.data.astype(np.float32)),
                                   coo.shape).coalesce()


class SerialModel(TaskMetrics, nn.Module):
    """The model of ``cfg`` on one process, stage by stage: each stage's operator's serial
    reference (`plexus.engine.stage`, ``serial_of``), its bias, BatchNorm, dropout and
    activation (``cfg.activation``, torch's module of its name)."""

    def __init__(self, graph: Graph, cfg: ModelConfig, seed: int, adj_hat=None) -> None:
        super().__init__()
        self.cfg, self.seed = cfg, seed
        self.steps = StepCounter()
        self.act = activation_module(cfg.activation)
        f, c = graph.num_features, graph.num_classes
        self.num_classes, self.graph_name = c, graph.name  # for the trainer's checks
        self.plans = cfg.plans(f, c)
        self.widths = cfg.widths(f, c)
        self.orders = [p.order for p in self.plans]
        self.adj = sparse_tensor(adj_hat if adj_hat is not None
                                 else graph.normalized(cfg.aggregation))
        init = initial_parameters(seed, self.plans, self.widths)
        self.params = nn.ParameterDict({k: nn.Parameter(v) for k, v in init.items()})
        self._stats = initial_stats(self.plans, self.widths)
        for name, value in self._stats.items():
            self.register_buffer(name, value)
        feats = torch.from_numpy(graph.features)
        if cfg.learnable_features:
            self.features = nn.Parameter(feats.clone())
        else:
            self.register_buffer("features", feats, persistent=False)
        self.labels = torch.from_numpy(graph.labels)
        self.masks = {k: torch.from_numpy(getattr(graph, f"{k}_mask")) for k in ("train", "val", "test")}
        self.ids = torch.arange(graph.num_nodes)
        # the earlier outputs the stage running now reads (`KindSpec.reads`), by stage
        self.outputs: dict[int, torch.Tensor] = {}

    def param(self, kind: str, s: int) -> torch.Tensor | None:
        """Parameter ``kind`` of stage ``s`` ("W", "b", ...), None if the stage has none."""
        key = f"{kind}{s}"
        return self.params[key] if key in self.params else None

    def edge_keep(self, step: int, layer: int, heads: int, dst: torch.Tensor,
                  src: torch.Tensor, rate: float) -> torch.Tensor:
        """The engine's attention-dropout keep mask of edges src -> dst (`masks.edge_keep`),
        for a kind's serial reference."""
        return edge_keep(self.seed, step, layer, heads, dst, src, rate)

    def stat(self, kind: str, s: int) -> torch.Tensor:
        """Running statistic ``kind`` of stage ``s`` ("mean", "var")."""
        return getattr(self, f"{kind}{s}")

    def stage(self, p, H: torch.Tensor, step: int | None = None) -> torch.Tensor:
        """One stage without dropout and activation: its operator, bias, BatchNorm."""
        OUT = serial_of(p.op)(self, p, H, step)
        b = None if OPERATORS[p.op].own_bias else self.param("b", p.index)
        if b is not None:
            OUT = OUT + b
        if p.norm:
            OUT = serial_of(NORM_OP)(self, p, OUT)
        return OUT

    def forward(self, step: int | None = None, embeddings: bool = False) -> torch.Tensor:
        """Logits (N × classes); with ``embeddings`` the input of the last layer instead.
        Without ``step``, a training call takes the next step of an internal counter."""
        step = self.steps(step, self.training)
        H = self.features
        read = {k for p in self.plans for k in OPERATORS[p.op].reads(p)}
        kept: dict[int, torch.Tensor] = {}
        for p in self.plans:
            if embeddings and p.index == self.cfg.last_layer_stage:
                return H
            if self.training and self.cfg.drops_input(p):
                H = dropout(H, self.seed, step, p.layer, self.ids, 0, self.cfg.dropout)
            self.outputs = {k: kept[k] for k in OPERATORS[p.op].reads(p)}
            H = self.stage(p, H, step)
            if self.cfg.activates(p):
                H = self.act(H)
            if p.index in read:
                kept[p.index] = H
        return H

    def loss(self, logits: torch.Tensor, mask: str | torch.Tensor = "train") -> torch.Tensor:
        """Mean cross-entropy over the nodes of ``mask`` (a name or a bool tensor over nodes);
        multi-label: mean binary cross-entropy with logits over their labelled (node, task)
        entries."""
        m = self.masks[mask] if isinstance(mask, str) else mask
        if self.multilabel:
            known = m[:, None] & (self.labels >= 0)
            return F.binary_cross_entropy_with_logits(logits[known], self.labels[known].float())
        return F.cross_entropy(logits[m], self.labels[m])

    def task_metrics(self, logits: torch.Tensor) -> dict[str, np.ndarray]:
        """Multi-label: every task's ROC-AUC (NaN where undefined) on each mask."""
        scores, labels = logits.detach().numpy(), self.labels.numpy()
        return {k: serial_rocauc(labels[m.numpy()], scores[m.numpy()])
                for k, m in self.masks.items()}

    def accuracy(self, logits: torch.Tensor) -> dict[str, float]:
        """Accuracy on the train/val/test masks."""
        pred = logits.argmax(dim=1)
        return {k: int((pred[m] == self.labels[m]).sum()) / max(int(m.sum()), 1)
                for k, m in self.masks.items()}

    def predict(self, logits: torch.Tensor) -> torch.Tensor:
        """Predicted class per node (multi-label: 1 where a task's logit is positive)."""
        if self.multilabel:
            return (logits > 0).to(torch.int8)
        return logits.argmax(dim=1)

    def named_shards(self) -> dict[str, nn.Parameter]:
        """Trainable parameters by the names the distributed model uses."""
        out: dict[str, nn.Parameter] = dict(self.params.items())
        if self.cfg.learnable_features:
            out["features"] = self.features
        return out

    def named_stats(self) -> dict[str, torch.Tensor]:
        """BatchNorm running statistics by name."""
        return {name: getattr(self, name) for name in self._stats}

    def parameter_layer(self, name: str) -> int | None:
        """The GNN layer of a parameter (None: the input features)."""
        return parameter_layer(self.plans, name)

    def grad_norm(self) -> torch.Tensor:
        """The 2-norm of the whole gradient."""
        grads = [p.grad for p in self.named_shards().values() if p.grad is not None]
        return (torch.nn.utils.get_total_norm(grads, 2.0) if grads
                else torch.zeros(()))

    def full_parameter(self, name: str, shard: torch.Tensor) -> torch.Tensor:
        """The serial model's tensors are already full: a copy (as the distributed model's is a
        new tensor), so a state taken now does not follow later steps."""
        return shard.detach().clone()

    def shard_of(self, name: str, full: torch.Tensor) -> torch.Tensor:
        """The serial model's tensors are already full."""
        return full.clone()
