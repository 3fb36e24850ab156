"""Plexus: distributed full-graph GNN training with 3D tensor parallelism.

The public API: everything a library user needs is importable from ``plexus`` itself. Names are
resolved on first use, so ``import plexus_datasets`` or ``plexus_partition`` alone does not
import torch.

Three projects, from the bottom up (each imports only what is below it; ARCHITECTURE.md's
table says which). The datasets project: ``plexus_datasets.base`` (the file-safety base all
three share), ``plexus_datasets`` (one `Graph`, its loaders). The partitioner project, no torch:
``plexus_partition.model`` (the model as values: grid, layouts, the kinds, the schedule),
``plexus_partition.launch`` (launcher detection, the process group), ``plexus_partition``
(permutations, the 3D cut, the shard store, ``plexus-partition``). This engine:
``plexus.core`` (small helpers), ``plexus.runtime`` (local worlds), ``plexus.engine`` (the 3D
engine), ``plexus.perfmodel`` (from sizes alone; a kind's collectives from the engine's dry
run), ``plexus.nn`` (users' own layers),
``plexus.api`` (the Python API: launch or join a grid, a distributed model from a `Graph`,
results and weights out), ``plexus.testing`` (local worlds for tests and benchmarks),
``plexus.train`` (the ``plexus-train`` application, on the API), ``plexus.bench``
(``plexus-bench``), ``plexus.studies`` (``plexus-sweep``, ``plexus-report``). The old paths of
what moved (``plexus.datasets``, ``plexus.partitioners``, ``plexus.core.grid``, ...) still work
through 0.2.x, removed in 0.3.0 (`plexus.oldpaths`).
"""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING, Any

from .oldpaths import install as _install_old_paths

_install_old_paths()

__version__ = "0.2.0"

# public name -> module that defines it
_EXPORTS = {
    "GridShape": "plexus_partition.model.grid",
    "Graph": "plexus_datasets",
    "load_dataset": "plexus_datasets",
    "gcn_normalize": "plexus_datasets",
    "RankShard": "plexus_partition",
    "shard_graph": "plexus_partition",
    "make_permutation": "plexus_partition",
    "ModelConfig": "plexus_partition.model.model",
    "TrainConfig": "plexus.engine.config",
    "TrainConfigError": "plexus.engine.config",
    "EngineConfig": "plexus.engine.config",
    "Grid": "plexus.engine.grid",
    "SerialModel": "plexus.engine.serial",
    "Trainer": "plexus.engine.trainer",
    "ModelSpec": "plexus.perfmodel",
    "estimate": "plexus.perfmodel",
    "predict": "plexus.perfmodel",  # deprecated: estimate (DeprecationWarning when called)
    "choose_grid": "plexus.perfmodel",
    # the Python API (plexus.api): your own training loop on the grid
    "launch": "plexus.api",
    "init": "plexus.api",
    "distributed_model": "plexus.api",
    "GraphModel": "plexus.api",
    "gather_predictions": "plexus.api",
    "gather_logits": "plexus.api",
    "gather_embeddings": "plexus.api",
    "gather_outputs": "plexus.api",
    "GatherTooLargeError": "plexus.api",
    "save_outputs": "plexus.api",
    "load_outputs": "plexus.api",
    "save_weights": "plexus.api",
    "full_weights": "plexus.api",
    "load_pyg": "plexus.api",
    "ExportError": "plexus.api",
    "infer": "plexus.api",
    "InferenceError": "plexus.api",
    "RECIPES": "plexus.api",
    "run_script": "plexus.api",
    "ogb_evaluate": "plexus.api",
    "UsageError": "plexus_partition.model.cli",
}

#: The engine's own model types, public before 0.2.0: one front door now, `GraphModel` (from
#: `distributed_model`); these names warn (deprecated in 0.2.0, removed in 0.3.0) and still
#: resolve at their modules.
_DEPRECATED = {"DistributedModel": "plexus.engine.model", "build_model": "plexus.engine.build"}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    if name in _DEPRECATED:
        warnings.warn(f"plexus.{name} is the engine's own (deprecated in 0.2.0, removed from "
                      "plexus in 0.3.0): build a model with plexus.distributed_model, which "
                      f"returns a plexus.GraphModel (or import {_DEPRECATED[name]}.{name})",
                      DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(_DEPRECATED[name]), name)
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'plexus' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # resolve once
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


if TYPE_CHECKING:  # noqa: F401 — for type checkers and IDEs: the same names, eagerly
    from plexus.api import (RECIPES, ExportError, GatherTooLargeError, GraphModel,
                            distributed_model, full_weights, gather_embeddings, gather_logits,
                            gather_outputs, gather_predictions, init, launch, load_outputs,
                            load_pyg, save_outputs, infer, InferenceError,
                            ogb_evaluate, run_script, save_weights)
    from plexus_partition.model.cli import UsageError
    from plexus_partition.model.grid import GridShape
    from plexus_datasets import Graph, gcn_normalize, load_dataset
    from plexus_partition.model.model import ModelConfig
    from plexus.engine.config import EngineConfig, TrainConfig, TrainConfigError
    from plexus.engine.grid import Grid
    from plexus.engine.serial import SerialModel
    from plexus.engine.trainer import Trainer
    from plexus_partition import RankShard, make_permutation, shard_graph
    from plexus.perfmodel import ModelSpec, choose_grid, estimate, predict
