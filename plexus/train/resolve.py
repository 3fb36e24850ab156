"""A `RunRequest` resolved into the `ResolvedRun` every rank trains, by one function (`resolve`):
the graph's sizes (from the loaded graph, an R-MAT spec or a store's manifest), the grid of
``--grid auto``, the grid-fit and memory checks, the checkpoint to resume from and the outputs.

The launching process of a local run calls it once, before any worker starts, and hands the
result to its workers. Under torchrun or srun (no launcher of ours) every rank calls it with the
same request once the process group exists (after rank 0 provided the cache's store): it is
deterministic, so all ranks resolve alike. The launching process does not load a big graph
(`plexus.train.checks.precheck_dataset`) only to learn its sizes: for a big ``--dataset``
run whose sizes neither its spec nor a store tells, it checks what it can (devices, checkpoint,
outputs) and leaves the resolution to the ranks, which load the graph anyway and cut their
shards from the graph they resolved with (`Resolution.graph`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from plexus_datasets import Graph
from plexus_datasets.trainable import check_trainable, graph_counts
from plexus_partition import read_manifest
from plexus_partition.model.grid import GridShape
from plexus_partition.launch.env import check_local_devices, default_device
from plexus_partition.store import graph_hash
from plexus.perfmodel import Calibration, CalibrationError, load_calibration

from . import checkpoint as ckpt
from .cachekeys import Source
from .checkpoint import load_resume
from .checks import check_launch_outputs, check_output_paths, needs_validation_flag
from .errors import PROG, UsageError
from .placing import placed_engine
from .plan import (GraphSizes, ResolvedRun, RunRequest, check_grid_fits, check_launch_memory,
                   choose_run_grid)
from .runlog import console_line


@dataclass(frozen=True)
class Resolution:
    """What `resolve` produced: the run, and the graph it loaded to learn the sizes (a rank cuts
    its shard from it instead of loading it again; None where none was loaded)."""

    run: ResolvedRun | None  # None: the launching process left the resolution to the ranks
    graph: Graph | None = None


def resolve(request: RunRequest, world: int | None, *, rank: int | None = None,
            ranks_per_host: int | None = None, world_note: str = "",
            calibration: Calibration | None = None) -> Resolution:
    """Resolve ``request`` for a job of ``world`` ranks (None: not known yet, the grid given).

    ``rank`` None: the launching process of a local run (its ``world_note`` says where the rank
    count came from; ``calibration`` the rates --grid auto prices with, else measured on CPUs,
    `auto_rates`); its run is None where the sizes need a big graph loaded (every worker then
    resolves). Otherwise rank ``rank`` of the job (``ranks_per_host`` of them on its host),
    which always gets its run. Raises the run's user errors (`UsageError`, `DatasetError`, ...).
    """
    if rank is None:
        return _at_launch(request, world, world_note, calibration)
    return _on_rank(request, world, rank, ranks_per_host, calibration)


def _at_launch(request: RunRequest, world: int | None, world_note: str,
               calibration: Calibration | None) -> Resolution:
    graph = None if request.shards else _small_graph(request, need=request.grid is None)
    if graph is not None:
        sizes: GraphSizes | None = GraphSizes.of_graph(graph, request.model)
    elif request.shards:
        sizes = GraphSizes.of_manifest(read_manifest(request.shards))
    else:
        sizes = GraphSizes.of_spec(request.dataset, request.data_seed)
    # the launcher prices the graph before any worker starts unless its sizes come from a store
    # (a store's grid was checked against its manifest with the options, and its ranks price
    # their memory from their shards: the manifest lacks the task kind and Â's symmetry)
    priced = sizes is not None and not request.shards
    grid = request.grid
    if grid is None:  # the performance model needs the graph's sizes: loaded above
        assert sizes is not None and world is not None
        rates, said = auto_rates(request, world, calibration or Calibration())
        grid, why = choose_run_grid(request, sizes, world, rates, world, world_note, said)
        if not request.quiet:
            console_line(f"{PROG}: {why}")
    if priced:
        assert sizes is not None
        check_grid_fits(grid, request.model, sizes)
        if not request.force:
            check_launch_memory(request, grid, sizes)
    check_local_devices(grid.world_size, request.device)
    if request.resume:  # the dataset is checked here when it was loaded, else by the workers
        load_resume(request, None if graph is None else ckpt.DatasetInfo(
            graph.name, graph.num_nodes, graph.num_features, graph.num_classes,
            graph_hash(graph)))
    check_launch_outputs(request)
    if sizes is None:  # a big graph: every worker learns its sizes as it loads it
        return Resolution(None)
    request = _placed(request, grid, sizes, world, None, calibration)
    # workers are other processes: the graph is not handed on (each cuts its shard from its own)
    return Resolution(ResolvedRun.of(request, grid, sizes,
                                     rank_checks_memory=not (priced or request.force)))


def _on_rank(request: RunRequest, world: int | None, rank: int, ranks_per_host: int | None,
             calibration: Calibration | None) -> Resolution:
    graph = None
    if request.shards:  # given, or the cache's (rank 0 provided it)
        manifest = read_manifest(request.shards)
        sizes = GraphSizes.of_manifest(manifest)
        grid = request.grid or GridShape.of(manifest["grid"])
    else:
        graph = Source.of_run(request).load()
        sizes = GraphSizes.of_graph(graph, request.model)
        grid = request.grid
        if grid is None:  # --grid auto: every rank computes the same choice
            assert world is not None
            rates = calibration or load_calibration(request.calibration)
            grid, why = choose_run_grid(request, sizes, world, rates, ranks_per_host)
            if rank == 0 and not request.quiet:
                print(f"{PROG}: {why}", flush=True)
    if world is not None:
        grid.check_world(world)
    if graph is not None:  # a store's grid was checked against its manifest with the options
        check_grid_fits(grid, request.model, sizes)
    request = _placed(request, grid, sizes, world, ranks_per_host,
                      calibration or load_calibration(request.calibration))
    run = ResolvedRun.of(request, grid, sizes, rank_checks_memory=not request.force)
    if rank == 0:  # rank 0 writes the outputs
        check_output_paths(run)
    return Resolution(run, graph)


def _placed(request: RunRequest, grid: GridShape, sizes: GraphSizes, world: int | None,
            ranks_per_host: int | None, calibration: Calibration | None) -> RunRequest:
    """``request`` with its engine placed on nodes as --placement says (`placed_engine`)."""
    engine = placed_engine(request.placement, request.engine, grid, ranks_per_host,
                           calibration, lambda: request.spec(sizes, request.reads_store(
                               world or grid.world_size)))
    return request if engine is request.engine else replace(request, engine=engine)


def _small_graph(request: RunRequest, need: bool) -> Graph | None:
    """The run's graph, loaded here when it is small (`Source.small`: any problem in it shows
    before a worker starts) or when ``need`` (--grid auto prices it); None otherwise."""
    source = Source.of_run(request)
    graph = source.small()
    if graph is None and need:
        graph = source.load()
    if graph is not None:
        check_trainable(graph.name, graph_counts(graph), graph.num_classes, graph.multilabel,
                        needs_validation_flag(request.train))
    return graph


def auto_rates(request: RunRequest, world: int, calibration: Calibration
               ) -> tuple[Calibration, str | None]:
    """The rates --grid auto prices with at launch, and how its line names them: on CPUs with no
    calibration given, this machine's, measured once and kept (`plexus.perfmodel.machine`);
    otherwise ``calibration`` (None: named by it). One rank has one grid: nothing to measure."""
    from plexus.perfmodel.machine import machine_cache_dir, machine_rates  # noqa: PLC0415

    folder = machine_cache_dir()
    if calibration.calibrated or calibration.profile or world <= 1 or folder is None \
            or default_device(request.device).type != "cpu":
        return calibration, None

    def say(text: str) -> None:
        if not request.quiet:
            console_line(f"{PROG}: --grid auto: {text}; --calibration FILE gives them")

    try:
        rates = machine_rates(world, folder, say=say)
    except CalibrationError as e:
        raise UsageError(str(e)) from None
    return rates.calibration, rates.said
