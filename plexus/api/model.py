"""This rank's distributed model from a `Graph`: cut the shard, build the engine's model, wrap it
with what a user's own training loop needs (the original id of every local row, own masks)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import torch
from torch import nn

from plexus_partition.model.grid import GridShape
from plexus_partition.model.model import ModelConfig, check_seed
from plexus_partition.model.layout import DEFAULT_PERMUTATION, grid_misfit
from plexus_datasets import DatasetError, Graph, gcn_nnz
from plexus_datasets.inputs import mask as node_mask
from plexus.engine.build import build_model
from plexus.engine.config import EngineConfig
from plexus.engine.grid import Grid
from plexus.engine.model import DistributedModel
from plexus_partition import RankShard, shard_graph
from plexus_partition.plan import symmetric
from plexus.perfmodel import ModelSpec
from plexus_partition.launch.env import LaunchError, detect_environment

from .memcheck import available_memory, check_memory, predicted_peaks


def cut_shard(graph: Graph, shape: GridShape, coords: dict[str, int], model: ModelConfig,
              perm: str = DEFAULT_PERMUTATION, seed: int = 0) -> RankShard:
    """The shard of the rank at ``coords`` for ``model`` (raises ValueError when the grid does
    not fit the graph: an axis with more ranks than what it cuts, `DatasetError` when the
    graph's arrays do not form one: `Graph.check_structure`)."""
    check_seed(seed)
    if not isinstance(graph, Graph):
        raise DatasetError(f"expected a plexus Graph, got {type(graph).__name__} (build one with "
                           "Graph.from_scipy or Graph.from_pyg)")
    graph.check_structure()
    if graph.weighted and not model.kind_decl.takes_edge_weights:
        raise DatasetError(f"{graph.name}: a weighted graph, but the {model.kind} model ignores "
                           "edge weights (only gcn uses them); build the graph without "
                           "weighted=True or train model='gcn'")
    f, c = graph.num_features, graph.num_classes
    problem = grid_misfit(shape, model.plans(f, c), graph.num_nodes, model.widths(f, c))
    if problem:
        raise ValueError(problem)
    return shard_graph(graph, shape, coords, model.num_stages, model.orders(f, c), perm,
                       seed=seed, aggregation=model.aggregation)


class GraphModel(nn.Module):
    """One rank's part of a distributed GNN (an ``nn.Module``: give ``parameters()`` to any
    optimizer; sharded Adam/SGD equal the full ones, they are elementwise).

    ``model(step)`` returns this rank's block of the logits (dropout masks keyed by ``step`` when
    training); ``loss(logits, mask)`` is the masked mean cross-entropy over the whole graph (the
    same value on every rank; for a multi-label graph the binary cross-entropy over the labelled
    (node, task) entries); ``metrics`` its accuracy or ROC-AUC; ``node_ids`` is the original node id
    of every local logits row (-1: padding), ``labels`` their labels. `plexus.api.results` gathers
    logits, predictions and embeddings on rank 0; `plexus.api.export` the unsharded weights.
    """

    def __init__(self, net: DistributedModel, shard: RankShard) -> None:
        super().__init__()
        self.net = net
        self.shard = shard
        self.node_ids = torch.from_numpy(shard.output_ids).to(net.comm.grid.device)

    # ---- what a training loop uses ------------------------------------------------------
    def forward(self, step: int | None = None) -> torch.Tensor:
        """This rank's logits block (rows: ``node_ids``; columns: a block of the classes)."""
        return self.net(step)

    def loss(self, logits: torch.Tensor, mask: str = "train") -> torch.Tensor:
        """Mean cross-entropy over the nodes of ``mask`` ("train", "val", "test" or one added
        with `add_mask`), the same scalar on every rank."""
        return self.net.loss(logits, mask)

    def accuracy(self, logits: torch.Tensor) -> dict[str, float]:
        """Accuracy on every mask (collective; the same on every rank). Single-label tasks."""
        return self.net.accuracy(logits)

    def metrics(self, logits: torch.Tensor) -> dict[str, float | None]:
        """The task's metric on every mask (collective; the same on every rank): accuracy, or
        for a multi-label task the mean ROC-AUC over its tasks (OGB's rule)."""
        return self.net.metrics(logits)

    def task_metrics(self, logits: torch.Tensor) -> dict[str, np.ndarray]:
        """Multi-label: the ROC-AUC of every task on every mask (NaN where a task lacks a
        positive or a negative label). Collective."""
        return self.net.task_metrics(logits)

    @property
    def metric_name(self) -> str:
        """"acc", or "rocauc" for a multi-label task."""
        return self.net.metric_name

    @property
    def multilabel(self) -> bool:
        """Whether the task is multi-label (labels: a row×task block of binary labels)."""
        return self.net.multilabel

    def predict(self, logits: torch.Tensor) -> torch.Tensor:
        """Predicted class of every local row (collective over the class cut); multi-label: 1
        where a task's logit of this rank's task block is positive."""
        return self.net.predict(logits)

    def add_mask(self, name: str, mask: Any) -> None:
        """Register a node set (a bool mask over all N nodes or node indices, numpy or torch) for
        `loss`; raises `DatasetError` (a ValueError) on anything else."""
        if not isinstance(name, str) or not name:
            raise DatasetError(f"a mask's name must be a non-empty string, got {name!r:.60}")
        full = node_mask(mask, self.num_nodes, f"mask {name!r}", "add_mask")
        ids = self.shard.output_ids
        local = np.zeros(len(ids), dtype=bool)
        local[ids >= 0] = full[ids[ids >= 0]]
        self.net.masks[name] = torch.from_numpy(local).to(self.node_ids.device)
        self.net.counts[name] = int(full.sum())

    @property
    def labels(self) -> torch.Tensor:
        """Label of every local logits row (-1: padding or unlabelled); multi-label: the int8
        labels of this rank's task block (-1: padding or missing)."""
        return self.net.labels

    @property
    def grid(self) -> Grid:
        return self.net.comm.grid

    @property
    def comm(self):  # noqa: ANN201 — plexus.engine.comm.Comm (ledger, timers)
        return self.net.comm

    @property
    def config(self) -> ModelConfig:
        return self.net.cfg

    @property
    def num_nodes(self) -> int:
        return self.shard.num_nodes

    @property
    def num_features(self) -> int:
        return self.shard.num_features

    @property
    def num_classes(self) -> int:
        return self.shard.num_classes

    # ---- grid-independent parameters (checkpoints, export; see plexus.engine.trainer) ------
    def named_shards(self) -> dict[str, nn.Parameter]:
        """This rank's trainable shards by grid-independent name ("W0", "b0", ...)."""
        return self.net.named_shards()

    def named_stats(self) -> dict[str, torch.Tensor]:
        """This rank's BatchNorm running statistics by grid-independent name ("mean0", ...)."""
        return self.net.named_stats()

    def named_tensors(self) -> dict[str, torch.Tensor]:
        """`named_shards` and `named_stats` together: everything a model's state holds."""
        return {**self.named_shards(), **self.named_stats()}

    def parameter_layer(self, name: str) -> int | None:
        """The GNN layer of a parameter (None: the input features)."""
        return self.net.parameter_layer(name)

    def full_parameter(self, name: str, shard: torch.Tensor) -> torch.Tensor:
        """The full unpadded tensor of ``name`` from every rank's ``shard`` (collective)."""
        return self.net.full_parameter(name, shard)

    def shard_of(self, name: str, full: torch.Tensor) -> torch.Tensor:
        """This rank's shard of the full tensor ``full``."""
        return self.net.shard_of(name, full)

    def grad_norm(self) -> torch.Tensor:
        """The 2-norm of the full gradient, every element counted once (collective; the same
        on every rank and every grid): for clipping in your own loop, e.g.
        ``torch.nn.utils.clip_grads_with_norm_(model.parameters(), 1.0, model.grad_norm())``."""
        return self.net.grad_norm()


def model_from_shard(grid: Grid, shard: RankShard, model: ModelConfig, seed: int = 0,
                     engine: EngineConfig | None = None) -> GraphModel:
    """The `GraphModel` of this rank from its ``shard`` (collective: builds the engine's model;
    its ranks on the launcher's nodes unless ``engine`` places them, `placed`)."""
    check_seed(seed)
    return GraphModel(build_model(grid, shard, model, seed, placed(engine, grid.world_size)),
                      shard)


def placed(engine: EngineConfig | None, world_size: int) -> EngineConfig:
    """``engine`` (default `EngineConfig()`) with the nodes of the launcher this job runs under
    (torchrun's LOCAL_WORLD_SIZE, srun's tasks per node) as its ``gpus_per_node`` when it gives
    none and the job spans more than one node; as it is otherwise (one node)."""
    engine = engine or EngineConfig()
    if engine.gpus_per_node is not None:
        return engine
    try:
        job = detect_environment()
    except LaunchError:
        return engine
    if job is None or job.world_size != world_size or job.local_world_size >= world_size:
        return engine
    return replace(engine, gpus_per_node=job.local_world_size)


def _local_ranks() -> int:
    """The ranks of this job on this host (1 when no launcher says)."""
    try:
        job = detect_environment()
    except LaunchError:
        return 1
    return job.local_world_size if job is not None else 1


def check_graph_memory(graph: Graph, grid: Grid, model: ModelConfig, perm: str,
                       engine: EngineConfig) -> None:
    """Raise `MemoryCheckError` when a rank of ``grid`` training ``model`` on ``graph`` is
    predicted to need more memory than it has (plexus-train's start-up check, from sizes alone:
    a hidden width of 10**9 is one line, not the OOM killer)."""
    spec = ModelSpec(graph.num_nodes, gcn_nnz(graph), graph.num_features, graph.num_classes,
                     model, perm=perm, dtype_bytes=engine.dtype_bytes,
                     recompute=engine.recompute, multilabel=graph.multilabel,
                     symmetric=symmetric(graph, model.aggregation), device=grid.device.type)
    peaks = predicted_peaks(spec, grid.shape)
    check_memory(peaks.run, available_memory(grid.device, _local_ranks()), grid.shape)


def distributed_model(graph: Graph, grid: Grid, model: ModelConfig | str | None = None, *,
                      seed: int = 0, perm: str = DEFAULT_PERMUTATION,
                      engine: EngineConfig | None = None, memory_check: bool = True,
                      **options: Any) -> GraphModel:
    """This rank's part of a GNN on ``graph`` over ``grid`` (call it on every rank).

    ``model`` is a `ModelConfig`, or the model kind by the name ``plexus-train --model`` takes
    (a name of the registry `plexus_partition.model.ops.KINDS`; default "gcn") with the other fields
    as keywords (``num_layers=2, hidden=16, dropout=0.5, heads=4, ...``). ``seed`` fixes the weights
    and dropout masks (the same on every grid), ``perm`` the load-balancing node permutation
    (results do not depend on it). A keyword that is no model option is a TypeError, a value the
    model refuses a `plexus_partition.model.model.ModelError` (a ValueError), each naming what to
    use. With ``memory_check`` (the default), a model the performance model predicts not to fit this
    rank's memory is refused before anything of it is built, as plexus-train refuses it
    (`plexus.api.memcheck.MemoryCheckError`, a ValueError).
    """
    check_seed(seed)
    if isinstance(model, ModelConfig):
        if options:
            raise TypeError("give either a ModelConfig or the model's options as keywords, "
                            f"not both (got {', '.join(sorted(options))})")
    elif model is None or isinstance(model, str):
        if "kind" in options:
            raise TypeError("the model kind is distributed_model(graph, grid, model=...), as "
                            "plexus-train --model; not kind=")
        model = ModelConfig.from_options(kind=model or "gcn", **options)
    else:
        raise TypeError(f"model must be a ModelConfig or a model kind's name, got "
                        f"{type(model).__name__}")
    if isinstance(graph, Graph):
        graph.validate()  # what the loaders promise of their graphs, for one built by hand too
        if memory_check:
            check_graph_memory(graph, grid, model, perm, engine or EngineConfig())
    shard = cut_shard(graph, grid.shape, grid.coords, model, perm, seed)
    return model_from_shard(grid, shard, model, seed, engine)
