"""Unsharded weights under the parameter names of the matching PyG model, so that a plain PyG
model loads them for inference without Plexus.

The PyG model is a ``torch.nn.Module`` with a ``ModuleList`` ``convs`` of the kind's layer
(GCNConv, SAGEConv, GINConv with ``Sequential(Linear, ReLU, Linear)``, or Linear for the MLP) and,
with BatchNorm, a ``ModuleList`` ``bns`` of BatchNorm1d, applied as conv → (+ input, residual) →
bn → ReLU for every layer but the last (`plexus.testing.pyg_reference.PygStack` is that model).
`PYG_NAMES` is the one table of names: per model kind, (engine parameter kind, stage within the
layer) → (PyG name template, transform); ``{l}`` is the GNN layer. BatchNorm's entries are shared
by all kinds (`NORM_NAMES`).

The file (``torch.save``; loads with ``torch.load(weights_only=True)``) holds: ``format``,
``kind``, ``state_dict`` (PyG names), ``config`` (the `ModelConfig` as a dict), ``pyg`` (how to
build the PyG model: class, widths, options), and ``features`` when they were trained.
"""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path
from typing import Callable

import torch

from plexus.core.atomic import atomic_file
from plexus.engine.config import ModelConfig
from plexus.engine.seeding import split_name

from .model import GraphModel

FORMAT = "plexus-weights/1"

Transform = Callable[[torch.Tensor], torch.Tensor]


def _same(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous()


def _transposed(t: torch.Tensor) -> torch.Tensor:
    # our W is [in, out] (H·W); torch.nn.Linear stores [out, in]
    return t.T.contiguous()


#: model kind -> {(engine parameter kind, stage within the layer): (PyG name, transform)}
PYG_NAMES: dict[str, dict[tuple[str, int], tuple[str, Transform]]] = {
    "gcn": {("W", 0): ("convs.{l}.lin.weight", _transposed),  # GCNConv
            ("b", 0): ("convs.{l}.bias", _same)},
    "sage": {("W", 0): ("convs.{l}.lin_l.weight", _transposed),  # SAGEConv(aggr="mean")
             ("b", 0): ("convs.{l}.lin_l.bias", _same),
             ("Wr", 0): ("convs.{l}.lin_r.weight", _transposed)},
    "gin": {("W", 0): ("convs.{l}.nn.0.weight", _transposed),  # GINConv(Linear, ReLU, Linear)
            ("b", 0): ("convs.{l}.nn.0.bias", _same),
            ("W", 1): ("convs.{l}.nn.2.weight", _transposed),
            ("b", 1): ("convs.{l}.nn.2.bias", _same),
            ("eps", 0): ("convs.{l}.eps", _same)},
    "mlp": {("W", 0): ("convs.{l}.weight", _transposed),  # Linear
            ("b", 0): ("convs.{l}.bias", _same)},
}
#: BatchNorm1d after a layer, whatever the kind
NORM_NAMES = {"gamma": "bns.{l}.weight", "beta": "bns.{l}.bias", "mean": "bns.{l}.running_mean",
              "var": "bns.{l}.running_var"}

#: model kind -> the PyG layer class its stack is made of
PYG_CLASSES = {"gcn": "GCNConv", "sage": "SAGEConv", "gin": "GINConv", "mlp": "Linear"}


def model_kind(config: ModelConfig) -> str:
    """The model kind of ``config``."""
    return config.kind


def pyg_state_dict(full: dict[str, torch.Tensor], config: ModelConfig, num_features: int,
                   num_classes: int, epochs: int = 0) -> dict[str, torch.Tensor]:
    """Rename (and transpose where PyG's layout differs) full engine tensors to PyG names.
    ``features`` (trained input features) is not a PyG parameter and is left out. What PyG's
    modules hold and Plexus does not is filled in: the bias of a layer before a BatchNorm (zero:
    β is the bias there), GIN's fixed ε (zero) and BatchNorm's ``num_batches_tracked``
    (``epochs``). Raises ValueError for a name the table does not cover."""
    kind = model_kind(config)
    rules = PYG_NAMES[kind]
    plans = config.plans(num_features, num_classes)
    widths = config.widths(num_features, num_classes)
    step = config.stages_per_layer
    out = {}
    for name, tensor in full.items():
        if name == "features":
            continue
        what, s = split_name(name)
        l = plans[s].layer
        if what in NORM_NAMES:
            out[NORM_NAMES[what].format(l=l)] = tensor.detach().cpu().contiguous()
            continue
        if (what, s % step) not in rules:
            raise ValueError(f"parameter {name!r} of a {kind} model has no PyG name; add it to "
                             "plexus.api.export.PYG_NAMES")
        template, transform = rules[(what, s % step)]
        out[template.format(l=l)] = transform(tensor.detach().cpu())
    for p in plans:  # what PyG's modules hold beyond Plexus's parameters
        k, l = p.index % step, p.layer
        bias = rules.get(("b", k))
        if config.bias and bias and bias[0].format(l=l) not in out:
            out[bias[0].format(l=l)] = torch.zeros(widths[p.index + 1])
        eps = rules.get(("eps", k))
        if p.root == "gin" and eps and eps[0].format(l=l) not in out:
            out[eps[0].format(l=l)] = torch.zeros(1)
        if p.norm:
            out[f"bns.{l}.num_batches_tracked"] = torch.tensor(epochs, dtype=torch.long)
    return out


def full_weights(model: GraphModel) -> dict[str, torch.Tensor]:
    """Every trainable tensor and BatchNorm statistic, full and unpadded, on the CPU, by engine
    name (collective: every rank gets them)."""
    return {name: model.full_parameter(name, p).cpu()
            for name, p in model.named_tensors().items()}


def export_payload(full: dict[str, torch.Tensor], config: ModelConfig, num_features: int,
                   num_classes: int, extra: dict | None = None) -> dict:
    """What `save_weights` writes for the full engine tensors ``full``."""
    kind = model_kind(config)
    epochs = int((extra or {}).get("epoch") or 0)
    payload = {
        "format": FORMAT, "kind": kind,
        "state_dict": pyg_state_dict(full, config, num_features, num_classes, epochs),
        "config": asdict(config),
        "pyg": {"class": PYG_CLASSES[kind], "num_layers": config.num_layers,
                "in_channels": num_features, "hidden_channels": config.hidden,
                "out_channels": num_classes, "bias": config.bias,
                "widths": config.layer_widths(num_features, num_classes),
                "norm": "BatchNorm1d" if config.norm == "batch" else None,
                "residual": config.residual, "train_eps": config.train_eps,
                "activation": "relu", "container": "convs"},
        **(extra or {}),
    }
    if "features" in full:
        payload["features"] = full["features"].detach().cpu()
    return payload


def write_payload(path: str | os.PathLike, payload: dict) -> Path:
    """Write an export file atomically (never half-written); returns its path."""
    target = Path(path).expanduser()
    with atomic_file(target) as f:
        torch.save(payload, f)
    return target


def save_weights(model: GraphModel, path: str | os.PathLike, extra: dict | None = None
                 ) -> Path | None:
    """Collective: assemble the unsharded weights; rank 0 writes them to ``path`` (atomically)
    under PyG's names with the model configuration, plus ``extra`` (plain values). Returns the
    path on rank 0, None elsewhere."""
    full = full_weights(model)
    if model.grid.rank != 0:
        return None
    payload = export_payload(full, model.config, model.num_features, model.num_classes, extra)
    return write_payload(path, payload)
