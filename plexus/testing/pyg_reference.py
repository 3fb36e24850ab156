"""PyG's layer stacks of the models Plexus trains (each kind's declared PyG layer, BatchNorm1d and
residual connections) and a copy of a serial Plexus model's weights into them: the reference
that tests and the accuracy benchmark compare with. The stacks are PyG's public modules built by
the engine's one builder (`plexus.engine.pygmodel`, which `plexus.load_pyg` uses too); the
weights are copied under the PyG names the declarations give (`plexus_partition.model.ops`), so a
new kind needs nothing here. Needs ``torch_geometric`` (the test extra).
"""

from __future__ import annotations

import torch

from plexus.api.export import declared_tensors, to_pyg
from plexus_partition.model.model import ModelConfig
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
    """Serial parameters into the PyG stack under the names the declarations give them
    (`plexus.api.export.declared_tensors`: each operator's PyG name under its kind's module
    prefix, in PyG's layout: `plexus.api.export.to_pyg`);
    returns {serial name: the PyG tensor it became}. PyG's parameters that Plexus has none of
    (a bias before BatchNorm: β is the bias there) are zeroed. A wrong declared name cannot
    pass: it names no PyG tensor, or the outputs differ."""
    names = {name: (pyg, decl) for name, pyg, decl in
             declared_tensors(serial.cfg, serial.widths[0], serial.widths[-1])}
    targets = {**dict(stack.named_parameters()), **dict(stack.named_buffers())}
    pairs = {}
    with torch.no_grad():
        for name, value in serial.params.items():
            pyg, decl = names[name]
            target = targets[pyg]
            target.copy_(to_pyg(decl, value).reshape(target.shape))  # Linear's: [out, in]
            pairs[name] = target
        paired = {id(t) for t in pairs.values()}
        for target in stack.parameters():
            if id(target) not in paired:
                target.zero_()
    return pairs
