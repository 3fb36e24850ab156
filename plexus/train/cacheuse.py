"""The shard-store cache's upkeep: which stores are in use, what it holds, and least-recently-used
eviction under a size cap (``plexus-train --cache-list``, ``--cache-clean``, ``--cache-max-gb``).

A run holds a shared ``flock`` on ``locks/<store>.use`` from finding (or building) its store until
it ends; that file's modification time is the store's last use. Eviction takes the lock
exclusively without waiting, so a store some run holds is never removed; it renames the store
out of the way before deleting it, under that lock, so a run never sees half a store. A run
that waited for the lock finds the store gone and builds it again. Converted graphs
(``graphs/``) are evicted the same way, under their source's build lock. Lock files stay (a
lock file removed while another process waits on it would let two holders in). Only what this
user's Plexus sealed (`plexus_datasets.base.owned`: this uid, its key, exactly its files) is an
entry: a folder of the user's own in the cache or in ``graphs/``, a link, or anything planted is
never listed, evicted or followed, and the removal itself goes through `plexus_datasets.base.owned`.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Mapping
from plexus_datasets.base import owned
from plexus_datasets.base import gate

from plexus_partition.model.bounds import BoundError, check_bound, env_number

#: The cache's size cap in GiB when ``--cache-max-gb`` is not given (unset: no cap).
MAX_GB_ENV = "PLEXUS_CACHE_MAX_GB"
LOCKS = "locks"
GRAPHS = "graphs"


class CacheCapError(ValueError):
    """A size cap that is no number of GiB > 0 (a one-line message)."""


def cap_bytes(max_gb: float | None, environ: Mapping[str, str] | None = None) -> int | None:
    """The cap in bytes: ``max_gb``, else `MAX_GB_ENV`, else None (no cap); bounded by the one
    table (`plexus_partition.model.bounds`)."""
    env = os.environ if environ is None else environ
    try:
        if max_gb is None:
            max_gb = env_number(env, MAX_GB_ENV)
            if max_gb is None:
                return None
        else:
            check_bound("cache_max_gb", max_gb, "the cache's size cap in GiB")
    except BoundError as e:
        raise CacheCapError(f"{e}; unset {MAX_GB_ENV} or give e.g. 50") from None
    return int(max_gb * 2**30)


def use_lock_path(root: Path, store: Path) -> Path:
    return root / LOCKS / f"{store.name}.use"


class StoreUse:
    """A shared hold on a cached store (released by `release` or the process's end)."""

    def __init__(self, fd: int, path: Path) -> None:
        self._fd: int | None = fd
        self.path = path

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def hold_store(root: Path, store: Path) -> StoreUse:
    """Hold ``store`` (a directory of the cache at ``root``) against eviction and mark it used
    now; waits while an eviction of it is under way (the caller then finds it gone)."""
    lock = use_lock_path(root, store)
    fd = _open_lock(lock)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        os.utime(fd)  # the last use, for least-recently-used eviction
    except BaseException:
        os.close(fd)
        raise
    return StoreUse(fd, store)


def _open_lock(lock: Path) -> int:
    """The descriptor of the use lock ``lock`` (its private folder made), through the gate."""
    gate.make_folder(lock.parent, mode=0o700)
    return gate.open_file(lock, os.O_RDWR | os.O_CREAT, 0o644)


@dataclass(frozen=True)
class Entry:
    """One thing the cache holds: a shard store or a converted graph."""

    path: Path
    kind: str  # "store" or "graph"
    bytes: int
    last_used: float  # `time.time`
    in_use: bool
    lock: Path  # taken exclusively to evict it
    seal: str = ""  # the format its seal names (`plexus_datasets.base.owned`)


def _size(path: Path) -> int:
    total = 0
    for dirpath, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                pass
    return total


def _busy(lock: Path) -> bool:
    """Whether a live process holds ``lock`` (shared or exclusive)."""
    try:
        fd = os.open(lock, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _real_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)  # a link is no folder of the cache
    except OSError:
        return False


def _candidates(root: Path) -> Iterator[tuple[Path, str, Path, str]]:
    """The cache's entries: stores and converted graphs this user's Plexus sealed, with exactly
    their files; anything else there (a user's folder, another user's plant, a link) is no
    entry, never listed nor removed."""
    from plexus_datasets.diskgraph import FORMAT as GRAPH_FORMAT  # noqa: PLC0415
    from plexus_partition.storeformat import FORMAT as STORE_FORMAT  # noqa: PLC0415

    if _real_dir(root):
        for path in sorted(root.iterdir()):
            if (not path.name.startswith(".") and _real_dir(path)
                    and owned.is_sealed(path, STORE_FORMAT)):
                yield path, "store", use_lock_path(root, path), STORE_FORMAT
    graphs = root / GRAPHS
    if _real_dir(graphs):
        for path in sorted(graphs.iterdir()):  # built under its source's lock
            if _real_dir(path) and owned.is_sealed(path, GRAPH_FORMAT):
                yield path, "graph", root / LOCKS / f"{path.name}.lock", GRAPH_FORMAT


def untrusted_dir(path: Path) -> str | None:
    """Why the cache directory ``path`` may hold what others wrote (None: this user's, and
    nobody else can write it). Absent, it is created private (700), never in the system's
    folders (--cache /etc wrote its records and stores into /etc, as root)."""
    why = gate.system_folder(os.path.realpath(path))
    if why is not None:
        return why
    try:
        os.lstat(path)
    except FileNotFoundError:
        try:
            gate.make_folder(path, mode=0o700)
        except gate.UnsafeTargetError as e:
            return str(e).removeprefix(f"{path}: ")
        except OSError as e:
            return f"cannot create it ({e.strerror or e})"
    try:
        parent, name = owned.open_parent(path)
    except (owned.NotOursError, OSError) as e:
        return str(e).removeprefix(f"{path}: ")
    try:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent)
    except OSError as e:
        return ("a symlink or not a directory" if e.errno in (errno.ELOOP, errno.ENOTDIR)
            else f"cannot open it ({e.strerror or e})")
    finally:
        os.close(parent)
    try:
        st = os.fstat(fd)
    finally:
        os.close(fd)
    uid = os.geteuid()
    if st.st_uid != uid:
        return f"owned by uid {st.st_uid}, not {uid}"
    if st.st_mode & 0o022:
        return f"writable by group or others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def entries(root: Path) -> list[Entry]:
    """What the cache at ``root`` holds, least recently used first."""
    out = [Entry(path, kind, _size(path), max(_mtime(lock), _mtime(path)), _busy(lock), lock,
                 seal) for path, kind, lock, seal in _candidates(Path(root))]
    return sorted(out, key=lambda e: e.last_used)


def remove(root: Path, entry: Entry) -> bool:
    """Remove ``entry`` unless a run holds it (then False): under its lock, taken exclusively
    without waiting, it is renamed out of the cache and deleted."""
    fd = _open_lock(entry.lock)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        if not entry.path.exists():
            return False
        # renamed aside, then removed, only when it is this user's sealed store or graph
        return owned.remove_tree(entry.path, seal=entry.seal)
    finally:
        os.close(fd)


def evict(root: Path, max_bytes: int, keep: tuple[Path, ...] = ()) -> list[Entry]:
    """Remove the least recently used entries that no run holds (nor ``keep``) until the cache
    holds at most ``max_bytes``; returns those removed (0 bytes: everything not in use)."""
    found = entries(root)
    total = sum(e.bytes for e in found)
    kept = {Path(p).resolve() for p in keep}
    removed = []
    for e in found:
        if total <= max_bytes:
            break
        if e.in_use or e.path.resolve() in kept:
            continue
        if remove(root, e):
            removed.append(e)
            total -= e.bytes
    return removed
