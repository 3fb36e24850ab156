"""Plexus: distributed full-graph GNN training with 3D tensor parallelism.

The public API: everything a library user needs is importable from ``plexus`` itself. Names are
resolved on first use, so ``import plexus.datasets`` or ``plexus.partitioners`` alone does not
import torch.

Packages, from the bottom up (each imports only packages below it; ARCHITECTURE.md's table says
which): ``plexus.core`` (layout rules, grid value, collective schedule), ``plexus.runtime``
(launchers, process groups), ``plexus.datasets``, ``plexus.partitioners``, ``plexus.perfmodel``
(from sizes alone), ``plexus.engine`` (the 3D engine), ``plexus.nn`` (users' own layers),
``plexus.api`` (the Python API: launch or join a grid, a distributed model from a `Graph`,
results and weights out), ``plexus.testing`` (local worlds for tests and benchmarks),
``plexus.train`` (the ``plexus-train`` application, on the API), ``plexus.bench``
(``plexus-bench``), ``plexus.studies`` (``plexus-sweep``, ``plexus-report``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS = {
    "GridShape": "plexus.core.grid",
    "Graph": "plexus.datasets",
    "load_dataset": "plexus.datasets",
    "gcn_normalize": "plexus.datasets",
    "RankShard": "plexus.partitioners",
    "shard_graph": "plexus.partitioners",
    "make_permutation": "plexus.partitioners",
    "ModelConfig": "plexus.core.model",
    "TrainConfig": "plexus.engine.config",
    "TrainConfigError": "plexus.engine.config",
    "EngineConfig": "plexus.engine.config",
    "Grid": "plexus.engine.grid",
    "DistributedModel": "plexus.engine.model",
    "SerialModel": "plexus.engine.serial",
    "Trainer": "plexus.engine.trainer",
    "build_model": "plexus.engine.build",
    "ModelSpec": "plexus.perfmodel",
    "predict": "plexus.perfmodel",
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
    "RECIPES": "plexus.api",
    "run_script": "plexus.api",
    "ogb_evaluate": "plexus.api",
    "UsageError": "plexus.core.cli",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
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
                            load_pyg, save_outputs,
                            ogb_evaluate, run_script, save_weights)
    from plexus.core.cli import UsageError
    from plexus.core.grid import GridShape
    from plexus.datasets import Graph, gcn_normalize, load_dataset
    from plexus.engine.build import build_model
    from plexus.core.model import ModelConfig
    from plexus.engine.config import EngineConfig, TrainConfig, TrainConfigError
    from plexus.engine.grid import Grid
    from plexus.engine.model import DistributedModel
    from plexus.engine.serial import SerialModel
    from plexus.engine.trainer import Trainer
    from plexus.partitioners import RankShard, make_permutation, shard_graph
    from plexus.perfmodel import ModelSpec, choose_grid, predict
