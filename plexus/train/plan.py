"""The plan of one ``plexus-train`` run: what it is asked to do (`RunRequest`, validated from
the flags by `plexus.train.cli.build_plan`), the same resolved (`ResolvedRun`: a concrete grid
and the graph's sizes, by `plexus.train.resolve.resolve`), and how a run is priced from the
graph's sizes: the grid of ``--grid auto``, whether a grid fits the graph, the memory a rank
will need.

The launching process resolves the request once and hands the `ResolvedRun` to its workers,
which only read their shards and check them against it; under torchrun or srun (no launcher of
ours) every rank resolves the same request with the same deterministic function.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, fields
from typing import Any, Mapping

import torch

from plexus.api.memcheck import (Predicted, available_memory, check_memory,
                                 check_partition_memory, predicted_peaks)
from plexus.api.training import EngineConfig, TrainConfig
from plexus_partition.model.cli import UsageError
from plexus_partition.model.grid import GridShape
from plexus_partition.model.layout import DEFAULT_PERMUTATION, grid_misfit
from plexus_partition.model.model import ModelConfig
from plexus.core.units import format_bytes, format_seconds
from plexus_datasets import Graph, gcn_nnz
from plexus_partition import RankShard
from plexus_partition.plan import symmetric
from plexus.perfmodel import (Calibration, ModelSpec, Prediction, choose_grid, pricing,
                              rank_configs)
from plexus_partition.launch.env import default_device
from plexus_partition.launch.group import DEFAULT_TIMEOUT_S


CHECKPOINT_EVERY = 10  # epochs between checkpoints unless --checkpoint-every says


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
    def of_spec(cls, spec: str, seed: int) -> GraphSizes | None:
        """The sizes of a dataset that was not loaded, where the spec alone tells them (R-MAT:
        nnz is the upper bound, every generated edge distinct, both directions, self loops);
        None otherwise."""
        scheme, colon, rest = spec.strip().partition(":")
        if scheme.strip().lower() != "rmat":
            return None
        from plexus_datasets import parse_rmat_params  # noqa: PLC0415

        p = parse_rmat_params(rest if colon else "", seed)
        n = 1 << int(p["scale"])
        return cls(n, n * (2 * int(p["edge_factor"]) + 1), int(p["features"]),
                   int(p["classes"]))

    @classmethod
    def of_manifest(cls, manifest: Mapping[str, Any]) -> GraphSizes:
        """A shard store's graph, as its manifest tells it (which records neither the task kind
        nor whether Â = Âᵀ: each rank prices its memory from its shard's, `of_shard`)."""
        return cls(int(manifest["num_nodes"]), int(manifest["nnz"]),
                   int(manifest["num_features"]), int(manifest["num_classes"]),
                   name=str(manifest.get("dataset", "")))

    @classmethod
    def of_shard(cls, shard: RankShard, nnz: int) -> GraphSizes:
        """The whole graph's, as a rank's shard (and ``nnz``, the graph's) tells them."""
        return cls(shard.num_nodes, nnz, shard.num_features, shard.num_classes,
                   shard.multilabel, bool(shard.meta.get("symmetric")), shard.name)


@dataclass(frozen=True)
class RunRequest:
    """What the user asked of the run, validated from the flags (`plexus.train.cli.build_plan`);
    `plexus.train.resolve.resolve` turns it into the `ResolvedRun` the ranks train."""

    grid: GridShape | None  # None: "auto", chosen by plexus.perfmodel when resolved
    dataset: str
    root: str | None
    model: ModelConfig
    train: TrainConfig
    engine: EngineConfig
    perm: str = DEFAULT_PERMUTATION  # the store's with --shards
    shards: str | None = None
    cache_dir: str | None = None  # the shard-store cache of --dataset runs (None: --no-cache)
    cache_explicit: bool = False  # --cache was given (a 1x1x1 run uses the cache only then)
    cache_max_bytes: int | None = None  # the cache's size cap (None: none); LRU eviction
    checkpoint: str | None = None
    checkpoint_every: int = CHECKPOINT_EVERY
    resume: bool | str = False  # "auto": decided when the run is resolved (a bool after)
    log_json: str | None = None
    quiet: bool = False
    verbose: bool = False  # --verbose: the summary's timers and bytes per axis and collective
    heartbeat_s: float = 0.0  # --quiet's heartbeat interval (0: none)
    device: str | None = None  # "cpu" or "cuda" (--device); None: CUDA where available
    threads: int | None = None  # torch threads per rank (--threads); None: OMP_NUM_THREADS/share
    world_size: int | None = None  # --world-size: the workers a local run starts (None: the
    # grid's, or for --grid auto one per local GPU or core); a launcher's world is its own
    calibration: str | None = None  # the rates --grid auto prices with (None: built-in)
    # --placement: "auto" (the model's fastest node block where the calibration has link
    # classes), "launcher", or a block "XxYxZ"; resolved into engine.node_block
    placement: str = "auto"
    timeout_s: float = DEFAULT_TIMEOUT_S
    force: bool = False  # --force: no memory check refuses the run
    # results out (plexus.train.results) and OGB fidelity
    save_predictions: str | None = None  # a directory: pred.npy, logits.npy (+ embeddings.npy)
    save_embeddings: bool = False
    export: str | None = None  # unsharded weights under PyG names
    export_best: bool = False  # ... of the best-validation epoch
    symmetrize: bool = False  # make the graph undirected before training
    split_seed: int | None = None  # --split-seed: the dataset's stand-ins (None: train.seed)
    features: str = "auto"  # --features: how node features are scaled (plexus_datasets)
    log_csv: str | None = None  # a CSV of epochs
    tensorboard: str | None = None  # a TensorBoard log directory

    @property
    def data_seed(self) -> int:
        """The seed of the dataset's seeded parts (a split, features or labels its files lack;
        a synthetic graph): --split-seed, else --seed, as before --split-seed existed."""
        return self.train.seed if self.split_seed is None else self.split_seed

    def uses_cache(self, world: int | None) -> bool:
        """Whether the run reads its shards from the cache: a --dataset run (not --shards) with
        a cache directory, on more than one rank unless --cache was given (a one-rank run's
        shard is the whole graph: cutting it in its own process costs less than writing it to
        disk and reading it back). ``world``: the ranks, while the grid is not chosen yet."""
        if self.shards or not self.cache_dir:
            return False
        ranks = self.grid.world_size if self.grid is not None else world
        return self.cache_explicit or ranks is None or ranks > 1

    def reads_store(self, world: int | None) -> bool:
        """Whether the ranks read their shards from a store (--shards, or the cache's) instead
        of cutting them from the whole graph: how the memory check prices their set-up."""
        return bool(self.shards) or self.uses_cache(world)

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
                         symmetric=sizes.symmetric, device=device, name=sizes.name,
                         sparse_comm=self.engine.sparse_comm, agg_chunks=self.engine.agg_chunks,
                         overlap=self.engine.overlap, comm_dtype_bytes=self.engine.comm_bytes,
                         # auto keeps them where memory allows, as the model chooses
                         keep_input=self.engine.keep_input != "off")


@dataclass(frozen=True, kw_only=True)
class ResolvedRun(RunRequest):
    """A `RunRequest` resolved (`plexus.train.resolve.resolve`): the grid it runs on and the
    graph's sizes, both known; what every rank trains. Ranks read their shards and check them
    against it; they choose nothing."""

    grid: GridShape
    # the graph's as resolve learned them: loaded, an R-MAT spec's (nnz its upper bound) or a
    # store's manifest
    sizes: GraphSizes
    # each rank checks that training fits its memory once it holds its shard (not --force):
    # where the run was resolved without pricing the graph's own sizes before any worker
    # started (under torchrun/srun, a store's graph, a big graph the launcher did not load)
    rank_checks_memory: bool

    @classmethod
    def of(cls, request: RunRequest, grid: GridShape, sizes: GraphSizes,
           rank_checks_memory: bool) -> ResolvedRun:
        """``request`` resolved to ``grid`` and ``sizes``."""
        asked = {f.name: getattr(request, f.name) for f in fields(RunRequest)}
        return cls(**{**asked, "grid": grid}, sizes=sizes, rank_checks_memory=rank_checks_memory)


def __getattr__(name: str) -> Any:
    """``RunPlan``: the old name of `RunRequest` (deprecated in 0.2.0, removed in 0.3.0)."""
    if name == "RunPlan":
        warnings.warn("plexus.train.plan.RunPlan is now RunRequest (resolved: ResolvedRun); the "
                      "old name is removed in 0.3.0",
                      DeprecationWarning, stacklevel=2)
        return RunRequest
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def choose_run_grid(plan: RunRequest, sizes: GraphSizes, world: int,
                    calibration: Calibration | None, ranks_per_host: int | None,
                    ranks_note: str = "", rates_said: str | None = None
                    ) -> tuple[GridShape, str]:
    """The grid of a ``--grid auto`` run on a graph of ``sizes`` and the line saying why
    (`auto_grid_choice`): the launching process's, or under torchrun/srun each rank's (the same
    on every rank)."""
    spec = plan.spec(sizes, plan.reads_store(world))
    return auto_grid_choice(world, spec, ranks_note, calibration, ranks_per_host, rates_said)


def auto_grid(world_size: int, spec: ModelSpec) -> GridShape:
    """The grid `plexus.perfmodel.choose_grid` predicts fastest for ``spec``."""
    return GridShape.of(choose_grid(world_size, spec))


def auto_grid_choice(world_size: int, spec: ModelSpec, ranks_note: str = "",
                     calibration: Calibration | None = None,
                     ranks_per_host: int | None = None,
                     rates_said: str | None = None) -> tuple[GridShape, str]:
    """`auto_grid`'s grid and one line saying why: its predicted epoch time and training peak
    per rank, the runner-up's, and what priced them (``--grid auto`` prints it, so the choice
    is never silent). ``spec``: the run as its summary prices it (`RunRequest.spec`), so the peak
    printed is the one the summary predicts. ``ranks_note`` follows the rank count (where it
    came from, when nobody gave it). ``calibration``: the machine's rates
    (`plexus.perfmodel.resolve_calibration`; None: the built-in GPU rates, said as
    uncalibrated); ``ranks_per_host``: ranks of this job on one host
    (`plexus.perfmodel.pricing`); ``rates_said``: how the line names measured rates (this
    machine's, `plexus.perfmodel.machine`), instead of the calibration's file. The line says
    which term decided against the runner-up (`deciding_term`)."""
    cal = calibration or Calibration()
    per_host, placement = pricing(cal, ranks_per_host)
    ranked = rank_configs(world_size, spec, cal, ranks_per_host=per_host, placement=placement)
    best = ranked[0]
    grid = GridShape.of(best.grid)
    assert grid == GridShape.of(choose_grid(world_size, spec, cal, ranks_per_host=per_host,
                                            placement=placement))  # one rule for both

    def figures(p) -> str:
        return (f"predicted epoch {format_seconds(p.time_s)}, training peak "
                f"{format_bytes(p.memory.total)} per rank")

    line = f"--grid auto: chose {grid} for {world_size} ranks{ranks_note} ({figures(best)})"
    if len(ranked) > 1:
        line += (f"; runner-up {GridShape.of(ranked[1].grid)} ({figures(ranked[1])}); "
                 f"{deciding_term(best, ranked[1])}")
    else:
        line += "; no other grid of that size"
    if rates_said is not None:
        return grid, line + f"; priced with {rates_said}; plexus-model ranks them all"
    if cal.calibrated:
        return grid, line + f"; priced with {cal.label}; plexus-model ranks them all"
    return grid, (line + f"; {cal.label}: the times are not this machine's (plexus-bench "
                  "calibrate --out FILE, then --calibration FILE)")


def prediction_terms(p: Prediction) -> dict[str, float]:
    """A prediction's epoch time in its terms: compute (the step's fixed work apart) and each
    axis's communication."""
    terms = {"compute": p.compute_s - p.overhead_s, "fixed work": p.overhead_s}
    terms.update({f"communication along {axis}": s for axis, s in p.comm_s_per_axis.items()})
    return terms


def deciding_term(best: Prediction, runner_up: Prediction) -> str:
    """Why ``best`` beat ``runner_up``, in words: the term of the epoch time whose difference
    favours it most (`prediction_terms`), or, on equal times, the memory that broke the tie."""
    gap = runner_up.time_s - best.time_s
    if gap <= 0:
        return (f"equal times: the smaller training peak decided "
                f"({format_bytes(best.memory.total)} against "
                f"{format_bytes(runner_up.memory.total)})")
    ours, theirs = prediction_terms(best), prediction_terms(runner_up)
    saved = {k: theirs.get(k, 0.0) - ours[k] for k in ours}
    term, against = max(saved, key=saved.__getitem__), min(saved, key=saved.__getitem__)
    text = (f"it wins by {format_seconds(gap)}, decided by {term} "
            f"({format_seconds(ours[term])} against {format_seconds(theirs[term])})")
    if saved[against] < 0:  # what the runner-up does better, outweighed
        text += (f", outweighing {against} ({format_seconds(ours[against])} against "
                 f"{format_seconds(theirs[against])})")
    return text


def check_grid_fits(grid: GridShape, model: ModelConfig, sizes: GraphSizes) -> None:
    """Raise `UsageError` when an axis has more ranks than the dimension it cuts (see
    `plexus_partition.model.layout.grid_misfit`)."""
    f, c = sizes.num_features, sizes.num_classes
    problem = grid_misfit(grid, model.plans(f, c), sizes.num_nodes, model.widths(f, c))
    if problem:
        raise UsageError(problem)


def check_launch_memory(plan: RunRequest, grid: GridShape, sizes: GraphSizes) -> None:
    """Before any worker starts: the predicted peak per rank of the run (set-up included, as
    the ranks will hold it), fits what the local ranks will have."""
    where = default_device(plan.device)
    spec = plan.spec(sizes, plan.reads_store(grid.world_size), where.type)
    peaks = predicted_peaks(spec, grid)
    if where.type == "cuda":  # training on the GPUs, set-up (reading or cutting) in host RAM
        check_memory(peaks.training, available_memory(where, grid.world_size), grid)
        check_memory(peaks.setup, available_memory(torch.device("cpu"), grid.world_size), grid)
    else:
        check_memory(peaks.run, available_memory(where, grid.world_size), grid)


def rank_peaks(plan: ResolvedRun, shard: RankShard, nnz: int, device: torch.device,
               local_ranks: int, coords: Mapping[str, int]) -> tuple[Predicted, Predicted]:
    """The performance model's peaks of the run (the rank that holds the most) and of the rank
    at ``coords`` (for the report); where the plan says the ranks check memory
    (`ResolvedRun.rank_checks_memory`), `MemoryCheckError` when what training needs does not
    fit this rank."""
    grid = plan.grid
    # the task kind and whether a block's transpose is another block: as the engine builds them
    spec = plan.spec(GraphSizes.of_shard(shard, nnz), plan.reads_store(grid.world_size),
                     device=device.type)
    peaks = predicted_peaks(spec, grid)
    own = predicted_peaks(spec, grid, coords=coords)
    if plan.rank_checks_memory:  # set-up is behind this rank now: what training needs
        predicted = peaks.training
        if device.type == "cpu":  # the shard already sits in host memory: count the rest
            predicted -= shard_bytes(shard)
        check_memory(predicted, available_memory(device, local_ranks), grid)
    return peaks, own


def shard_bytes(shard: RankShard) -> int:
    """Bytes of the arrays a rank's shard holds (its Â blocks and features)."""
    total = shard.features.nbytes
    for blk in shard.blocks.values():
        total += blk.data.nbytes + blk.indices.nbytes + blk.indptr.nbytes
    return total


def precheck_partition(spec: str, seed: int, model: ModelConfig, perm: str) -> None:
    """Before partitioning the graph into a store in one process: its predicted peak fits the
    host (checked where the spec alone tells the graph's sizes)."""
    sizes = GraphSizes.of_spec(spec, seed)
    if sizes is None:
        return
    priced = ModelSpec(sizes.num_nodes, sizes.nnz, sizes.num_features, sizes.num_classes, model,
                       perm=perm, from_store=True)
    check_partition_memory(predicted_peaks(priced, (1, 1, 1)).partition,
                           available_memory(torch.device("cpu"), 1))
