"""`partition_to_store` (a `PartitionJob`: prepare, convert, cut, publish): any dataset to a shard
store, in bounded memory, on one or many processes."""

from __future__ import annotations

import errno
import fcntl
import os
from dataclasses import KW_ONLY, dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from plexus_partition.model.grid import GridError, GridShape
from plexus_datasets.base.lockfile import FileLock, LockBusy, LockError, acquire
from plexus_partition.model.layout import DEFAULT_PERMUTATION, grid_misfit, layer_plans
from plexus_partition.model.model import AUTO_ORDER, ModelConfig
from plexus_partition.model.ops import KINDS
from plexus_datasets.base.tasks import PhaseTime
from plexus_datasets.base.values import one_line
from plexus_datasets.canonical import BUCKET_ENTRIES, CHUNK_EDGES
from plexus_datasets.convert import convert_dataset
from plexus_datasets.diskgraph import DiskGraph, MemoryGraph, is_disk_graph
from plexus_datasets.diskwrite import write_graph
from plexus_datasets.errors import DatasetError
from plexus_datasets.graph import Graph
from plexus_datasets.spec import source_fingerprint, spec_paths
from plexus_datasets.work import Runner

from .jobs import GroupRunner, PoolRunner, launched, launcher_env
from .permutations import Permutation
from .sourcefile import check_graph_source, record_graph_source
from .store import (ShardStoreError, check_out_dir, is_store, replace_store_dir,
                    store_aggregation_of)
from .stream import Settings, config_key, partition_source
from .workdir import stage_work_dir
from .streamjob import PartitionError
from plexus_datasets.base import owned
from plexus_datasets.base import gate

#: Failures that no rerun of the same work gets past (the input, the configuration, the work
#: directory itself; errors of values that name no file among them): the work is removed
BAD_INPUT = (ValueError, TypeError, LookupError, ArithmeticError, StopIteration)
#: how long a rank of a launcher job waits for the others at the end of a phase
GROUP_TIMEOUT_S = 6 * 3600.0


def auto_stage_orders(num_stages: int, hidden: int, num_features: int, num_classes: int,
                      model: str = "gcn") -> list[str]:
    """"auto" for ``num_stages`` stages of the ``model`` kind (`plexus_partition.model.ops.KINDS`,
    which declares its stages per layer) with ``hidden`` wide hidden layers, as plexus-train
    resolves its default (`plexus_partition.model.model.ModelConfig.orders`); a kind of several
    stages per layer (GIN: agg, dense) needs a multiple of them."""
    per_layer = len(KINDS[model].stage_ops)
    if num_stages % per_layer:
        raise ValueError(f"{num_stages} stages do not make whole {model} layers "
                         f"({per_layer} stages each): give a multiple of {per_layer}")
    return ModelConfig(kind=model, num_layers=num_stages // per_layer, hidden=hidden,
                       order=AUTO_ORDER).orders(num_features, num_classes)


def partition_to_store(dataset: Any, out_dir: str | os.PathLike,
                       grid: GridShape | Mapping[str, int] | str, num_stages: int,
                       orders: Sequence[str] | str = "agg",
                       perm: str | Permutation = DEFAULT_PERMUTATION, seed: int = 0, *,
                       aggregation: str | None = None, model: str | None = None,
                       root: str | None = None, dataset_seed: int = 0,
                       jobs: int = 1, graph_dir: str | os.PathLike | None = None,
                       chunk_edges: int = CHUNK_EDGES, bucket_entries: int = BUCKET_ENTRIES,
                       feature_dtype: str | None = None, progress: bool | None = None,
                       timings: list[PhaseTime] | None = None,
                       timeout_s: float = GROUP_TIMEOUT_S, hidden: int | None = None,
                       keep_existing: bool = False) -> dict:
    """Partition ``dataset`` into the shard store ``out_dir`` with memory that does not grow with
    the number of edges; returns the store's manifest (what `read_manifest` returns).

    ``dataset``: a dataset spec (``rmat:...`` and the OGB names are converted in pieces, other
    specs are loaded in memory first), a graph directory (its path, ``graph:PATH``, or an
    opened `plexus_datasets.diskgraph.DiskGraph`), or an in-memory `Graph`. ``grid``,
    ``num_stages`` (stages), ``orders``, ``perm``, ``seed``, ``aggregation`` and ``model`` are
    those of `write_store` (the stores are identical); ``orders`` may also be "auto",
    plexus-train's default, resolved once the graph's widths are known for the ``model`` kind
    (which it then needs) of ``hidden`` wide hidden layers (combine first on the layers that
    narrow). ``root``/``dataset_seed``: as `load_dataset` takes them.

    Processes: ``jobs`` worker processes on this machine; under torchrun or srun every rank of
    the job takes a share of the tasks instead (the output's directory must then be on a
    filesystem all ranks share; rank 0 writes the manifest). The work goes into a directory
    beside ``out_dir`` named after the configuration: a run that was killed (even with
    ``kill -9``) leaves any previous store intact, and running it again resumes from the tasks
    it had finished and gives the same store. A converted dataset is kept in ``graph_dir`` when
    given (and read from there when it already holds a graph directory); otherwise it goes with
    the work. ``chunk_edges``/``bucket_entries`` bound the memory (about 60 bytes per edge of a
    chunk, 40 per entry of a bucket) and never change the result. ``timings`` receives every
    phase's `PhaseTime`. The store is written under an exclusive lock beside it
    (``.<out>.lock``), held until its manifest is in place: a second partition to the same
    ``out_dir`` while one runs is refused, and with ``keep_existing`` an existing store found
    once the lock is taken is refused rather than replaced. The work directory's name comes from
    the configuration and a fingerprint of the source's files (their sizes and modification
    times), so changed input files never resume old work (`plexus_partition.workdir`).

    Raises `ShardStoreError` (target), `DatasetError` (input), `PartitionError` (configuration);
    after such an error nothing is left on disk.
    """
    return PartitionJob(dataset, out_dir, grid, num_stages, orders, perm, seed,
                        aggregation=aggregation, model=model, root=root,
                        dataset_seed=dataset_seed, jobs=jobs, graph_dir=graph_dir,
                        chunk_edges=chunk_edges, bucket_entries=bucket_entries,
                        feature_dtype=feature_dtype, progress=progress, timeout_s=timeout_s,
                        hidden=hidden, keep_existing=keep_existing).run(timings)


@dataclass(frozen=True)
class Prepared:
    """A `PartitionJob`'s values checked and resolved, before anything is written: the target,
    the grid, the stages' plans ("agg" for all until "auto" orders are resolved), the Â, the
    launcher job this process is a rank of (None: none), the source and its spec (to convert;
    None: a graph already), its identity and the work's configuration key (None: no resuming)."""

    out: Path
    shape: GridShape
    auto: bool
    plans: list
    aggregation: str
    env: Any
    settings: Settings
    source: Any
    spec: str | None
    identity: Any
    key: str | None


@dataclass(frozen=True)
class PartitionJob:
    """One partition of a dataset into a shard store, as a value (the arguments of
    `partition_to_store`, which builds one); `run` does its phases in order: `prepare` (check
    and resolve the values, nothing written), `convert` (the source as a graph the partitioner
    streams), `cut` (the out-of-core partitioner, `plexus_partition.stream`) and `publish`
    (the finished store moved into place)."""

    dataset: Any
    out_dir: str | os.PathLike
    grid: GridShape | Mapping[str, int] | str
    num_stages: int
    orders: Sequence[str] | str = "agg"
    perm: str | Permutation = DEFAULT_PERMUTATION
    seed: int = 0
    _: KW_ONLY  # the rest by keyword, as partition_to_store takes them
    aggregation: str | None = None
    model: str | None = None
    root: str | None = None
    dataset_seed: int = 0
    jobs: int = 1
    graph_dir: str | os.PathLike | None = None
    chunk_edges: int = CHUNK_EDGES
    bucket_entries: int = BUCKET_ENTRIES
    feature_dtype: str | None = None
    progress: bool | None = None
    timeout_s: float = GROUP_TIMEOUT_S
    hidden: int | None = None
    keep_existing: bool = False
    #: partition in this process (and its pool) even under torchrun/srun: a caller that cuts on
    #: one rank for the others (plexus-train's cache), whose peers never join the job's phases
    alone: bool = False

    def run(self, timings: list[PhaseTime] | None = None) -> dict:
        """Every phase in order, under the store's lock (rank 0 of a launcher job, or the one
        process) and the work directory's; returns the manifest. ``timings`` receives every
        phase's `PhaseTime`. Bad input, configuration or target removes the work; anything else
        (a worker killed, an interrupt, no memory) keeps it for a rerun to resume."""
        prep = self.prepare()
        env, out, key = prep.env, prep.out, prep.key
        store_lock = (_store_lock(out, self.keep_existing) if env is None or env.rank == 0
            else None)
        try:
            work = stage_work_dir(out, key)
            resumed = (work / "done").exists()
        except BaseException:
            if store_lock is not None:
                store_lock.release(remove=True)
            raise
        runner = _runner(work, env, self.jobs, self.timeout_s, self.progress)
        lock = _lock(work) if runner.leader else None
        try:
            manifest = self.cut(prep, self.convert(prep, runner, work), runner, work)
        except (OSError, *BAD_INPUT) as e:
            failure = _failure(e, runner, work, key, resumed)
            if failure is e:
                raise
            raise failure from None
        # anything else (a worker killed, an interrupt, no memory) keeps the work: a rerun resumes
        finally:
            if timings is not None:
                timings.extend(runner.timings)
            runner.close()
            if lock is not None:
                os.close(lock)
            if store_lock is not None:
                store_lock.release(remove=True)
        if runner.leader:
            owned.remove_tree(work, quiet=True)
        return manifest

    def prepare(self) -> Prepared:
        """Check and resolve every value before anything is written: the target, "auto" orders'
        needs, the Â, the grid and stages, the processes, the source and the work's key."""
        out = check_out_dir(self.out_dir)
        orders, model, hidden = self.orders, self.model, self.hidden
        auto = isinstance(orders, str) and orders.strip().lower() == AUTO_ORDER
        if auto and (hidden is None or hidden < 1):
            raise PartitionError(f"orders 'auto' need the hidden width (>= 1), got {hidden}")
        if auto and model is None:
            raise PartitionError("orders 'auto' need the model kind the store is cut for "
                                 "(model=)")
        try:
            aggregation = store_aggregation_of(model, self.aggregation)
        except ShardStoreError as e:
            raise PartitionError(str(e)) from None
        try:
            grid = self.grid
            shape = GridShape.of(GridShape.parse(grid) if isinstance(grid, str) else grid)
            plans = layer_plans(self.num_stages, "agg" if auto else orders)
        except (GridError, ValueError) as e:
            raise PartitionError(str(e)) from None
        if self.jobs < 1:
            raise PartitionError(f"jobs must be >= 1, got {self.jobs}")
        env = launcher_env() if launched() and not self.alone else None
        if env is not None and self.jobs > 1:
            raise PartitionError("under torchrun/srun every rank is one job; leave --jobs at 1")
        settings = Settings(chunk_edges=max(1, int(self.chunk_edges)),
                            bucket_entries=max(1, int(self.bucket_entries)))
        source, spec = _source(self.dataset, self.root)
        identity = _source_identity(source, spec, self.root, self.dataset_seed, self.graph_dir,
                                    self.feature_dtype)
        if env is not None and identity is None:
            raise PartitionError("under torchrun/srun, give the graph as a spec or a graph "
                                 "directory, not one held in memory")
        key = None if identity is None or isinstance(self.perm, Permutation) else config_key(
            {"source": identity, "grid": shape.as_dict(), "layers": self.num_stages,
             "orders": ["auto", hidden] if auto else [p.order for p in plans],
             "perm": self.perm, "seed": self.seed, "aggregation": aggregation, "model": model,
             "chunk": settings.chunk_edges, "bucket": settings.bucket_entries, "version": 3})
        return Prepared(out, shape, auto, plans, aggregation, env, settings, source, spec,
                        identity, key)

    def convert(self, prep: Prepared, runner: Runner, work: Path) -> Any:
        """The source as a graph the partitioner streams: a spec converted in pieces (or read
        from ``graph_dir``), a graph in memory written to the work for several processes."""
        if prep.spec is not None:
            return _converted(prep.spec, prep.identity, runner, work, self.root,
                              self.dataset_seed, self.graph_dir, self.feature_dtype,
                              prep.settings)
        if isinstance(prep.source, MemoryGraph) and self.jobs > 1:
            runner.once("write-graph", _write, prep.source.graph, str(work / "graph"))
            return DiskGraph.open(work / "graph")
        return prep.source

    def cut(self, prep: Prepared, source: Any, runner: Runner, work: Path) -> dict:
        """"auto" orders resolved from the graph's widths, the grid checked against the graph,
        and the store cut (`plexus_partition.stream.partition_source`), which `publish`es it
        when finished; returns the manifest."""
        orders, plans = self.orders, prep.plans
        if prep.auto:  # the widths are known now
            orders = auto_stage_orders(self.num_stages, self.hidden,  # type: ignore[arg-type]
                                       source.num_features, source.num_classes,
                                       self.model)  # type: ignore[arg-type]
            plans = layer_plans(self.num_stages, orders)
        problem = grid_misfit(prep.shape, plans, source.num_nodes, [source.num_features]
                              + [None] * (self.num_stages - 1) + [source.num_classes])
        if problem:
            raise PartitionError(problem)
        return partition_source(source, prep.out, prep.shape, self.num_stages, orders,
                                self.perm, self.seed, prep.aggregation, runner, work / "part",
                                prep.settings, self.publish, self.model)

    @staticmethod
    def publish(new: Path, out: Path) -> None:
        """The finished store ``new`` moved to ``out`` (an old store there is replaced only now:
        `plexus_partition.store.replace_store_dir`)."""
        replace_store_dir(new, out)


def _failure(e: BaseException, runner: Runner, work: Path, key: str | None,
             resumed: bool) -> BaseException:
    """What a partition that failed with ``e`` (an `OSError` or bad input) raises, once the
    leader has settled its work: a full disk keeps a resumable configuration's finished work
    and says so; bad input, configuration or work (or any other `OSError`) removes it, and the
    altered work of an earlier run is named as such."""
    if isinstance(e, OSError):
        full = e.errno in (errno.ENOSPC, errno.EDQUOT)
        if runner.leader and not (full and key is not None):
            owned.remove_tree(work, quiet=True)
        if not full:
            return e
        kept = "; the finished work is kept and resumes" if key is not None else ""
        return PartitionError(f"{e.filename or work}: no space left on device; free some space "
                              f"and run the same command again{kept}")
    if runner.leader:  # bad input, configuration or work: nothing to resume
        owned.remove_tree(work, quiet=True)
    if resumed and not isinstance(e, ValueError):  # what an earlier run left, altered
        return PartitionError(f"{work}: resuming it failed ({type(e).__name__}: "
                              f"{one_line(e)[:200]}); the work directory was damaged and is "
                              "removed, run again")
    return e


def _source_identity(source: Any, spec: str | None, root: str | None, dataset_seed: int,
                     graph_dir: str | os.PathLike | None, feature_dtype: str | None) -> Any:
    """What names the source in the work directory's key: a graph directory's content hash, a
    spec with what it is read from (its files' fingerprint), or None for a graph in memory."""
    if isinstance(source, DiskGraph):
        return source.content_sha256
    if spec is None:
        return None
    return {"spec": spec, "root": root, "seed": dataset_seed, "graph_dir":
            str(graph_dir) if graph_dir else None, "features": feature_dtype,
            "files": _fingerprint(spec, root)}


def _runner(work: Path, env: Any, jobs: int, timeout_s: float,
            progress: bool | None) -> Runner:
    """The launcher's ranks (``env``), a pool of ``jobs`` processes, or this process alone."""
    if env is not None:
        return GroupRunner(work, env, timeout_s, progress)
    if jobs > 1:
        return PoolRunner(work, jobs, progress)
    return Runner(work, progress)


def _converted(spec: str, identity: Any, runner: Runner, work: Path, root: str | None,
               dataset_seed: int, graph_dir: str | os.PathLike | None,
               feature_dtype: str | None, settings: Settings) -> DiskGraph:
    """The graph directory of ``spec``: the kept ``graph_dir`` when it holds one converted from
    the same source, else converted in pieces (into ``graph_dir``, recorded, or the work)."""
    target = Path(graph_dir) if graph_dir else work / "graph"
    if graph_dir and is_disk_graph(target):
        source = DiskGraph.open(target)
        check_graph_source(target, identity)
        return source
    source = convert_dataset(spec, target, runner, work / "convert", root=root,
                             seed=dataset_seed, chunk_edges=settings.chunk_edges,
                             bucket_entries=settings.bucket_entries,
                             feature_dtype=feature_dtype)
    if graph_dir and runner.leader:
        record_graph_source(target, identity)
    return source


def _source(dataset: Any, root: str | None) -> tuple[Any, str | None]:
    """(the source to read, or None; the spec to convert, or None)."""
    if isinstance(dataset, Graph):
        return MemoryGraph(dataset), None
    if isinstance(dataset, DiskGraph):
        return dataset, None
    if isinstance(dataset, Path) or (isinstance(dataset, str) and is_disk_graph(dataset)):
        return DiskGraph.open(dataset), None
    if isinstance(dataset, str):
        if dataset.strip().lower().startswith("graph:"):
            from plexus_datasets.spec import spec_path  # noqa: PLC0415

            return DiskGraph.open(spec_path(dataset.strip()[6:], root, dataset)), None
        return None, dataset
    raise PartitionError(f"cannot partition a {type(dataset).__name__}: give a dataset spec, a "
                         "graph directory or a Graph")


def _fingerprint(spec: str, root: str | None) -> list[list]:
    """The source files' fingerprint (`plexus_datasets.spec.source_fingerprint`)."""
    try:
        return source_fingerprint(spec_paths(spec, root))
    except OSError as e:
        raise DatasetError(f"{spec}: cannot read its files ({e.strerror or e})") from None


def _store_lock(out: Path, keep_existing: bool) -> FileLock:
    """The lock of the store ``out`` (`plexus_datasets.base.lockfile`), held until its manifest is
    in place; refuses when another partitioner holds it, or, with ``keep_existing``, when a store is
    there once it is held."""
    path = out.parent / f".{out.name}.lock"
    try:
        gate.make_folder(out.parent)
    except gate.UnsafeTargetError as e:
        raise ShardStoreError(str(e)) from None
    except OSError as e:
        raise ShardStoreError(f"{out.parent}: cannot create it ({e.strerror or e})") from None
    try:
        lock = acquire(path)
    except LockBusy as e:
        holder = f" (pid {e.holder})" if e.holder else ""
        raise ShardStoreError(f"{out}: another partitioner is writing this store{holder}; wait "
                              "for it to finish, or write elsewhere") from None
    except LockError as e:
        raise ShardStoreError(str(e)) from None
    try:
        if not lock.current():  # its holder removed the file on release, as we will
            raise ShardStoreError(f"{out}: another partitioner was writing this store; try "
                                  "again")
        check_out_dir(out)  # what is there may have changed before the lock was ours
        if keep_existing and is_store(out):
            raise ShardStoreError(f"{out}: a shard store is already there (written while this "
                                  "run started); refusing to replace it")
    except BaseException:
        lock.release(remove=True)
        raise
    return lock


def _write(graph: Graph, out: str) -> dict:
    if not is_disk_graph(out):
        write_graph(graph, out)
    return {}


def _lock(work: Path) -> int:
    """Hold the work directory for this run (released when the process ends, however)."""
    fd = gate.open_file(work / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise PartitionError(f"{work}: another plexus-partition is writing this store; wait "
                             "for it to finish") from None
    return fd
