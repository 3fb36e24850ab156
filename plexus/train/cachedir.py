"""The shard-store cache's directory (`plexus.train.cache`): where it is, whether it is trusted
(this user's, writable by nobody else), the records of a source's sizes, whether a store in it
is complete and verified (sha256 once, then the files' stats), the build lock of a source, and
a store a run holds (`CachedStore`)."""

from __future__ import annotations

import fcntl
import json
import os
import stat
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Iterator

from plexus_datasets.base.atomic import atomic_file
from plexus_datasets.base import gate
from plexus_partition.model.grid import GridShape
from plexus_partition import read_manifest
from plexus_partition.store import file_sha256, is_own_store

from .cachekeys import Partition, Sizes, key_digest, store_name
from .cacheuse import untrusted_dir
from .errors import CacheError

CACHE_ENV = "PLEXUS_CACHE_DIR"


def default_cache_dir() -> Path:
    """``$PLEXUS_CACHE_DIR``, else ``$XDG_CACHE_HOME/plexus/stores``, else
    ``~/.cache/plexus/stores``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "plexus" / "stores"



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
        peak = (f", partitioning peak RSS {self.build_peak_rss_bytes / 2**30:.2f} GiB"
            if self.build_peak_rss_bytes else "")
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
        directory others can write could be theirs (docs/shared-machines.md)."""
        why = untrusted_dir(self.root)
        if why is not None:
            raise CacheError(f"--cache {self.root}: {why}; Plexus uses only a cache directory of "
                             "yours that nobody else can write (docs/shared-machines.md): "
                             "give a private --cache DIR, or --no-cache")

    def subdir(self, name: str) -> Path:
        """The cache's folder ``name``, made private (700) when absent; `CacheError` when it is
        another user's, or others can write it."""
        path = self.root / name
        try:
            gate.make_folder(path, mode=0o700)
        except gate.UnsafeTargetError as e:
            raise CacheError(f"--cache {e}; give a private --cache DIR, or --no-cache") from None
        except OSError as e:
            raise CacheError(f"--cache {self.root}: cannot create {path} ({e.strerror or e}); "
                             "give another --cache DIR, or --no-cache") from None
        why = untrusted_dir(path)
        if why is not None:
            raise CacheError(f"--cache {self.root}: {path} is {why}; Plexus uses only a cache "
                             "nobody else can write (docs/shared-machines.md): give a "
                             "private --cache DIR, or --no-cache")
        return path

    def read_sizes(self, source_key: dict) -> Sizes | None:
        """What an earlier build recorded about this source (None: nothing, or unreadable);
        `CacheError` when the record is one another user could have chosen or may rewrite."""
        path = self.root / "sources" / f"{key_digest(source_key)}.json"
        try:
            with gate.open_trusted(path, "r") as f:  # the gate; a FIFO planted there: no hang
                doc = json.loads(f.read(1 << 20))
            if doc.get("source") != source_key:
                return None
            sizes = Sizes(**doc["sizes"])
        except gate.UnsafeTargetError as e:
            raise CacheError(f"--cache {self.root}: the cache's record {e}") from None
        except (OSError, ValueError, TypeError, KeyError, AttributeError, RecursionError):
            return None  # damaged (nested thousands deep, not an object): rebuilt and rewritten
        types = {f.name: f.type for f in fields(Sizes)}
        if any(type(getattr(sizes, name)) is not {"str": str, "int": int}[type_name]
               for name, type_name in types.items()):
            return None
        return sizes

    def write_sizes(self, source_key: dict, sizes: Sizes) -> None:
        path = self.subdir("sources") / f"{key_digest(source_key)}.json"
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
        try:  # a stamp another user could have chosen is no proof: the files are hashed
            with gate.open_trusted(stamp, "r") as f:
                if json.loads(f.read(1 << 24)) == stats:
                    return True
        except (OSError, ValueError, RecursionError):
            pass
        for r in ranks:
            if (not stat.S_ISREG(os.lstat(store / r["file"]).st_mode) or
                    file_sha256(store / r["file"]) != r["sha256"]):
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
        path = self.subdir("locks") / f"{key_digest(source_key)[:32]}.lock"
        try:
            fd = gate.open_file(path, os.O_RDWR | os.O_CREAT, 0o644)
        except gate.UnsafeTargetError as e:
            raise CacheError(f"--cache {e}; give a private --cache DIR, or --no-cache") from None
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
