"""PyG's layer stacks of the models Plexus trains (GCNConv with BatchNorm1d and residual
connections, SAGEConv, GINConv, GATConv, Linear), built from PyG's public modules, and a copy of a serial
Plexus model's weights into them: the reference that tests and the accuracy benchmark compare with.
Written independently of Plexus's exporter, so the two meet only through the weights.
Needs ``torch_geometric`` (the test extra).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import torch_geometric.nn as pyg
from torch import nn

from plexus.engine.config import ModelConfig
from plexus.engine.serial import SerialModel


class PygStack(nn.Module):
    """PyG's stack of ``cfg``: conv → (BatchNorm1d) → ReLU per layer, the last layer bare; residual adds the input."""

    def __init__(self, cfg: ModelConfig, f: int, c: int) -> None:
        super().__init__()
        self.cfg = cfg
        widths = cfg.layer_widths(f, c)
        convs = []
        for l, (d_in, d_out) in enumerate(zip(widths[:-1], widths[1:])):
            if cfg.kind == "gcn":
                convs.append(pyg.GCNConv(d_in, d_out, bias=cfg.bias))
            elif cfg.kind == "sage":
                convs.append(pyg.SAGEConv(d_in, d_out, aggr="mean", bias=cfg.bias))
            elif cfg.kind == "gin":
                mlp = nn.Sequential(nn.Linear(d_in, cfg.hidden), nn.ReLU(),
                                    nn.Linear(cfg.hidden, d_out))
                convs.append(pyg.GINConv(mlp, train_eps=True))
            elif cfg.kind == "gat":  # hidden layers concatenate their heads, the last averages
                heads, concat = cfg.heads_of(l), l < cfg.num_layers - 1
                convs.append(pyg.GATConv(d_in, d_out // heads if concat else d_out, heads=heads,
                                         concat=concat, negative_slope=cfg.negative_slope,
                                         dropout=cfg.attn_dropout, bias=cfg.bias))
            else:
                convs.append(nn.Linear(d_in, d_out, bias=cfg.bias))
        self.convs = nn.ModuleList(convs)
        self.bns = nn.ModuleList(nn.BatchNorm1d(d) for d in widths[1:-1]) \
            if cfg.norm == "batch" else None

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor,
                edge_weight: torch.Tensor | None = None) -> torch.Tensor:
        """The logits; ``edge_weight`` goes to GCNConv (the other layers take none)."""
        last = len(self.convs) - 1
        for l, conv in enumerate(self.convs):
            if l > 0 or self.cfg.input_dropout:  # dropout as ModelConfig places it
                x = F.dropout(x, self.cfg.dropout, self.training)
            if self.cfg.kind == "mlp":
                h = conv(x)
            elif edge_weight is not None:
                if self.cfg.kind != "gcn":
                    raise ValueError(f"only GCNConv takes edge weights, not {self.cfg.kind}")
                h = conv(x, edge_index, edge_weight)
            else:
                h = conv(x, edge_index)
            if self.cfg.residual and h.shape == x.shape:
                h = h + x
            if l < last:
                h = self.bns[l](h) if self.bns is not None else h
                h = F.relu(h)
            x = h
        return x


def copy_weights(stack: PygStack, serial: SerialModel) -> dict[str, torch.Tensor]:
    """Serial parameters into the PyG stack; returns {serial name: the PyG tensor it became}."""
    p, cfg, pairs = serial.params, serial.cfg, {}

    def put(target: torch.Tensor, name: str, transpose: bool = False) -> None:
        if name in p:
            with torch.no_grad():
                target.copy_(p[name].T if transpose else p[name].reshape(target.shape))
            pairs[name] = target
        else:  # no such parameter in Plexus (a bias before BatchNorm): PyG's stays zero
            with torch.no_grad():
                target.zero_()

    step = cfg.stages_per_layer
    for l, conv in enumerate(stack.convs):
        s = l * step
        if cfg.kind == "gcn":
            put(conv.lin.weight, f"W{s}", True)
            if conv.bias is not None:
                put(conv.bias, f"b{s}")
        elif cfg.kind == "sage":
            put(conv.lin_l.weight, f"W{s}", True)
            put(conv.lin_l.bias, f"b{s}")
            put(conv.lin_r.weight, f"Wr{s}", True)
        elif cfg.kind == "gin":
            put(conv.nn[0].weight, f"W{s}", True)
            put(conv.nn[0].bias, f"b{s}")
            put(conv.nn[2].weight, f"W{s + 1}", True)
            put(conv.nn[2].bias, f"b{s + 1}")
            put(conv.eps, f"eps{s}")
        elif cfg.kind == "gat":
            put(conv.lin.weight, f"W{s}", True)
            put(conv.att_src, f"att_src{s}")
            put(conv.att_dst, f"att_dst{s}")
            if conv.bias is not None:
                put(conv.bias, f"b{s}")
        else:
            put(conv.weight, f"W{s}", True)
            if conv.bias is not None:
                put(conv.bias, f"b{s}")
        if stack.bns is not None and l < len(stack.bns):
            put(stack.bns[l].weight, f"gamma{s + step - 1}")
            put(stack.bns[l].bias, f"beta{s + step - 1}")
    return pairs
