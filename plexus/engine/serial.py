"""The serial reference GCN: plain full-graph PyTorch, the oracle for every distributed test.

It takes the same `ModelConfig`, the same seeded Glorot weights and the same grid-independent
dropout masks as the distributed model, so the two agree to float rounding.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from plexus.datasets.graph import Graph, gcn_normalize

from .config import ModelConfig
from .seeding import dropout, glorot_weights


def sparse_tensor(adj_hat) -> torch.Tensor:
    """scipy sparse -> torch COO (autograd-friendly for the dense operand)."""
    coo = adj_hat.tocoo()
    idx = torch.from_numpy(np.vstack([coo.row, coo.col]).astype(np.int64))
    return torch.sparse_coo_tensor(idx, torch.from_numpy(coo.data.astype(np.float32)),
                                   coo.shape).coalesce()


class SerialGCN(nn.Module):
    """GCN(Â, X) on one process: H' = ReLU(Â·dropout(H)·W + b), no ReLU on the last layer."""

    def __init__(self, graph: Graph, cfg: ModelConfig, seed: int, adj_hat=None) -> None:
        super().__init__()
        self.cfg, self.seed = cfg, seed
        orders = cfg.orders(graph.num_features, graph.num_classes)
        self.orders = orders
        self.adj = sparse_tensor(adj_hat if adj_hat is not None
                                 else gcn_normalize(graph.adj, graph.directed))
        widths = cfg.widths(graph.num_features, graph.num_classes)
        self.W = nn.ParameterList(nn.Parameter(w) for w in glorot_weights(seed, widths))
        self.b = nn.ParameterList(nn.Parameter(torch.zeros(d)) for d in widths[1:]) if cfg.bias \
            else None
        feats = torch.from_numpy(graph.features)
        if cfg.learnable_features:
            self.features = nn.Parameter(feats.clone())
        else:
            self.register_buffer("features", feats, persistent=False)
        self.labels = torch.from_numpy(graph.labels)
        self.masks = {k: torch.from_numpy(getattr(graph, f"{k}_mask")) for k in ("train", "val", "test")}
        self.ids = torch.arange(graph.num_nodes)

    def forward(self, step: int | None = None) -> torch.Tensor:
        """Logits (N × classes)."""
        H = self.features
        for l, W in enumerate(self.W):
            if self.training and self.cfg.dropout > 0:
                H = dropout(H, self.seed, step or 0, l, self.ids, 0, self.cfg.dropout)
            # Both product orders are the same math; follow the configured one for like rounding.
            H = torch.sparse.mm(self.adj, H) @ W if self.orders[l] == "agg" \
                else torch.sparse.mm(self.adj, H @ W)
            if self.b is not None:
                H = H + self.b[l]
            if l < len(self.W) - 1:
                H = F.relu(H)
        return H

    def loss(self, logits: torch.Tensor, mask: str = "train") -> torch.Tensor:
        """Mean cross-entropy over the nodes of ``mask``."""
        m = self.masks[mask]
        return F.cross_entropy(logits[m], self.labels[m])

    def accuracy(self, logits: torch.Tensor) -> dict[str, float]:
        """Accuracy on the train/val/test masks."""
        pred = logits.argmax(dim=1)
        return {k: int((pred[m] == self.labels[m]).sum()) / max(int(m.sum()), 1)
                for k, m in self.masks.items()}

    def predict(self, logits: torch.Tensor) -> torch.Tensor:
        """Predicted class per node."""
        return logits.argmax(dim=1)

    def named_shards(self) -> dict[str, nn.Parameter]:
        """Trainable parameters by the names the distributed model uses."""
        out: dict[str, nn.Parameter] = {}
        for l, W in enumerate(self.W):
            out[f"W{l}"] = W
            if self.b is not None:
                out[f"b{l}"] = self.b[l]
        if self.cfg.learnable_features:
            out["features"] = self.features
        return out

    def full_parameter(self, name: str, shard: torch.Tensor) -> torch.Tensor:
        """The serial model's tensors are already full."""
        return shard.detach()

    def shard_of(self, name: str, full: torch.Tensor) -> torch.Tensor:
        """The serial model's tensors are already full."""
        return full.clone()
