"""The PyG model of a `ModelConfig`: its description, and the ``torch.nn.Module`` built from one.

`pyg_spec` describes the model the way an export records it (the ``pyg`` block of
`plexus.api.export`): every sub-module as its class and constructor arguments, so every width
is written down (GIN's inner MLP included) and the file rebuilds its own model. `PygModel`
builds that description from PyG's public layers (each kind's declared class: GCNConv,
SAGEConv, GINConv around Sequential(Linear, activation, Linear), GATConv, GraphConv; Linear for
the MLP, and for APPNP's and GCNII's Linear layers, with APPNP's propagation in ``props`` and
GCN2Conv reading layer 0's output) in a ``ModuleList`` ``convs``, and
BatchNorm1d in ``bns``, applied as conv → (+ input: residual) → BatchNorm → activation (the
config's: ReLU, ELU, ...) on every layer but the last, dropout on each layer's input as `ModelConfig` places it. It is the one builder
of `plexus.api.load_pyg` and of the reference stacks (`plexus.testing.pyg_reference`).
Describing needs no PyG; building imports ``torch_geometric`` (the test extra) when called.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from plexus_partition.model.model import (ACTIVATION_MODULES, DEFAULT_ACTIVATION, MAX_LAYERS,
                                          ModelConfig)
from plexus_partition.model.ops import KINDS, OPERATORS
from plexus_partition.model.ops.batchnorm import EPS, MOMENTUM

#: The classes a description may name: torch's own modules (the activations' among them), and
#: the PyG layers the model kinds declare (`plexus_partition.model.ops.KINDS`).
TORCH_CLASSES: dict[str, type[nn.Module]] = {
    "Linear": nn.Linear, "BatchNorm1d": nn.BatchNorm1d,
    **{name: getattr(nn, name) for name in ACTIVATION_MODULES.values()}}
PYG_CLASSES = tuple(dict.fromkeys(k.pyg_class for k in KINDS.values()
                                  if k.pyg_class not in TORCH_CLASSES))
#: The PyG layers that take edge weights (the kinds that declare `takes_edge_weights`)
WEIGHTED_CLASSES = frozenset(k.pyg_class for k in KINDS.values() if k.takes_edge_weights)


#: Arguments that choose where and in what a module lives: never a file's to choose
_PLACEMENT = frozenset({"device", "dtype"})
#: The widest width (and most heads) a description may name (a width beyond any GNN's)
MAX_WIDTH = 1 << 24


class PygSpecError(ValueError):
    """A description that is not one of a model this builder makes (a one-line message)."""


def conv_spec(config: ModelConfig, layer: int, d_in: int, d_out: int) -> dict:
    """GNN layer ``layer``'s module, ``d_in`` to ``d_out`` wide (``d_out``: all heads together
    for a GAT layer that concatenates them): its class and every constructor argument."""
    kind = KINDS[config.kind]
    kwargs = kind.pyg_kwargs(config, layer, d_in, d_out)
    if kind.pyg_class == "Linear":
        return {"class": "Linear", "in_features": d_in, "out_features": d_out,
                "bias": config.bias, **kwargs}
    if "nn" in kwargs:  # a layer around its own MLP (GINConv): the widths are the MLP's
        return {"class": kind.pyg_class, **kwargs}
    heads = kwargs.get("heads", 1)
    per_head = d_out // heads if kwargs.get("concat", True) else d_out
    return {"class": kind.pyg_class, "in_channels": d_in, "out_channels": per_head,
            "bias": config.bias, **kwargs}


def pyg_spec(config: ModelConfig, num_features: int, num_classes: int) -> dict:
    """The PyG model of ``config`` for ``num_features`` inputs and ``num_classes`` outputs, as
    plain values (JSON- and ``torch.load(weights_only=True)``-safe): ``layers`` holds per GNN
    layer its ``conv`` module, its ``norm`` module (BatchNorm1d with its width, eps and
    momentum; None on the last layer or without BatchNorm), whether it is ``residual`` and,
    where its kind has them (`ModelKind.pyg_layer`), a ``propagate`` module run on the conv's
    output (APPNP's) and the ``initial`` layer whose output the conv reads too (GCN2Conv's
    x_0); the other keys summarize (``widths``: input, each layer's output; ``stage_widths``:
    every stage's, GIN's inner MLP width included; ``norm``: the config's "batch" or "none")."""
    widths = config.layer_widths(num_features, num_classes)
    plans = config.plans(num_features, num_classes)
    step = config.stages_per_layer
    layers = []
    for l in range(config.num_layers):
        stages = plans[l * step:(l + 1) * step]
        norm = {"class": "BatchNorm1d", "num_features": widths[l + 1], "eps": EPS,
                "momentum": MOMENTUM} if stages[-1].norm else None
        own = KINDS[config.kind].pyg_layer(config, l, widths[l], widths[l + 1]) or {}
        layers.append({"conv": own.get("conv") or conv_spec(config, l, widths[l], widths[l + 1]),
                       "norm": norm,
                       "residual": any(OPERATORS[p.op].adds_input(p) for p in stages),
                       **{k: v for k, v in own.items() if k != "conv" and v is not None}})
    return {"class": KINDS[config.kind].pyg_class, "num_layers": config.num_layers,
            "in_channels": num_features, "hidden_channels": config.hidden,
            "out_channels": num_classes, "bias": config.bias, "widths": widths,
            "stage_widths": config.widths(num_features, num_classes), "norm": config.norm,
            # the flat form's (a kind without them: their defaults), as exports always wrote
            "residual": config.as_dict()["residual"], "train_eps": config.as_dict()["train_eps"],
            "dropout": config.dropout, "input_dropout": config.input_dropout,
            "activation": config.activation, "container": "convs", "norm_container": "bns",
            "layers": layers}


def _torch_geometric_nn() -> Any:
    try:
        import torch_geometric.nn as pyg  # noqa: PLC0415 - optional: only building needs it
    except ImportError:
        raise ImportError("building the PyG model needs torch_geometric; install it with "
                          "pip install torch_geometric (or plexus's test extra)") from None
    return pyg


def build_module(desc: Mapping[str, Any]) -> nn.Module:
    """The module one description names: ``{"class": name, **constructor arguments}``, a
    GINConv's ``nn`` being the list of its Sequential's modules. Raises `PygSpecError`."""
    if not isinstance(desc, Mapping) or not isinstance(desc.get("class"), str):
        raise PygSpecError(f"a module description is a dict with a 'class', got {desc!r:.100}")
    name, kwargs = desc["class"], {k: v for k, v in desc.items() if k != "class"}
    placed = sorted(set(kwargs) & _PLACEMENT)
    if placed:  # a module on "meta" would look loaded and hold no weights
        raise PygSpecError(f"{name}: a description does not choose {placed[0]!r}; the model is "
                           "built on the CPU in float32")
    for key, value in kwargs.items():
        if (isinstance(value, int) and not isinstance(value, bool) and
                (value < 0 or value > MAX_WIDTH) and key != "heads" or
                key == "heads" and (not isinstance(value, int) or not 1 <= value <= MAX_WIDTH)):
            raise PygSpecError(f"{name}: {key} = {value!r:.40} is out of range [0, {MAX_WIDTH}]")
    try:
        if name in TORCH_CLASSES:
            return TORCH_CLASSES[name](**kwargs)
        if name not in PYG_CLASSES:
            raise PygSpecError(f"unknown module class {name!r}; a description names one of "
                               f"{', '.join(PYG_CLASSES + tuple(TORCH_CLASSES))}")
        if "nn" in kwargs:
            inner = kwargs["nn"]
            if not isinstance(inner, Sequence) or isinstance(inner, (str, bytes)):
                raise PygSpecError(f"{name}'s nn must be a list of modules, got {inner!r:.100}")
            if not all(isinstance(d, Mapping) and d.get("class") in TORCH_CLASSES
                       for d in inner):  # GIN's MLP is Linear and ReLU: nothing nests deeper
                raise PygSpecError(f"{name}'s nn may only hold "
                                   f"{', '.join(TORCH_CLASSES)} modules")
            kwargs["nn"] = nn.Sequential(*(build_module(d) for d in inner))
        return getattr(_torch_geometric_nn(), name)(**kwargs)
    except PygSpecError:
        raise
    except (TypeError, ValueError, RuntimeError, OverflowError) as e:  # an argument the class
        # does not take, of the wrong type, or a width torch refuses
        raise PygSpecError(f"cannot build {name} from {kwargs!r:.200} "
                           f"({' '.join(str(e).split())[:200]})") from None


class PygModel(nn.Module):
    """The PyG model a `pyg_spec` description describes: ``convs`` (a ModuleList of the GNN
    layers), ``bns`` (a ModuleList of BatchNorm1d, one per layer that has one, or None);
    ``forward(x, edge_index)`` returns the logits, as a PyG model does."""

    def __init__(self, spec: Mapping[str, Any]) -> None:
        super().__init__()
        layers = spec.get("layers") if isinstance(spec, Mapping) else None
        if (not isinstance(layers, Sequence) or not layers or
                not all(isinstance(l, Mapping) and "conv" in l for l in layers)):
            raise PygSpecError("the description has no 'layers' list of {conv, norm, residual}")
        if len(layers) > MAX_LAYERS:
            raise PygSpecError(f"the description has {len(layers)} layers; at most "
                               f"{MAX_LAYERS}")
        self.convs = nn.ModuleList(build_module(l["conv"]) for l in layers)
        norms = [l.get("norm") for l in layers]
        count = sum(1 for n in norms if n)
        if any(norms[count:]) or not all(norms[:count]):  # bns.{l} is layer l's
            raise PygSpecError("BatchNorm must follow the first layers, one each, and no other")
        self.bns = nn.ModuleList(build_module(n) for n in norms[:count]) if count else None
        self.residual = [bool(l.get("residual", False)) for l in layers]
        # a layer's propagation after its conv (APPNP's), keyed by the layer: no parameters
        self.props = nn.ModuleDict({str(l): build_module(d["propagate"])
                                    for l, d in enumerate(layers) if d.get("propagate")})
        # the earlier layer whose output a layer's conv reads besides its input (GCN2Conv's
        # x_0: conv(x, x_0, edge_index)), or None
        self.initial = [l.get("initial") for l in layers]
        if any(k is not None and not (isinstance(k, int) and 0 <= k < l)
               for l, k in enumerate(self.initial)):
            raise PygSpecError("a layer's 'initial' names an earlier layer by its index")
        self.dropout = float(spec.get("dropout", 0.0))
        self.input_dropout = bool(spec.get("input_dropout", True))
        self.kind = str(spec.get("class", ""))
        activation = spec.get("activation", DEFAULT_ACTIVATION)  # older exports: ReLU's
        if not isinstance(activation, str) or activation not in ACTIVATION_MODULES:
            raise PygSpecError(f"unknown activation {activation!r:.60}; a description names one "
                               f"of {', '.join(ACTIVATION_MODULES)}")
        self.act = TORCH_CLASSES[ACTIVATION_MODULES[activation]]()

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor | None = None,
                edge_weight: torch.Tensor | None = None) -> torch.Tensor:
        """The logits of every node of ``x`` (N × features) over the edges ``edge_index``
        (2 × E, source then target, as PyG's; an MLP needs none); ``edge_weight`` goes to
        GCNConv (the other layers take none)."""
        last, outputs = len(self.convs) - 1, {}
        for l, conv in enumerate(self.convs):
            if self.dropout and (l > 0 or self.input_dropout):
                x = F.dropout(x, self.dropout, self.training)
            if isinstance(conv, nn.Linear) and str(l) not in self.props:
                h = conv(x)
            elif edge_index is None:
                raise ValueError(f"a {self.kind} model needs edge_index (2 x E)")
            elif isinstance(conv, nn.Linear):
                h = conv(x)
            elif self.initial[l] is not None:
                h = conv(x, outputs[self.initial[l]], edge_index)
            elif edge_weight is not None:
                if self.kind not in WEIGHTED_CLASSES:
                    raise ValueError(f"{self.kind} takes no edge weights; only "
                                     f"{', '.join(sorted(WEIGHTED_CLASSES - set(TORCH_CLASSES)))}"
                                     " does")
                h = conv(x, edge_index, edge_weight)
            else:
                h = conv(x, edge_index)
            if str(l) in self.props:
                h = self.props[str(l)](h, edge_index)
            if self.residual[l]:
                h = h + x
            if l < last:
                if self.bns is not None and l < len(self.bns):
                    h = self.bns[l](h)
                h = self.act(h)
            if l in self.initial:
                outputs[l] = h
            x = h
        return x
