"""The plan of one ``plexus-train`` run: what it is asked to do, resolved and checked once
(`plexus.train.cli.build_plan`), and the sizes that price it.

The launching process builds the plan and hands it to its workers, which only check it against
their shards; under torchrun or srun (no launcher of ours) every rank builds it with the same
function, and what needs the graph (the grid of ``--grid auto``, the grid-fit check) is then done
by each rank once it has its shard.
"""

from __future__ import annotations

from dataclasses import dataclass

from plexus.api.training import EngineConfig, TrainConfig
from plexus.core.grid import GridShape
from plexus.core.layout import DEFAULT_PERMUTATION
from plexus.core.model import ModelConfig
from plexus.datasets import Graph, gcn_nnz
from plexus.partitioners import RankShard
from plexus.partitioners.plan import symmetric
from plexus.perfmodel import ModelSpec
from plexus.runtime.group import DEFAULT_TIMEOUT_S

from .checkpoint import CHECKPOINT_EVERY
from .faults import Fault


@dataclass(frozen=True)
class GraphSizes:
    """What pricing a run needs of its graph: sizes (``nnz``: of the normalized Â, self loops
    included), the task kind and whether Â = Âᵀ (a block's transpose is another block)."""

    num_nodes: int
    nnz: int
    num_features: int
    num_classes: int
    multilabel: bool = False
    symmetric: bool = True
    name: str = ""

    @classmethod
    def of_graph(cls, graph: Graph, model: ModelConfig) -> GraphSizes:
        """A whole graph's, with Â normalized for ``model``'s aggregation."""
        return cls(graph.num_nodes, gcn_nnz(graph), graph.num_features, graph.num_classes,
                   graph.multilabel, symmetric(graph, model.aggregation), graph.name)

    @classmethod
    def of_shard(cls, shard: RankShard, nnz: int) -> GraphSizes:
        """The whole graph's, as a rank's shard (and ``nnz``, the graph's) tells them."""
        return cls(shard.num_nodes, nnz, shard.num_features, shard.num_classes,
                   shard.multilabel, bool(shard.meta.get("symmetric")), shard.name)


@dataclass(frozen=True)
class RunPlan:
    """Everything a rank needs to know about the run, resolved and checked once."""

    grid: GridShape | None  # None: "auto", chosen by plexus.perfmodel
    dataset: str
    root: str | None
    model: ModelConfig
    train: TrainConfig
    engine: EngineConfig
    perm: str = DEFAULT_PERMUTATION  # the store's with --shards
    shards: str | None = None
    cache_dir: str | None = None  # the shard-store cache of --dataset runs (None: --no-cache)
    cache_explicit: bool = False  # --cache was given (a 1x1x1 run uses the cache only then)
    cache: dict | None = None  # how the launcher came by the store (`plexus.train.cache`)
    cache_max_bytes: int | None = None  # the cache's size cap (None: none); LRU eviction
    checkpoint: str | None = None
    checkpoint_every: int = CHECKPOINT_EVERY
    resume: bool = False
    log_json: str | None = None
    quiet: bool = False
    # when the command started (`time.time`): the run's wall time counts start-up from there;
    # None: from the rank's own process start (a rank of torchrun/srun)
    launched_at: float | None = None
    setup_script_s: float = 0.0  # ./run's set-up before the command (not in the start-up)
    device: str | None = None  # "cpu" or "cuda" (--device); None: CUDA where available
    threads: int | None = None  # torch threads per rank (--threads); None: OMP_NUM_THREADS/share
    calibration: str | None = None  # the rates --grid auto prices with (None: built-in)
    timeout_s: float = DEFAULT_TIMEOUT_S
    check_memory: bool = True  # False: --force, or the launching process already checked
    # the graph's sizes where the launching process read them (it then chose the grid and
    # checked that it fits); None: each rank learns them from its shard and checks there
    sizes: GraphSizes | None = None
    outputs_checked: bool = False  # the launching process checked every output path
    fault: Fault | None = None  # --inject-fault (tests of failure handling)
    # results out (plexus.train.results) and OGB fidelity
    save_predictions: str | None = None  # a directory: pred.npy, logits.npy (+ embeddings.npy)
    save_embeddings: bool = False
    export: str | None = None  # unsharded weights under PyG names
    export_best: bool = False  # ... of the best-validation epoch
    symmetrize: bool = False  # make the graph undirected before training
    log_csv: str | None = None  # a CSV of epochs
    tensorboard: str | None = None  # a TensorBoard log directory

    def spec(self, sizes: GraphSizes, from_store: bool, device: str = "cpu") -> ModelSpec:
        """The performance model's `ModelSpec` of this run on a graph of ``sizes``: the one
        place the plan becomes the model's inputs, so every figure a run prints (the ``--grid
        auto`` line, the start-up check, the summary's memory line) prices the same run.
        ``from_store``: the ranks read their shards from a store; ``device``: where the ranks
        train ("cuda": the training peak is the GPU allocator's)."""
        return ModelSpec(sizes.num_nodes, max(sizes.nnz, 0), sizes.num_features,
                         sizes.num_classes, self.model, perm=self.perm,
                         dtype_bytes=self.engine.dtype_bytes, from_store=from_store,
                         recompute=self.engine.recompute, multilabel=sizes.multilabel,
                         symmetric=sizes.symmetric, device=device, name=sizes.name)
