"""Unsharded weights under the parameter names of the matching PyG model, so that a plain PyG
model loads them for inference without Plexus.

The PyG model is a ``torch.nn.Module`` with a ``ModuleList`` ``convs`` of the kind's layer
(GCNConv, SAGEConv, GINConv with ``Sequential(Linear, activation, Linear)``, GATConv, or Linear
for the MLP) and, with BatchNorm, a ``ModuleList`` ``bns`` of BatchNorm1d, applied as conv → (+
input, residual) → bn → the model's activation (ReLU, ELU, ...: torch's module of the name, as
PyG's ``act=``) for every layer but the last (`plexus.engine.pygmodel.PygModel`
builds it; `load_pyg` returns it loaded). The names come from the operators' declarations
(`plexus_partition.model.ops`): each parameter's name under its PyG module, the module's prefix per
stage of a layer from the model kind (``convs.{l}.``, GIN's second stage ``convs.{l}.nn.2.``),
BatchNorm's under ``bns.{l}.``; `pyg_names` lists them.

The file (``torch.save``; loads with ``torch.load(weights_only=True)``) holds: ``format``,
``kind``, ``state_dict`` (PyG names), ``config`` (the `ModelConfig` as a dict), ``pyg`` (the PyG
model described module by module, `plexus.engine.pygmodel.pyg_spec`: per layer its conv with
every constructor argument, GIN's inner MLP as its Linear and activation modules, the
BatchNorm1d with its width, eps and momentum, and whether it is residual; the activation;
dropout; a summary of the widths), and ``features`` when they were trained.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path
from typing import IO

import torch

from plexus_datasets.base.atomic import atomic_file
from plexus_partition.model.model import ModelConfig
from plexus_partition.model.ops import KINDS, NORM_OP, OPERATORS, Param
from plexus_datasets.files import open_regular
from plexus_datasets.validate import check_alloc
from plexus.engine.pygmodel import PygModel, PygSpecError, pyg_spec

from .model import GraphModel

FORMAT = "plexus-weights/2"  # 2: ``pyg`` describes every module (1: classes and widths)
NORM_PREFIX = "bns.{l}."  # BatchNorm1d after a layer, whatever the kind


def to_pyg(decl: Param, tensor: torch.Tensor) -> torch.Tensor:
    """Our tensor in PyG's layout: W is [in, out] (H·W), torch.nn.Linear stores [out, in];
    attention vectors are (1, heads, width)."""
    t = tensor.detach().cpu()
    if decl.transform == "T":
        return t.T.contiguous()
    if decl.transform == "heads":
        return t.reshape(1, decl.heads, -1).contiguous()
    return t.contiguous()


def declared_tensors(config: ModelConfig, num_features: int, num_classes: int,
                     extras: bool = False) -> list[tuple[str, str, Param]]:
    """(engine name, PyG name, declaration) of every parameter and statistic; with ``extras``
    what PyG's modules hold and Plexus does not
    (`plexus_partition.model.ops.KindSpec.pyg_extras`)."""
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
    return {name: pyg for name, pyg, _ in declared_tensors(config, num_features, num_classes)}


def pyg_state_dict(full: dict[str, torch.Tensor], config: ModelConfig, num_features: int,
                   num_classes: int, epochs: int = 0) -> dict[str, torch.Tensor]:
    """Rename (and transpose or reshape where PyG's layout differs) full engine tensors to PyG
    names. ``features`` (trained input features) is not a PyG parameter and is left out. What
    PyG's modules hold and Plexus does not is filled in with its initial value: the bias of a
    layer before a BatchNorm (zero: β is the bias there), GIN's fixed ε (zero) and BatchNorm's
    ``num_batches_tracked`` (``epochs``). Raises ValueError for a tensor the declarations do not
    name."""
    declared = {name: (pyg, decl) for name, pyg, decl in
                declared_tensors(config, num_features, num_classes)}
    out = {}
    for name, tensor in full.items():
        if name == "features":
            continue
        if name not in declared:
            raise ValueError(f"parameter {name!r} of a {config.kind} model has no PyG name; "
                             "its operator's declaration (plexus_partition.model.ops) must list it")
        pyg, decl = declared[name]
        out[pyg] = to_pyg(decl, tensor)
    for _, pyg, decl in declared_tensors(config, num_features, num_classes, extras=True):
        out.setdefault(pyg, torch.zeros(decl.shape) if decl.init == "zeros"
                       else torch.ones(decl.shape))
    for p in config.plans(num_features, num_classes):
        if p.norm:
            out[NORM_PREFIX.format(l=p.layer) + "num_batches_tracked"] = torch.tensor(
                epochs, dtype=torch.long)
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
        "config": config.as_dict(),
        "pyg": pyg_spec(config, num_features, num_classes),
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


class ExportError(ValueError):
    """A weights file that is missing, not an export, or whose weights do not fit the model it
    describes (a one-line message naming the file)."""


def read_payload(path: str | os.PathLike) -> tuple[Path, dict]:
    """(the file, its payload) of an export (``save_weights``, ``plexus-train --export``), read
    on the CPU with ``weights_only``; raises `ExportError` (one line) for a file that is
    missing, unreadable or not an export."""
    target = Path(path).expanduser()
    try:
        with open_regular(target, ExportError) as f:  # a FIFO would block torch.load
            check_archive(f, target)
            payload = torch.load(f, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise ExportError(f"{target}: no such file; write one with plexus.save_weights or "
                          "plexus-train --export") from None
    except ExportError:
        raise
    except Exception as e:  # noqa: BLE001 - torch.load raises many kinds for a bad file
        raise ExportError(f"{target}: not a readable weights file ({type(e).__name__}: "
                          f"{' '.join(str(e).split())[:200]})") from None
    if not isinstance(payload, dict) or not str(payload.get("format", "")).startswith(
            "plexus-weights/") or not isinstance(payload.get("state_dict"), dict):
        raise ExportError(f"{target}: not a Plexus weights export (no format "
                          f"{FORMAT!r} and state_dict)")
    return target, payload


def load_pyg(path: str | os.PathLike) -> torch.nn.Module:
    """The PyG model an export (``save_weights``, ``plexus-train --export``) describes, with its
    weights loaded strictly, in eval mode, on the CPU: ``model(x, edge_index)`` returns the
    logits Plexus computes (x: N × features, edge_index: 2 × E, source then target, as PyG's;
    a model trained with learnable features takes the file's ``features`` as x).

    The model is built from the file's own description of every module (``pyg``: the kind's
    PyG layer with its widths and options, GIN's inner MLP, BatchNorm1d, residual connections;
    `plexus.engine.pygmodel`); a file written before that description existed is rebuilt from
    its ``config``. Needs ``torch_geometric``. Raises `ExportError` (one line) for a file that
    cannot be read or does not fit its description, ``ImportError`` without torch_geometric.
    """
    target, payload = read_payload(path)
    try:
        spec = payload.get("pyg")
        layers = spec.get("layers") if isinstance(spec, dict) else None
        if not (isinstance(layers, list) and layers and isinstance(layers[0], dict)
                and "conv" in layers[0]):  # plexus-weights/1: rebuild from the config
            config = ModelConfig(**payload["config"])
            spec = pyg_spec(config, int(spec["in_channels"]), int(spec["out_channels"]))
        with torch.device("meta"):  # shapes only: a declared width allocates nothing yet
            shapes = PygModel(spec).state_dict()
        fits = _misfit(shapes, payload["state_dict"])
        if fits:
            raise ExportError(f"{target}: its weights do not fit the model it describes "
                              f"({fits})")
        model = PygModel(spec)  # as large as the file's own tensors, now known to fit
        model.load_state_dict(payload["state_dict"])  # strict: every name and shape
    except ExportError:
        raise
    except (PygSpecError, KeyError, TypeError, ValueError, RuntimeError, RecursionError,
            AttributeError) as e:
        raise ExportError(f"{target}: cannot build the model it describes "
                          f"({type(e).__name__}: {' '.join(str(e).split())[:200]})") from None
    return model.eval()


def _misfit(shapes: dict[str, torch.Tensor], state: dict) -> str:
    """Why the tensors ``state`` do not fill the model whose (meta) state dict is ``shapes``
    exactly (missing, unexpected or misshapen names), or "" when they do."""
    missing = sorted(set(shapes) - set(state))
    extra = sorted(set(state) - set(shapes))
    if missing or extra:
        return ((f"missing {missing[:3]}" if missing else "") +
            ("; " if missing and extra else "") + (f"unexpected {extra[:3]}" if extra else ""))
    for name, want in shapes.items():
        have = state[name]
        if not isinstance(have, torch.Tensor) or tuple(have.shape) != tuple(want.shape):
            got = tuple(have.shape) if isinstance(have, torch.Tensor) else type(have).__name__
            return f"{name} is {got}, the model's is {tuple(want.shape)}"
    return ""


#: A deflated member larger than this, expanding more than `MAX_RATIO` times, is a size bomb
#: (torch.save stores members uncompressed; trained weights hardly compress)
BOMB_BYTES = 64 << 20
MAX_RATIO = 100


def check_archive(f: IO[bytes], target: Path) -> None:
    """Refuse an export whose zip members declare more bytes than memory holds, or expand
    like a size bomb, before torch.load inflates them (`ExportError`); ``f`` is rewound."""
    try:
        with zipfile.ZipFile(f) as zf:
            infos = zf.infolist()
    except (zipfile.BadZipFile, OSError, ValueError):
        f.seek(0)
        return  # not a zip: torch.load says what it is
    f.seek(0)
    check_alloc(float(sum(i.file_size for i in infos)), str(target), "its tensors", ExportError)
    for info in infos:
        if info.file_size > BOMB_BYTES and info.file_size > MAX_RATIO * max(1, info.compress_size):
            raise ExportError(f"{target}: member {info.filename!r} expands {info.compress_size} "
                              f"bytes to {info.file_size}; not a weights export (a size bomb)")
