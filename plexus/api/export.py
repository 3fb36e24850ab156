"""Unsharded weights under the parameter names of the matching PyG model, so that a plain PyG
model loads them for inference without Plexus.

The PyG model is a ``torch.nn.Module`` with a ``ModuleList`` ``convs`` of the kind's layer
(GCNConv, SAGEConv, GINConv with ``Sequential(Linear, ReLU, Linear)``, GATConv, or Linear for
the MLP) and, with BatchNorm, a ``ModuleList`` ``bns`` of BatchNorm1d, applied as conv → (+
input, residual) → bn → ReLU for every layer but the last
(`plexus.testing.pyg_reference.PygStack` is that model). The names come from the operators'
declarations (`plexus.core.ops`): each parameter's name under its PyG module, the module's
prefix per stage of a layer from the model kind (``convs.{l}.``, GIN's second stage
``convs.{l}.nn.2.``), BatchNorm's under ``bns.{l}.``; `pyg_names` lists them.

The file (``torch.save``; loads with ``torch.load(weights_only=True)``) holds: ``format``,
``kind``, ``state_dict`` (PyG names), ``config`` (the `ModelConfig` as a dict), ``pyg`` (how to
build the PyG model: class, widths, options, each layer's keyword arguments), and ``features``
when they were trained.
"""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path

import torch

from plexus.core.atomic import atomic_file
from plexus.core.model import ModelConfig
from plexus.core.ops import KINDS, NORM_OP, OPERATORS, Param

from .model import GraphModel

FORMAT = "plexus-weights/1"
NORM_PREFIX = "bns.{l}."  # BatchNorm1d after a layer, whatever the kind


def _to_pyg(decl: Param, tensor: torch.Tensor) -> torch.Tensor:
    """Our tensor in PyG's layout: W is [in, out] (H·W), torch.nn.Linear stores [out, in];
    attention vectors are (1, heads, width)."""
    t = tensor.detach().cpu()
    if decl.transform == "T":
        return t.T.contiguous()
    if decl.transform == "heads":
        return t.reshape(1, decl.heads, -1).contiguous()
    return t.contiguous()


def _declared(config: ModelConfig, num_features: int, num_classes: int, extras: bool = False
              ) -> list[tuple[str, str, Param]]:
    """(engine name, PyG name, declaration) of every parameter and statistic; with ``extras``
    what PyG's modules hold and Plexus does not (`plexus.core.ops.Operator.pyg_extras`)."""
    kind = KINDS[config.kind]
    widths = config.widths(num_features, num_classes)
    out = []
    for p in config.plans(num_features, num_classes):
        d_in, d_out = widths[p.index], widths[p.index + 1]
        prefix = kind.pyg_prefixes[p.index % config.stages_per_layer].format(l=p.layer)
        op = OPERATORS[p.op]
        decls = op.pyg_extras(p, d_in, d_out, config.bias) if extras else op.params(p, d_in, d_out)
        out += [(decl.name(p.index), prefix + decl.pyg, decl) for decl in decls]
        if p.norm and not extras:
            out += [(decl.name(p.index), NORM_PREFIX.format(l=p.layer) + decl.pyg, decl)
                    for decl in OPERATORS[NORM_OP].params(p, d_in, d_out)]
    return out


def pyg_names(config: ModelConfig, num_features: int, num_classes: int) -> dict[str, str]:
    """Engine name ("W0", "att_src1", "mean0", ...) -> PyG name of every parameter and running
    statistic of the model."""
    return {name: pyg for name, pyg, _ in _declared(config, num_features, num_classes)}


def pyg_state_dict(full: dict[str, torch.Tensor], config: ModelConfig, num_features: int,
                   num_classes: int, epochs: int = 0) -> dict[str, torch.Tensor]:
    """Rename (and transpose or reshape where PyG's layout differs) full engine tensors to PyG
    names. ``features`` (trained input features) is not a PyG parameter and is left out. What
    PyG's modules hold and Plexus does not is filled in with its initial value: the bias of a
    layer before a BatchNorm (zero: β is the bias there), GIN's fixed ε (zero) and BatchNorm's
    ``num_batches_tracked`` (``epochs``). Raises ValueError for a tensor the declarations do not
    name."""
    declared = {name: (pyg, decl) for name, pyg, decl in
                _declared(config, num_features, num_classes)}
    out = {}
    for name, tensor in full.items():
        if name == "features":
            continue
        if name not in declared:
            raise ValueError(f"parameter {name!r} of a {config.kind} model has no PyG name; "
                             "its operator's declaration (plexus.core.ops) must list it")
        pyg, decl = declared[name]
        out[pyg] = _to_pyg(decl, tensor)
    for _, pyg, decl in _declared(config, num_features, num_classes, extras=True):
        out.setdefault(pyg, torch.zeros(decl.shape) if decl.init == "zeros"
                       else torch.ones(decl.shape))
    for p in config.plans(num_features, num_classes):
        if p.norm:
            out[NORM_PREFIX.format(l=p.layer) + "num_batches_tracked"] = torch.tensor(
                epochs, dtype=torch.long)
    return out


def pyg_layers(config: ModelConfig, num_features: int, num_classes: int) -> list[dict]:
    """Each layer's PyG constructor arguments: ``in_channels``, ``out_channels`` (per head for
    GAT) and the kind's own (`plexus.core.ops.base.ModelKind.pyg_kwargs`)."""
    kind, widths = KINDS[config.kind], config.layer_widths(num_features, num_classes)
    out = []
    for l in range(config.num_layers):
        kwargs = kind.pyg_kwargs(config, l, widths[l], widths[l + 1])
        heads = kwargs.get("heads", 1)
        per = widths[l + 1] // heads if kwargs.get("concat", True) else widths[l + 1]
        out.append({"in_channels": widths[l], "out_channels": per, **kwargs})
    return out


def full_weights(model: GraphModel) -> dict[str, torch.Tensor]:
    """Every trainable tensor and BatchNorm statistic, full and unpadded, on the CPU, by engine
    name (collective: every rank gets them)."""
    return {name: model.full_parameter(name, p).cpu()
            for name, p in model.named_tensors().items()}


def export_payload(full: dict[str, torch.Tensor], config: ModelConfig, num_features: int,
                   num_classes: int, extra: dict | None = None) -> dict:
    """What `save_weights` writes for the full engine tensors ``full``."""
    kind = config.kind
    epochs = int((extra or {}).get("epoch") or 0)
    payload = {
        "format": FORMAT, "kind": kind,
        "state_dict": pyg_state_dict(full, config, num_features, num_classes, epochs),
        "config": asdict(config),
        "pyg": {"class": KINDS[kind].pyg_class, "num_layers": config.num_layers,
                "in_channels": num_features, "hidden_channels": config.hidden,
                "out_channels": num_classes, "bias": config.bias,
                "widths": config.layer_widths(num_features, num_classes),
                "norm": "BatchNorm1d" if config.norm == "batch" else None,
                "residual": config.residual, "train_eps": config.train_eps,
                "layers": pyg_layers(config, num_features, num_classes),
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
