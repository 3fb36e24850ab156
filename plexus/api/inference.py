"""Inference with a trained model on any graph of the same feature width, on any grid:
`plexus.infer`.

The weights come from an export (`plexus.save_weights`, ``plexus-train --export``: PyG's names,
turned back into the engine's by the same declarations that named them,
`plexus.api.export.pyg_names`) or from a `Weights` record a caller built (``plexus-predict``
builds one from a ``plexus-train --checkpoint``). The model is rebuilt for the new graph (its
own Â, its own shards), loaded with the full weights on every rank, and run once without
dropout; the outputs are gathered on rank 0 or written by every rank as ``--save-predictions``
writes them (`plexus.save_outputs`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from plexus_datasets import Graph
from plexus_partition.model.model import ModelConfig
from plexus.engine.config import EngineConfig

from .export import ExportError, declared_tensors, read_payload
from .model import GraphModel, distributed_model
from .outputs import save_outputs
from .results import gather_logits

__all__ = ["InferenceError", "Weights", "infer", "read_export"]


class InferenceError(ValueError):
    """Weights that cannot run on the graph given: another feature width or class count, a
    model whose input features were learnt for its own nodes (one line)."""


@dataclass(frozen=True)
class Weights:
    """A trained model as values: its configuration, the widths it was trained for and every
    tensor (parameters and BatchNorm statistics) full and unpadded, by the engine's names."""

    config: ModelConfig
    num_features: int
    num_classes: int
    tensors: dict[str, torch.Tensor]


def read_export(path: str | os.PathLike) -> Weights:
    """The `Weights` of an export file (``plexus-weights/`` format). Raises `ExportError` for a
    file that is not one or whose tensors do not fit the model it describes."""
    target, payload = read_payload(path)
    try:
        config = ModelConfig(**payload["config"])
        spec = payload["pyg"]
        f_in, c_out = int(spec["in_channels"]), int(spec["out_channels"])
        state = payload["state_dict"]
        tensors = {}
        for name, pyg, decl in declared_tensors(config, f_in, c_out):
            t = state[pyg]
            t = t.T if decl.transform == "T" else t
            tensors[name] = t.reshape(decl.shape).contiguous()
    except (KeyError, TypeError, ValueError, RuntimeError) as e:
        raise ExportError(f"{target}: its weights do not fit the model it describes "
                          f"({type(e).__name__}: {' '.join(str(e).split())[:160]})") from None
    return Weights(config, f_in, c_out, tensors)


def _check_fits(weights: Weights, graph: Graph) -> None:
    if weights.config.learnable_features:
        raise InferenceError("the model learnt its input features for the nodes it was trained "
                             "on (learnable_features): it has no weights for a new graph's")
    if graph.num_features != weights.num_features:
        raise InferenceError(f"{graph.name}: {graph.num_features} features, but the model was "
                             f"trained on {weights.num_features}")
    if graph.num_classes != weights.num_classes:
        raise InferenceError(f"{graph.name}: {graph.num_classes} classes, but the model predicts "
                             f"{weights.num_classes} (give the graph num_classes="
                             f"{weights.num_classes})")


def loaded_model(weights: Weights, graph: Graph, grid: object, *,
                 engine: EngineConfig | None = None, memory_check: bool = True) -> GraphModel:
    """Collective: this rank's part of ``weights``'s model on ``graph``, loaded, in eval mode."""
    _check_fits(weights, graph)
    model = distributed_model(graph, grid, weights.config, engine=engine,
                              memory_check=memory_check)
    own = model.named_tensors()
    if set(own) != set(weights.tensors):
        raise InferenceError(f"the weights hold {sorted(set(weights.tensors) ^ set(own))[:6]} "
                             "where the model does not, or lack them")
    with torch.no_grad():
        for name, p in own.items():
            p.copy_(model.shard_of(name, weights.tensors[name].to(p.dtype)))
    return model.eval()


def infer(weights: Weights | str | os.PathLike, graph: Graph, grid: object, *,
          out: str | os.PathLike | None = None, embeddings: bool = False,
          as_tensor: bool = False, engine: EngineConfig | None = None,
          memory_check: bool = True) -> object:
    """Collective (call it on every rank, as `distributed_model`): run a trained model on
    ``graph``, which it need never have seen (same feature width and class count), over
    ``grid``.

    ``weights`` is an export file (`plexus.save_weights`, ``plexus-train --export``) or a
    `Weights`. Without ``out``: rank 0 gets the N×C logits in the original node order (numpy,
    or a CPU tensor with ``as_tensor``), the other ranks None. With ``out``: every rank writes
    its rows of ``out/pred.npy`` and ``out/logits.npy`` (and ``embeddings.npy`` with
    ``embeddings``) as ``plexus-train --save-predictions`` does, and every rank gets the
    directory. Raises `InferenceError` or `ExportError` (one line) for weights that do not fit.
    """
    if not isinstance(weights, Weights):
        weights = read_export(weights)
    model = loaded_model(weights, graph, grid, engine=engine, memory_check=memory_check)
    if out is not None:
        return save_outputs(model, out, embeddings=embeddings,
                            extra={"weights": weights.config.kind, "dataset": graph.name})
    return gather_logits(model, as_tensor=as_tensor)
