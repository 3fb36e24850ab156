"""The partitioner's work directory: created fresh by this process, private, never followed.

A resumable run's work directory has a fixed name beside the store (``.<out>.work-<key>``, the
key naming the configuration and the source), so its name is predictable: another user could
plant one (or a symlink, or links inside one) to steer what goes into the store or make the
partitioner write and delete through it. So a new one is built as a private temporary directory
(mode 700) holding a signature (`SIGNATURE`: its format, its key, its owner, and an HMAC of
them under this user's secret key, `plexus_datasets.base.owned.user_key`) and renamed into
place whole; an existing one is used only when it is a directory (not a link) owned by this
user, private, signed with this key, and holds no symlink and nothing of another owner.
Anything else is refused in one line and left alone (it is not ours to delete).
"""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path

from plexus_datasets.base import owned
from plexus_datasets.base import gate

from .streamjob import PartitionError

SIGNATURE = ".plexus-work.json"
FORMAT = "plexus-partition-work"
#: A signature is a few dozen bytes
_MAX_SIGNATURE_BYTES = 4096


def work_dir_name(out: Path, key: str) -> Path:
    """Where the resumable work of the store ``out`` with configuration ``key`` goes."""
    return out.parent / f".{out.name}.work-{key[:16]}"


def stage_work_dir(out: Path, key: str | None) -> Path:
    """The work directory of a store: for a resumable run (``key``: the run's configuration
    and source) the fixed name of `work_dir_name`, resumed when a killed run of this user left
    it, else created; without a key a fresh temporary one. Raises `PartitionError` for a name
    that holds anything but this user's own work of this key."""
    if key is None:
        return gate.temp_folder(out.parent, f".{out.name}.work-")
    work = work_dir_name(out, key)
    if not _exists(work):
        fresh = gate.temp_folder(out.parent, f".{out.name}.new-")
        try:
            _sign(fresh, key)
            owned.move(fresh, work)  # never follows a link planted meanwhile; fails on one
            return work
        except owned.NotOursError:  # a planter made it first: check it
            owned.remove_tree(fresh, quiet=True)
        except OSError as e:
            owned.remove_tree(fresh, quiet=True)
            if e.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.EPERM, errno.EACCES,
                               errno.EISDIR, errno.ENOTDIR):
                raise
            # another process (a rank of this job, or a planter) made it first: check it
    check_work_dir(work, key)
    return work


def check_work_dir(work: Path, key: str) -> None:
    """Raise `PartitionError` unless ``work`` is a work directory of key ``key`` that this
    user's partitioner made: a private directory of this user's, signed with the key, with no
    symlink and nothing of another owner inside."""
    why = _foreign(work, key)
    if why is not None:
        raise PartitionError(f"{work}: {why}; not a work directory this user's partitioner "
                             "made, refusing to use it (remove it yourself if it is yours, or "
                             "write the store elsewhere)")


def _exists(path: Path) -> bool:
    try:
        os.lstat(path)
    except FileNotFoundError:
        return False
    return True


def _sign(folder: Path, key: str) -> None:
    os.chmod(folder, 0o700)
    with gate.open_stream(folder / SIGNATURE, "x", 0o600) as f:
        f.write(json.dumps(owned.signed({"format": FORMAT, "key": key, "uid": os.geteuid()})))
        f.flush()
        os.fsync(f.fileno())


def _foreign(work: Path, key: str) -> str | None:
    """Why ``work`` is not this user's work of ``key`` (None: it is)."""
    uid = os.geteuid()
    try:
        st = os.lstat(work)
    except OSError as e:
        return f"cannot inspect it ({e.strerror or e})"
    if stat.S_ISLNK(st.st_mode):
        return "a symlink"
    if not stat.S_ISDIR(st.st_mode):
        return "not a directory"
    if st.st_uid != uid:
        return f"owned by uid {st.st_uid}, not {uid}"
    if st.st_mode & 0o077:
        return f"mode {stat.S_IMODE(st.st_mode):o}, not private (700)"
    try:
        fd = os.open(work / SIGNATURE, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        try:
            sig_st = os.fstat(fd)
            if (not stat.S_ISREG(sig_st.st_mode) or sig_st.st_size > _MAX_SIGNATURE_BYTES
                    or sig_st.st_uid != uid):
                return f"its {SIGNATURE} is not this user's small regular file"
            sig = json.loads(os.read(fd, _MAX_SIGNATURE_BYTES + 1).decode("utf-8"))
        finally:
            os.close(fd)
    except (OSError, ValueError, RecursionError):
        return f"no readable {SIGNATURE}"
    if (not isinstance(sig, dict) or sig.get("format") != FORMAT or sig.get("key") != key
            or sig.get("uid") != uid):
        return f"its {SIGNATURE} is not this configuration's"
    if not owned.verify(sig):
        return f"its {SIGNATURE} does not verify under this user's key (forged or edited)"
    try:
        for folder, dirs, files in os.walk(work, onerror=_raise):  # never follows links
            for name in dirs + files:
                try:
                    entry = os.lstat(os.path.join(folder, name))
                except FileNotFoundError:  # a task of a live rank removing its scratch
                    continue
                if stat.S_ISLNK(entry.st_mode):
                    return f"{os.path.join(folder, name)} inside it is a symlink"
                if entry.st_uid != uid:
                    return (f"{os.path.join(folder, name)} inside it is owned by uid "
                            f"{entry.st_uid}")
    except OSError as e:
        return f"cannot read it ({e.strerror or e})"
    return None


def _raise(e: OSError) -> None:
    if not isinstance(e, FileNotFoundError):
        raise e
