"""The cache of shard stores behind ``plexus-train --dataset``: the graph is partitioned once, by
one process, and every rank reads only its own shard.

A store in the cache is reusable exactly when it would come out identical: its key is the graph's
source (the dataset spec, the size and modification time of every file it is read from, the
dataset seed, ``--symmetrize``, the store format and Plexus version) and the partition (grid,
number of stages and each stage's order, permutation kind and seed, aggregation). Layout of a
cache directory::

    <name>-<key>/            a shard store (`plexus.partitioners.store`), written atomically and
                             sealed (`plexus.core.owned`: this user's key, exactly its files)
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
(`Cache.check_trusted`, README "Shared machines"); a store is reused only with this user's seal and exactly the files
sealed, rebuilt when it is this user's but changed since, and otherwise refused in one line and
left where it is.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import stat
import sys
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Callable, Iterator

from plexus.core.atomic import atomic_file
from plexus.core.grid import GridShape
from plexus.core.units import format_bytes
from plexus.datasets import DatasetError, Graph, gcn_nnz, load_dataset, spec_paths
from plexus.datasets.convert import streamed_spec
from plexus.datasets.spec import (MAX_SOURCE_FILES, content_key, feature_mode,
                                  source_fingerprint)
from plexus.datasets.files import open_regular
from plexus.core.model import ModelConfig
from plexus.datasets.diskgraph import FORMAT as GRAPH_FORMAT
from plexus.partitioners import read_manifest, write_store
from plexus.partitioners.store import FORMAT as STORE_FORMAT, VERSION as STORE_VERSION, graph_hash
from plexus.partitioners.store import file_sha256, is_own_store
from plexus.perfmodel import ModelSpec
from plexus.runtime.child import run_in_child
from plexus.runtime.memstats import peak_rss_bytes

from .errors import CacheError
from .cacheuse import evict, hold_store, untrusted_dir
from .plan import RunPlan, auto_grid, precheck_partition
from plexus.core import owned

CACHE_ENV = "PLEXUS_CACHE_DIR"


def default_cache_dir() -> Path:
    """``$PLEXUS_CACHE_DIR``, else ``$XDG_CACHE_HOME/plexus/stores``, else
    ``~/.cache/plexus/stores``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "plexus" / "stores"


# ---- keys ------------------------------------------------------------------------------------
def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class Source:
    """The graph a run trains on, as the cache knows it without loading it."""

    spec: str
    root: str | None
    seed: int  # the permutation's (--seed), and the dataset's unless data_seed is given
    symmetrize: bool
    data_seed: int | None = None  # --split-seed: the dataset's seeded parts (None: seed)
    features: str = "auto"  # --features (plexus.datasets.FEATURE_MODES)

    @property
    def dataset_seed(self) -> int:
        return self.seed if self.data_seed is None else self.data_seed

    def key(self) -> dict:
        """What identifies the graph: a change to any of it gives another graph (or may)."""
        from plexus import __version__  # noqa: PLC0415

        try:
            files = source_fingerprint(spec_paths(self.spec, self.root), MAX_SOURCE_FILES)
        except DatasetError as e:
            raise CacheError(f"{e}; partition it once with plexus-partition and train from "
                             "--shards, or use --no-cache") from None
        except OSError as e:
            raise CacheError(f"{self.spec}: cannot read its files ({e.strerror or e})") from None
        try:  # a one-file format is keyed by its content: not its path, name or time stamp
            content = content_key(self.spec, self.root)
        except OSError as e:
            raise CacheError(f"{self.spec}: cannot read its file ({e.strerror or e})") from None
        named = {"spec": self.spec.strip(), "files": files} if content is None else \
            {"content": content}
        key = {**named, "seed": self.seed, "symmetrize": self.symmetrize,
               "store": [STORE_FORMAT, STORE_VERSION], "plexus": __version__}
        # only where given: the stores of runs from before these options keep their keys
        if self.data_seed is not None:
            key["data_seed"] = self.data_seed
        if self.features != "auto":
            key["features"] = self.features
        return key

    def load(self) -> Graph:
        """The graph (the whole of it: only the builder does this)."""
        graph = load_dataset(self.spec, self.root, seed=self.dataset_seed,
                             features=self.features)
        return graph.to_undirected() if self.symmetrize else graph

    def small(self) -> Graph | None:
        """The graph when its files are small (`plexus.train.checks.precheck_dataset`), else
        None."""
        from .checks import precheck_dataset  # noqa: PLC0415

        graph = precheck_dataset(self.spec, self.root, self.dataset_seed, self.features)
        return graph.to_undirected() if graph is not None and self.symmetrize else graph


@dataclass(frozen=True)
class Sizes:
    """What the cache records about a source's graph."""

    name: str
    num_nodes: int
    num_features: int
    num_classes: int
    nnz: int  # of the GCN-normalized Â (`plexus.datasets.gcn_nnz`)
    graph_sha256: str

    @classmethod
    def of(cls, graph: Graph) -> "Sizes":
        return cls(graph.name, graph.num_nodes, graph.num_features, graph.num_classes,
                   gcn_nnz(graph), graph_hash(graph))


@dataclass(frozen=True)
class Partition:
    """How a store cuts the graph (the second half of its key)."""

    grid: GridShape
    model: ModelConfig
    perm: str
    seed: int

    def fields(self, sizes: Sizes) -> dict:
        return {"grid": self.grid.as_dict(), "stages": self.model.num_stages,
                "orders": self.model.orders(sizes.num_features, sizes.num_classes),
                "perm": self.perm, "perm_seed": self.seed,
                "aggregation": self.model.aggregation}


def store_name(source_key: dict, partition: Partition, sizes: Sizes) -> str:
    """The directory name of a store in the cache: readable, then the key's hash."""
    key = _digest({"source": source_key, "partition": partition.fields(sizes)})
    slug = re.sub(r"[^A-Za-z0-9]+", "-", sizes.name).strip("-")[:40] or "graph"
    return f"{slug}-{partition.grid}-{key[:20]}"


# ---- the cache directory -----------------------------------------------------------------
@dataclass(frozen=True)
class CachedStore:
    """A store the cache holds for a run, and how the run came by it."""

    path: str
    built: bool
    seconds: float  # building it, or finding it
    sizes: Sizes
    grid: GridShape
    build_peak_rss_bytes: int = 0  # the process that partitioned (0: reused)
    waited_s: float = 0.0  # for another run's build of the same source
    # this process's hold on the store against eviction (`plexus.train.cacheuse.hold_store`)
    hold: Any = field(default=None, compare=False, repr=False)

    def line(self) -> str:
        """The one line a run prints about it."""
        if not self.built:
            return f"reusing the cached shard store {self.path}"
        peak = f", partitioning peak RSS {self.build_peak_rss_bytes / 2**30:.2f} GiB" \
            if self.build_peak_rss_bytes else ""
        return f"built the shard store {self.path} in {self.seconds:.1f} s{peak}"

    def summary(self) -> dict:
        return {"store": self.path, "built": self.built, "seconds": self.seconds,
                "build_peak_rss_bytes": self.build_peak_rss_bytes or None,
                "waited_s": self.waited_s}


@dataclass
class Cache:
    """A cache directory."""

    root: Path
    say: Callable[[str], None] = field(default=lambda text: None)

    def __post_init__(self) -> None:
        self.root = Path(self.root).expanduser()

    def check_trusted(self) -> None:
        """Raise `CacheError` (one line) unless the cache directory is this user's and nobody
        else can write it (created so, mode 700, when absent): a store, a record or a lock in a
        directory others can write could be theirs (README "Shared machines")."""
        why = untrusted_dir(self.root)
        if why is not None:
            raise CacheError(f"--cache {self.root}: {why}; Plexus uses only a cache directory of "
                             "yours that nobody else can write (README \"Shared machines\"): "
                             "give a private --cache DIR, or --no-cache")

    def subdir(self, name: str) -> Path:
        """The cache's folder ``name``, made private (700) when absent; `CacheError` when it is
        another user's, or others can write it."""
        path = self.root / name
        try:
            path.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as e:
            raise CacheError(f"--cache {self.root}: cannot create {path} ({e.strerror or e}); "
                             "give another --cache DIR, or --no-cache") from None
        why = untrusted_dir(path)
        if why is not None:
            raise CacheError(f"--cache {self.root}: {path} is {why}; Plexus uses only a cache "
                             "nobody else can write (README \"Shared machines\"): give a "
                             "private --cache DIR, or --no-cache")
        return path

    def read_sizes(self, source_key: dict) -> Sizes | None:
        """What an earlier build recorded about this source (None: nothing, or unreadable)."""
        path = self.root / "sources" / f"{_digest(source_key)}.json"
        try:
            with open_regular(path, ValueError, "r") as f:  # a FIFO planted there: no hang
                doc = json.loads(f.read(1 << 20))
            if doc.get("source") != source_key:
                return None
            sizes = Sizes(**doc["sizes"])
        except (OSError, ValueError, TypeError, KeyError, AttributeError, RecursionError):
            return None  # damaged (nested thousands deep, not an object): rebuilt and rewritten
        types = {f.name: f.type for f in fields(Sizes)}
        if any(type(getattr(sizes, name)) is not {"str": str, "int": int}[type_name]
               for name, type_name in types.items()):
            return None
        return sizes

    def write_sizes(self, source_key: dict, sizes: Sizes) -> None:
        path = self.subdir("sources") / f"{_digest(source_key)}.json"
        with atomic_file(path, "w") as f:
            f.write(json.dumps({"source": source_key, "sizes": asdict(sizes)}, indent=1,
                               sort_keys=True) + "\n")

    def complete(self, path: Path, partition: Partition, sizes: Sizes) -> bool:
        """Whether ``path`` holds a finished store cut as ``partition`` asks, with every rank
        file of the size its manifest records (each rank checks its file's sha256 on reading)."""
        if not is_own_store(path):
            return False
        try:
            m = read_manifest(path)
            want = partition.fields(sizes)
            same = (GridShape.of(m["grid"]) == partition.grid
                    and m["num_stages"] == want["stages"] and m["orders"] == want["orders"]
                    and m["permutation"]["kind"] == want["perm"]
                    and m["permutation"]["seed"] == want["perm_seed"]
                    and m.get("aggregation", "gcn") == want["aggregation"]
                    and m["graph_sha256"] == sizes.graph_sha256)
            if not (same and all((path / r["file"]).stat().st_size == r["size"]
                                 for r in m["ranks"])):
                return False
            return self.verified(path, m["ranks"])
        except (OSError, ValueError, KeyError, TypeError):
            return False

    def _stamp_path(self, store: Path) -> Path:
        return self.root / "verified" / f"{store.name}.json"

    @staticmethod
    def _stats(store: Path, ranks: list) -> list[list]:
        """What changes when a rank file is rewritten in place (size, mtime, inode, ctime)."""
        out = []
        for r in ranks:
            st = os.lstat(store / r["file"])
            out.append([r["file"], st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino,
                        r["sha256"]])
        return out

    def verified(self, store: Path, ranks: list) -> bool:
        """Whether every rank file of ``store`` has the sha256 its manifest records: hashed
        once, then trusted while the files' stats stay those recorded in ``verified/`` (a file
        changed in place, even to the same size, changes its ctime). A damaged store is said
        (one line) and reported incomplete, so the caller rebuilds it."""
        stats = self._stats(store, ranks)
        stamp = self._stamp_path(store)
        try:
            if stamp.stat().st_size < (1 << 24) and \
                    json.loads(stamp.read_text(encoding="utf-8")) == stats:
                return True
        except (OSError, ValueError, RecursionError):
            pass
        for r in ranks:
            if not stat.S_ISREG(os.lstat(store / r["file"]).st_mode) or \
                    file_sha256(store / r["file"]) != r["sha256"]:
                self.say(f"cached store {store}: {r['file']} differs from its manifest's "
                         "sha256 (damaged); building it again")
                return False
        self.stamp(store, ranks)
        return True

    def stamp(self, store: Path, ranks: list) -> None:
        """Record ``store``'s rank files as verified (just built or just hashed)."""
        try:
            with atomic_file(self.subdir("verified") / f"{store.name}.json", "w") as f:
                f.write(json.dumps(self._stats(store, ranks)))
        except (OSError, CacheError):
            pass  # unrecorded: hashed again next time

    @contextmanager
    def locked(self, source_key: dict) -> Iterator[float]:
        """Hold the source's build lock; yields the seconds spent waiting for another run."""
        path = self.subdir("locks") / f"{_digest(source_key)[:32]}.lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        waited = 0.0
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                self.say(f"waiting for another run that is building a store of the same graph "
                         f"(lock {path})")
                start = time.perf_counter()
                fcntl.flock(fd, fcntl.LOCK_EX)
                waited = time.perf_counter() - start
            yield waited
        finally:
            os.close(fd)  # releases the lock

    def find(self, source_key: dict, partition: Partition, sizes: Sizes) -> Path | None:
        path = self.root / store_name(source_key, partition, sizes)
        return path if self.complete(path, partition, sizes) else None


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
    from plexus.datasets.diskgraph import DiskGraph, is_disk_graph  # noqa: PLC0415

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
    from plexus.datasets.convert import convert_dataset  # noqa: PLC0415
    from plexus.datasets.work import Runner  # noqa: PLC0415
    from plexus.partitioners import partition_to_store  # noqa: PLC0415

    source, model, grid = request.source, request.model, request.grid
    assert grid is not None
    cache = Cache(Path(request.cache_root))
    digest = _digest(request.source_key)[:32]
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
    m = partition_to_store(disk, building, grid, model.num_stages,
                           model.orders(disk.num_features, disk.num_classes), request.perm,
                           source.seed, aggregation=model.aggregation)
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
        if graph is not None:
            path, sizes, peak = build_store(request, graph)
            peak = 0  # this process's peak is not the build's alone
        else:
            if request.check_memory and not streams(request):  # out of core: flat memory
                precheck_partition(request.source.spec, request.source.seed, request.model,
                                   request.perm)
            path, sizes, peak = run_in_child(f"partitioning {request.source.spec}",
                                             build_store, request)
        # still under the build lock: held before any other run could see it unused
        hold = hold_store(cache.root, Path(path))
    return CachedStore(path, True, time.perf_counter() - built, sizes,
                       choose_grid(request, sizes), peak, waited, hold=hold)


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


def cached_options(plan: RunPlan, cache: Cache, world: int | None,
                   graph: Graph | None = None, force: bool = False
                   ) -> tuple[RunPlan, CachedStore]:
    """``plan`` reading its shards from the cache's store for its dataset (found or built;
    ``force``: build even where the partitioning is predicted not to fit in memory)."""
    cache.check_trusted()
    source = Source(plan.dataset, plan.root, plan.train.seed, plan.symmetrize, plan.split_seed,
                    plan.features)
    request = BuildRequest(source, source.key(), str(cache.root), plan.grid, world, plan.model,
                           plan.perm, check_memory=not force)
    store = obtain_store(cache, request, graph)
    keep_under_cap(cache, store, plan.cache_max_bytes)
    return replace(plan, shards=store.path, grid=store.grid, cache=store.summary()), store


#: How long the other ranks of a launched job wait for rank 0 to build the store. A dead rank 0
#: ends the wait at once (its connections close); this only bounds a build that hangs.
BUILD_WAIT_S = 2 * 86400


class PeerSetupFailed(RuntimeError):
    """Rank 0 could not provide the store (it reports why; the other ranks only stop)."""


def join_cached_store(plan: RunPlan, say: Callable[[str], None]
                      ) -> tuple[RunPlan, Any]:
    """Collective, under torchrun or srun once the process group exists: rank 0 finds or builds
    the store (`cached_options`; the cache directory must be one every rank sees), the others
    wait for it, then all read their shards from it. Returns the options and rank 0's hold on
    the store against eviction (None on the other ranks: keep it for the run). Raises
    `PeerSetupFailed` on the other ranks when rank 0 failed (rank 0 raises its own error)."""
    from datetime import timedelta  # noqa: PLC0415

    import torch.distributed as dist  # noqa: PLC0415

    group = dist.new_group(backend="gloo", timeout=timedelta(seconds=BUILD_WAIT_S))
    box: list[Any] = [None]
    error: BaseException | None = None
    hold = None
    if dist.get_rank() == 0:
        try:
            new, store = cached_options(plan, Cache(Path(plan.cache_dir), say),  # type: ignore
                                        dist.get_world_size(), force=not plan.check_memory)
            say(store.line())
            box[0], hold = new, store.hold
        except Exception as e:  # noqa: BLE001 — the other ranks must hear of it first
            error = e
    dist.broadcast_object_list(box, src=0, group=group)
    dist.destroy_process_group(group)
    if error is not None:
        raise error
    if box[0] is None:
        raise PeerSetupFailed("rank 0 could not provide the shard store")
    return box[0], hold
