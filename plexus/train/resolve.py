"""A `RunRequest` resolved into the `ResolvedRun` every rank trains, by one function (`resolve`)
with one list of checks: the graph's sizes (from the loaded graph, an R-MAT spec or a store's
manifest), the grid of ``--grid auto``, the grid-fit and memory checks, the devices,
whether ``--resume auto`` resumes and the checkpoint it resumes from, and the outputs.

It runs once per job. Where the process group exists (under torchrun or srun, or a local run
whose launching process could not learn the sizes cheaply) rank 0 resolves and every rank
receives the run (`resolved_by_rank_0`). A local run's launching process resolves before any
worker starts wherever the sizes are cheap to learn there (`sizes_at_launch`: a store's
manifest, a small graph, an R-MAT spec, or the graph ``--grid auto`` must price), so a bad run
stops before a worker starts, and its workers receive the resolved run. A big graph is not
loaded by the launching process only to learn its sizes (`plexus.train.checks.precheck_dataset`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from plexus_datasets import Graph
from plexus_datasets.trainable import check_trainable, graph_counts
from plexus_partition import read_manifest
from plexus_partition.model.grid import GridShape
from plexus_partition.launch.env import check_local_devices, default_device, local_world_size
from plexus_partition.store import graph_hash
from plexus.perfmodel import Calibration, CalibrationError, load_calibration

from . import checkpoint as ckpt
from .cachekeys import Source
from .checkpoint import load_resume
from .checks import check_launch_outputs, needs_validation_flag
from .errors import PROG, UsageError
from .placing import placed_engine
from .plan import (GraphSizes, ResolvedRun, RunRequest, check_grid_fits, check_launch_memory,
                   choose_run_grid)
from .runlog import console_line


@dataclass(frozen=True)
class KnownSizes:
    """What a run's graph is known by before it is resolved: its sizes, the graph where it was
    loaded to learn them, and the grid of the store they came from (None: not a store)."""

    sizes: GraphSizes
    graph: Graph | None = None
    store_grid: GridShape | None = None


@dataclass(frozen=True)
class Resolution:
    """What `resolve` produced: the run, and the graph it loaded to learn the sizes (the rank
    that resolved cuts its shard from it instead of loading it again; None where none was)."""

    run: ResolvedRun
    graph: Graph | None = None


def resolve(request: RunRequest, world: int | None, calibration: Calibration, *,
            known: KnownSizes | None = None, ranks_per_host: int | None = None,
            before_workers: bool = False, grid_rates: Calibration | None = None,
            rates_said: str | None = None, world_note: str = "") -> Resolution:
    """Resolve ``request`` for a job of ``world`` ranks (None: not known yet, the grid given),
    ``ranks_per_host`` of them on this host.

    ``known``: the graph's sizes where the caller learnt them (`sizes_at_launch`), else learnt
    here (a store's manifest, or the graph loaded). ``calibration``: the rates the run is priced
    and placed with; ``grid_rates`` (and ``rates_said``, how the line names them) the ones
    ``--grid auto`` chooses with where they differ (this machine's, `auto_rates`).
    ``before_workers``: no rank holds its set-up yet (a local run's launching process): the
    run's whole peak, set-up included, is checked here; otherwise each rank checks what training
    needs once it holds its shard (`plexus.train.plan.rank_peaks`). ``world_note`` follows the
    rank count on the --grid auto line. Raises the run's user errors (`UsageError`,
    `DatasetError`, ...)."""
    request = _resume_decided(request)
    known = known or _learn_sizes(request)
    sizes, graph = known.sizes, known.graph
    # the trainable and resume checks are every rank's in `load_local` (on its shard, with the
    # graph's hash it computes anyway): made here too only to stop a run before workers start
    if graph is not None and before_workers:
        check_trainable(graph.name, graph_counts(graph), graph.num_classes, graph.multilabel,
                        needs_validation_flag(request.train))
    grid = request.grid or known.store_grid
    if grid is None:  # --grid auto: the performance model prices the graph's sizes
        assert world is not None
        grid, why = choose_run_grid(request, sizes, world, grid_rates or calibration,
                                    ranks_per_host, world_note, rates_said)
        if not request.quiet:
            console_line(f"{PROG}: {why}")
    if world is not None:
        grid.check_world(world)
    check_grid_fits(grid, request.model, sizes)  # a store's: its manifest's sizes
    # a store's ranks price their memory from their shards (the manifest lacks the task kind
    # and Â's symmetry)
    from_store = known.store_grid is not None
    priced_here = before_workers and not from_store and not request.force
    if priced_here:
        check_launch_memory(request, grid, sizes)
    check_local_devices(ranks_per_host or grid.world_size, request.device)
    if request.resume and before_workers:  # the dataset too where it was loaded
        load_resume(request, None if graph is None else ckpt.DatasetInfo(
            graph.name, graph.num_nodes, graph.num_features, graph.num_classes,
            graph_hash(graph)))
    check_launch_outputs(request)  # rank 0's (whoever resolves speaks for rank 0)
    request = _placed(request, grid, sizes, world, ranks_per_host, calibration)
    run = ResolvedRun.of(request, grid, sizes,
                         rank_checks_memory=not (priced_here or request.force))
    return Resolution(run, graph)


def sizes_at_launch(request: RunRequest) -> KnownSizes | None:
    """The graph's sizes as a local run's launching process learns them cheaply: a store's
    manifest, the graph when it is small (`Source.small`: any problem in it shows before a
    worker starts) or when ``--grid auto`` must price it, an R-MAT spec's; None where only
    loading a big graph would tell (rank 0 resolves the run then)."""
    if request.shards:
        return _store_sizes(request.shards)
    source = Source.of_run(request)
    graph = source.small()
    if graph is None and request.grid is None:
        graph = source.load()
    if graph is not None:
        return KnownSizes(GraphSizes.of_graph(graph, request.model), graph)
    sizes = GraphSizes.of_spec(request.dataset, request.data_seed)
    return None if sizes is None else KnownSizes(sizes)


def resolve_at_launch(request: RunRequest) -> RunRequest:
    """A local run resolved by its launching process before any worker starts, where it learns
    the graph's sizes cheaply (`sizes_at_launch`); else the request, which rank 0 resolves once
    the workers have joined (a big graph is loaded by the ranks, not here too)."""
    world, world_note = local_world(request)
    known = sizes_at_launch(request)
    if known is None:
        return request
    calibration = load_calibration(request.calibration)
    rates, said = (auto_rates(request, world, calibration) if request.grid is None
        else (calibration, None))
    return resolve(request, world, calibration, known=known, ranks_per_host=world,
                   before_workers=True, grid_rates=rates, rates_said=said,
                   world_note=world_note).run


def local_world(request: RunRequest) -> tuple[int | None, str]:
    """How many workers a local run starts (None: the grid's), checked against its grid, and
    for --grid auto with no --world-size (one rank per local GPU or CPU core) the words saying
    where the count came from ('' otherwise)."""
    if request.world_size is not None:
        if request.grid is not None:
            request.grid.check_world(request.world_size, "--world-size is")
        return request.world_size, ""
    if request.grid is not None:
        return None, ""
    per = "GPU" if default_device(request.device).type == "cuda" else "CPU core"
    return local_world_size(request.device), f", one per {per} here"


def _resume_decided(request: RunRequest) -> RunRequest:
    """``--resume auto`` decided: resume where the checkpoint file exists, else start at epoch
    0 (said unless --quiet). Whoever resolves the run decides, once for the job and before any
    checkpoint of this run can be written; every rank receives the answer."""
    if request.resume != "auto":
        return request
    assert request.checkpoint is not None  # the options' relations: --resume needs it
    path = ckpt.checkpoint_path(Path(request.checkpoint).expanduser())
    found = path.is_file()
    if not found and not request.quiet:
        console_line(f"{PROG}: --resume auto: no checkpoint at {path} yet; starting from "
                     "epoch 0")
    return replace(request, resume=found)


def resolved_by_rank_0(request: RunRequest, ranks_per_host: int) -> Resolution:
    """Collective, once the process group exists: rank 0 resolves ``request`` (`resolve`, the
    calibration the request names), every rank receives the run; rank 0 keeps the graph it
    loaded. `PeerSetupFailed` on the other ranks where rank 0 failed (it raises its own)."""
    import torch.distributed as dist  # noqa: PLC0415 (ranks only)

    from .fromrank0 import from_rank_0  # noqa: PLC0415

    def produce() -> tuple[ResolvedRun, Any]:
        found = resolve(request, dist.get_world_size(), load_calibration(request.calibration),
                        ranks_per_host=ranks_per_host)
        return found.run, found.graph

    run, graph = from_rank_0(produce, "resolve the run")
    return Resolution(run, graph)


def _learn_sizes(request: RunRequest) -> KnownSizes:
    """The graph's sizes where the process group exists: a store's manifest, else the graph
    loaded (the rank that resolved cuts its shard from it)."""
    if request.shards:
        return _store_sizes(request.shards)
    graph = Source.of_run(request).load()
    return KnownSizes(GraphSizes.of_graph(graph, request.model), graph)


def _store_sizes(shards: str) -> KnownSizes:
    manifest = read_manifest(shards)
    return KnownSizes(GraphSizes.of_manifest(manifest), store_grid=GridShape.of(manifest["grid"]))


def _placed(request: RunRequest, grid: GridShape, sizes: GraphSizes, world: int | None,
            ranks_per_host: int | None, calibration: Calibration | None) -> RunRequest:
    """``request`` with its engine placed on nodes as --placement says (`placed_engine`)."""
    engine = placed_engine(request.placement, request.engine, grid, ranks_per_host,
                           calibration, lambda: request.spec(sizes, request.reads_store(
                               world or grid.world_size)))
    return request if engine is request.engine else replace(request, engine=engine)


def auto_rates(request: RunRequest, world: int, calibration: Calibration
               ) -> tuple[Calibration, str | None]:
    """The rates --grid auto prices with at launch, and how its line names them: on CPUs with no
    calibration given, this machine's, measured once and kept (`plexus.perfmodel.machine`);
    otherwise ``calibration`` (None: named by it). One rank has one grid: nothing to measure."""
    from plexus.perfmodel.machine import machine_cache_dir, machine_rates  # noqa: PLC0415

    folder = machine_cache_dir()
    if (calibration.calibrated or calibration.profile or world <= 1 or folder is None
            or default_device(request.device).type != "cpu"):
        return calibration, None

    def say(text: str) -> None:
        if not request.quiet:
            console_line(f"{PROG}: --grid auto: {text}; --calibration FILE gives them")

    try:
        rates = machine_rates(world, folder, say=say)
    except CalibrationError as e:
        raise UsageError(str(e)) from None
    return rates.calibration, rates.said
