"""The cache of shard stores behind ``plexus-train --dataset``: the graph is partitioned once, by
one process, and every rank reads only its own shard. This module finds or builds a run's store
(in memory or out of core, under the source's lock), keeps the cache under its cap and hands
the store to the ranks; the keys are `plexus.train.cachekeys`, the directory and its checks
`plexus.train.cachedir`, the upkeep (holds, listing, eviction) `plexus.train.cacheuse`.

A store in the cache is reusable exactly when it would come out identical: its key is the graph's
source (the dataset spec, the size and modification time of every file it is read from, the
dataset seed, ``--symmetrize``, the store format and Plexus version) and the partition (grid,
number of stages and each stage's order, permutation kind and seed, aggregation). Layout of a
cache directory::

    <name>-<key>/            a shard store (`plexus_partition.store`), written atomically and
                             sealed (`plexus_datasets.base.owned`: this user's key, exactly its
                             files)
    sources/<source>.json    what a source's graph is (name, sizes, content hash), so a later run
                             knows the stage orders and the memory it needs without loading it
    locks/<source>.lock      held (flock) while a store of that source is built

A run builds under the source's lock: a second run on the same graph waits for it and then
reuses its store, and two runs never write one store at once. The builder is the process that
launches the job (or rank 0 under torchrun/srun); it partitions in a child process
(`plexus.runtime.child`) unless the graph is small and already loaded, so its own memory stays
that of a launcher. A run holds its store against eviction while it runs; with a size cap
(``--cache-max-gb``, ``$PLEXUS_CACHE_MAX_GB``) the least recently used stores no run holds go
once a run has its own (`plexus.train.cacheuse`); a run rebuilds what it needs.

The cache is trusted only when it is this user's and nobody else can write it
(`Cache.check_trusted`, docs/shared-machines.md); a store is reused only with this user's seal and
exactly the files sealed, rebuilt when it is this user's but changed since, and otherwise refused in
one line and left where it is.
"""

from __future__ import annotations

import errno
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, TypeVar

from plexus_datasets.base import owned
from plexus_partition.model.grid import GridShape
from plexus_partition.model.model import ModelConfig
from plexus.core.units import format_bytes
from plexus_datasets import DatasetError, Graph
from plexus_datasets.convert import streamed_spec
from plexus_datasets.diskgraph import FORMAT as GRAPH_FORMAT
from plexus_datasets.spec import feature_mode
from plexus_partition import write_store
from plexus_partition.store import FORMAT as STORE_FORMAT
from plexus.perfmodel import ModelSpec
from plexus.runtime.child import run_in_child
from plexus.runtime.memstats import peak_rss_bytes

# the cache's keys and directory, named here too (`plexus.train.cache` is the cache's front)
from .cachedir import CACHE_ENV, Cache, CachedStore, default_cache_dir  # noqa: F401
from .cachekeys import Partition, Sizes, Source, key_digest, store_name  # noqa: F401
from .cacheuse import evict, hold_store
from .errors import CacheError
from .plan import RunRequest, auto_grid, precheck_partition

#: a request, or a run already resolved (the cache keeps its kind: `cached_options`)
Plan = TypeVar("Plan", bound=RunRequest)


# ---- building ----------------------------------------------------------------------------
@dataclass(frozen=True)
class BuildRequest:
    """Everything the builder needs (picklable: it may run in a child process)."""

    source: Source
    source_key: dict
    cache_root: str
    grid: GridShape | None  # None: --grid auto, chosen from the graph's sizes for `world` ranks
    world: int | None
    model: ModelConfig
    perm: str
    check_memory: bool = True  # refuse a partitioning predicted not to fit the host (not --force)


def choose_grid(request: BuildRequest, sizes: Sizes) -> GridShape:
    """The request's grid, or for --grid auto the performance model's choice."""
    if request.grid is not None:
        return request.grid
    assert request.world is not None
    return auto_grid(request.world, ModelSpec(sizes.num_nodes, sizes.nnz, sizes.num_features,
                                              sizes.num_classes, request.model, name=sizes.name))


def streams(request: BuildRequest) -> bool:
    """Whether the store is built out of core (`build_streamed`): a source the converters read
    in pieces (R-MAT, OGB, a graph directory), taken as it is (features too: --features row is
    done in memory), on a grid given in advance (--grid auto needs the graph's sizes first)."""
    return (request.grid is not None and not request.source.symmetrize
            and feature_mode(request.source.spec, request.source.features) == "raw"
            and streamed_spec(request.source.spec))


def check_converted(graph_dir: Path) -> None:
    """Remove the cache's converted graph ``graph_dir`` when its arrays no longer have the
    sha256 its header records (changed in place, even to the same size), saying so on stderr:
    the conversion then runs again instead of training on what is there now."""
    from plexus_datasets.diskgraph import DiskGraph, is_disk_graph  # noqa: PLC0415

    if not is_disk_graph(graph_dir):
        return
    try:
        DiskGraph.open(graph_dir).verify()
    except (DatasetError, OSError) as e:
        print(f"plexus: cached graph {graph_dir} is damaged ({str(e)[:200]}); converting it "
              "again", file=sys.stderr)
        owned.remove_tree(graph_dir, seal=GRAPH_FORMAT)


def build_streamed(request: BuildRequest) -> tuple[str, Sizes, int]:
    """`build_store` out of core: the source is converted into a graph directory in pieces (kept
    in the cache's ``graphs/`` for stores of other grids), which the streaming partitioner cuts;
    no process holds the whole graph, and the store equals the in-memory build's."""
    from plexus_datasets.convert import convert_dataset  # noqa: PLC0415
    from plexus_datasets.work import Runner  # noqa: PLC0415
    from plexus_partition.pipeline import PartitionJob  # noqa: PLC0415

    source, model, grid = request.source, request.model, request.grid
    assert grid is not None
    cache = Cache(Path(request.cache_root))
    digest = key_digest(request.source_key)[:32]
    graphs, work = cache.subdir("graphs"), cache.subdir("work")
    check_converted(graphs / digest)
    try:
        with Runner(work / f"{digest}-convert") as runner:
            disk = convert_dataset(source.spec, graphs / digest, runner,
                                   work / f"{digest}-convert", root=source.root,
                                   seed=source.dataset_seed)
    except (ValueError, TypeError, LookupError, ArithmeticError):
        owned.remove_tree(work / f"{digest}-convert", quiet=True)  # bad input: no resuming
        raise
    owned.remove_tree(work / f"{digest}-convert", quiet=True)
    building = work / f"{digest}-{grid}-store"
    if building.exists():
        owned.remove_tree(building)  # a crashed build's: the partitioner's own work dir resumes
    m = PartitionJob(disk, building, grid, model.num_stages,
                     model.orders(disk.num_features, disk.num_classes), request.perm,
                     source.seed, aggregation=model.aggregation, alone=True).run()
    sizes = Sizes(m["dataset"], m["num_nodes"], m["num_features"], m["num_classes"], m["nnz"],
                  m["graph_sha256"])
    path = cache.root / store_name(request.source_key, partition := Partition(
        grid, model, request.perm, source.seed), sizes)
    if cache.complete(path, partition, sizes):
        owned.remove_tree(building)
    else:
        if path.exists() or path.is_symlink():
            owned.remove_tree(path, seal=STORE_FORMAT)  # only a store this user sealed
        owned.move(building, path)
        cache.stamp(path, m["ranks"])
    cache.write_sizes(request.source_key, sizes)
    return str(path), sizes, peak_rss_bytes()


def build_store(request: BuildRequest, graph: Graph | None = None) -> tuple[str, Sizes, int]:
    """Partition the source's graph into the cache (out of core where it `streams`, else loaded
    here unless given); returns the store's path, the graph's sizes and this process's peak
    RSS."""
    if graph is None and streams(request):
        return build_streamed(request)
    if graph is None:
        graph = request.source.load()
    sizes = Sizes.of(graph)
    grid = choose_grid(request, sizes)
    partition = Partition(grid, request.model, request.perm, request.source.seed)
    cache = Cache(Path(request.cache_root))
    path = cache.root / store_name(request.source_key, partition, sizes)
    if not cache.complete(path, partition, sizes):
        model = request.model  # (write_store replaces only a store this user sealed)
        m = write_store(graph, path, grid, model.num_stages,
                        model.orders(graph.num_features, graph.num_classes), request.perm,
                        request.source.seed, aggregation=model.aggregation)
        cache.stamp(path, m["ranks"])
    cache.write_sizes(request.source_key, sizes)
    return str(path), sizes, peak_rss_bytes()


def obtain_store(cache: Cache, request: BuildRequest, graph: Graph | None = None
                 ) -> CachedStore:
    """The store for this request: found in the cache, or built (in this process when ``graph``
    is given, else in a child process), under the source's lock."""
    start = time.perf_counter()
    key = request.source_key

    def found(sizes: Sizes | None) -> CachedStore | None:
        if sizes is None:
            return None
        grid = choose_grid(request, sizes)
        partition = Partition(grid, request.model, request.perm, request.source.seed)
        path = cache.root / store_name(key, partition, sizes)
        if not path.exists() and not path.is_symlink():
            return None
        why = owned.seal_problem(path, STORE_FORMAT, exact=False)
        if why is not None:  # not ours to reuse, nor to remove
            raise CacheError(f"{why}; not reusing it, nor removing it (remove it yourself if "
                             "it is yours, or give another --cache DIR)")
        why = owned.seal_problem(path, STORE_FORMAT)
        if why is not None:  # ours, damaged or edited since: built again
            cache.say(f"cached store {why}; building it again")
            return None
        hold = hold_store(cache.root, path)  # first: an eviction under way ends before this
        if not cache.complete(path, partition, sizes):
            hold.release()
            return None
        return CachedStore(str(path), False, time.perf_counter() - start, sizes, grid, hold=hold)

    hit = found(cache.read_sizes(key))
    if hit is not None:
        return hit
    with cache.locked(key) as waited:
        hit = found(cache.read_sizes(key))  # another run may have built it meanwhile
        if hit is not None:
            return replace(hit, waited_s=waited)
        built = time.perf_counter()
        if graph is None:  # a small graph costs less to partition here than to spawn for
            graph = request.source.small()
        try:
            if graph is not None:
                path, sizes, peak = build_store(request, graph)
                peak = 0  # this process's peak is not the build's alone
            else:
                if request.check_memory and not streams(request):  # out of core: flat memory
                    precheck_partition(request.source.spec, request.source.seed,
                                       request.model, request.perm)
                path, sizes, peak = run_in_child(f"partitioning {request.source.spec}",
                                                 build_store, request)
        except OSError as e:  # a full disk, a quota: the writers removed their partial files
            if e.errno not in FULL:
                raise
            raise build_failure(e, cache.root) from None
        # still under the build lock: held before any other run could see it unused
        hold = hold_store(cache.root, Path(path))
    return CachedStore(path, True, time.perf_counter() - built, sizes,
                       choose_grid(request, sizes), peak, waited, hold=hold)


#: The errors of a write that found no room: a full disk, a quota, a file-size limit, a
#: read-only file system.
FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS)


def build_failure(error: OSError, root: Path) -> CacheError:
    """The one line of a store build that could not write (`CacheError`): the file and the
    cause, and what frees the run from it."""
    where = f" ({error.filename})" if error.filename else ""
    return CacheError(f"cannot write the shard store into the cache {root}{where}: "
                      f"{error.strerror or error}; free space there, or give another --cache "
                      "DIR, or --no-cache")


def keep_under_cap(cache: Cache, store: CachedStore, max_bytes: int | None) -> None:
    """With a cap, evict the least recently used entries no run holds (never ``store``) until the
    cache fits it, and say what went."""
    if max_bytes is None:
        return
    gone = evict(cache.root, max_bytes, keep=(Path(store.path),))
    if gone:
        freed = sum(e.bytes for e in gone)
        cache.say(f"cache over its cap of {format_bytes(max_bytes)}: removed "
                  f"{len(gone)} least recently used entr{'y' if len(gone) == 1 else 'ies'} "
                  f"({format_bytes(freed)}) that no run holds")


def cached_options(plan: Plan, cache: Cache, world: int | None,
                   graph: Graph | None = None, force: bool = False
                   ) -> tuple[Plan, CachedStore]:
    """``plan`` reading its shards from the cache's store for its dataset (found or built;
    ``force``: build even where the partitioning is predicted not to fit in memory).

    A `ResolvedRun` stays one: the store is cut on its grid from the graph it was resolved
    for, so its grid and sizes hold; only where its shards come from changes (``shards``; how
    the store was come by is the store's ``summary()``, a fact of the job: `JobFacts.cache`).
    A `RunRequest` (--grid auto under torchrun/srun, a big graph) gets the store's grid and is
    resolved from the store's manifest."""
    cache.check_trusted()
    source = Source.of_run(plan)
    request = BuildRequest(source, source.key(), str(cache.root), plan.grid, world, plan.model,
                           plan.perm, check_memory=not force)
    store = obtain_store(cache, request, graph)
    keep_under_cap(cache, store, plan.cache_max_bytes)
    return replace(plan, shards=store.path, grid=store.grid), store


def join_cached_store(plan: RunRequest, say: Callable[[str], None]
                      ) -> tuple[tuple[RunRequest, dict], Any]:
    """Collective, under torchrun or srun once the process group exists: rank 0 finds or builds
    the store (`cached_options`; the cache directory must be one every rank sees), the others
    wait for it, then all read their shards from it. Returns the options with the store's
    summary (`JobFacts.cache`) and rank 0's hold on the store against eviction (None on the
    other ranks: keep it for the run). Raises
    `PeerSetupFailed` on the other ranks when rank 0 failed (rank 0 raises its own error)."""
    import torch.distributed as dist  # noqa: PLC0415 (ranks only)

    from .fromrank0 import from_rank_0  # noqa: PLC0415

    def provide() -> tuple[tuple[RunRequest, dict], Any]:
        new, store = cached_options(plan, Cache(Path(plan.cache_dir), say),  # type: ignore
                                    dist.get_world_size(), force=plan.force)
        say(store.line())
        return (new, store.summary()), store.hold

    return from_rank_0(provide, "provide the shard store")
