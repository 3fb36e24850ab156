"""Unsharded weights under the parameter names of the matching PyG model, so that a plain PyG
model loads them for inference without Plexus.

`PYG_NAMES` is the one table of names: per model kind, a list of (engine name pattern, PyG name
template, transform). The engine's grid-independent names are those of
`plexus.engine.model.DistributedGCN.named_shards` ("W0", "b0", ...); ``{l}`` is the layer index.
A new model kind adds its row, e.g. SAGEConv's ``convs.{l}.lin_l.weight``/``lin_l.bias``/
``lin_r.weight``, GINConv's ``convs.{l}.nn.0.weight``/``nn.2.weight``/``eps``, and BatchNorm1d's
``bns.{l}.weight``/``bias``/``running_mean``/``running_var``/``num_batches_tracked``.

The file (``torch.save``; loads with ``torch.load(weights_only=True)``) holds: ``format``,
``kind``, ``state_dict`` (PyG names), ``config`` (the `ModelConfig` as a dict), ``pyg`` (how to
build the PyG model: class, widths, options), and ``features`` when they were trained.
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict
from pathlib import Path
from typing import Callable

import torch

from plexus.core.atomic import atomic_file
from plexus.engine.config import ModelConfig

from .model import GraphModel

FORMAT = "plexus-weights/1"

Transform = Callable[[torch.Tensor], torch.Tensor]


def _same(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous()


def _transposed(t: torch.Tensor) -> torch.Tensor:
    # our W is [in, out] (H·W); torch.nn.Linear stores [out, in]
    return t.T.contiguous()


#: model kind -> [(engine name regex with a (?P<l>) layer group, PyG name template, transform)]
PYG_NAMES: dict[str, list[tuple[str, str, Transform]]] = {
    "gcn": [  # torch.nn.ModuleList `convs` of GCNConv(normalize=True, add_self_loops=True)
        (r"W(?P<l>\d+)", "convs.{l}.lin.weight", _transposed),
        (r"b(?P<l>\d+)", "convs.{l}.bias", _same),
    ],
}

#: model kind -> the PyG layer class its stack is made of
PYG_CLASSES = {"gcn": "GCNConv"}


def model_kind(config: ModelConfig) -> str:
    """The model kind of ``config`` ("gcn" for configurations that name none)."""
    return str(getattr(config, "kind", "gcn"))


def pyg_state_dict(full: dict[str, torch.Tensor], kind: str = "gcn") -> dict[str, torch.Tensor]:
    """Rename (and transpose where PyG's layout differs) full engine tensors to PyG names.
    ``features`` (trained input features) is not a PyG parameter and is left out. Raises
    ValueError for a kind or a name the table does not cover."""
    rules = PYG_NAMES.get(kind)
    if rules is None:
        raise ValueError(f"no PyG names for model kind {kind!r} yet (known: "
                         f"{', '.join(PYG_NAMES)}); add its row to plexus.api.export.PYG_NAMES")
    out = {}
    for name, tensor in full.items():
        if name == "features":
            continue
        for pattern, template, transform in rules:
            m = re.fullmatch(pattern, name)
            if m:
                out[template.format(**m.groupdict())] = transform(tensor.detach().cpu())
                break
        else:
            raise ValueError(f"parameter {name!r} of a {kind} model has no PyG name; add it to "
                             "plexus.api.export.PYG_NAMES")
    return out


def full_weights(model: GraphModel) -> dict[str, torch.Tensor]:
    """Every trainable tensor, full and unpadded, on the CPU, by engine name (collective: every
    rank gets them)."""
    return {name: model.full_parameter(name, p).cpu() for name, p in model.named_shards().items()}


def export_payload(full: dict[str, torch.Tensor], config: ModelConfig, num_features: int,
                   num_classes: int, extra: dict | None = None) -> dict:
    """What `save_weights` writes for the full engine tensors ``full``."""
    kind = model_kind(config)
    payload = {
        "format": FORMAT, "kind": kind, "state_dict": pyg_state_dict(full, kind),
        "config": asdict(config),
        "pyg": {"class": PYG_CLASSES.get(kind, kind), "num_layers": config.num_layers,
                "in_channels": num_features, "hidden_channels": config.hidden,
                "out_channels": num_classes, "bias": config.bias,
                "widths": config.widths(num_features, num_classes),
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
