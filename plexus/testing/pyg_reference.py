"""PyG's layer stacks of the models Plexus trains (GCNConv with BatchNorm1d and residual
connections, SAGEConv, GINConv, GATConv, Linear) and a copy of a serial Plexus model's weights into
them: the reference that tests and the accuracy benchmark compare with. The stacks are PyG's
public modules built by the engine's one builder (`plexus.engine.pygmodel`, which
`plexus.load_pyg` uses too); the weights are copied by module attribute here, independently of
the exporter's parameter names, so an export and this copy meet only through the weights.
Needs ``torch_geometric`` (the test extra).
"""

from __future__ import annotations

import torch

from plexus.core.model import ModelConfig
from plexus.engine.pygmodel import PygModel, pyg_spec
from plexus.engine.serial import SerialModel


class PygStack(PygModel):
    """PyG's stack of ``cfg`` for ``f`` features and ``c`` classes: conv → (BatchNorm1d) → ReLU
    per layer, the last layer bare; residual adds the input; dropout as ``cfg`` places it.
    Built by the engine's one PyG builder (`plexus.engine.pygmodel`), which exports load into."""

    def __init__(self, cfg: ModelConfig, f: int, c: int) -> None:
        super().__init__(pyg_spec(cfg, f, c))
        self.cfg = cfg


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
