"""An exclusive lock held by a live process: ``flock`` on a small file that names its holder's pid.

One rule for every lock the tools take (a checkpoint directory, a sweep's results folder). The
lock file is opened without following a link and without truncating it, and only a regular file
with one link is ever written: a FIFO, a device, a directory or a symlink there is refused before
it is opened read-write, and a hard link to someone's file is refused before the pid replaces its
content. Every error names the lock file. The lock ends with the process holding it, however it
ends (the kernel drops a ``flock`` when its descriptor closes).
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from pathlib import Path

from . import owned
from .atomic import describe_mode
from .gate import UnsafeTargetError, write_target


class LockError(ValueError):
    """A lock that cannot be taken (a one-line message naming the lock file)."""


class LockBusy(LockError):
    """Another live process holds the lock; ``holder`` is its pid when the file names one."""

    def __init__(self, message: str, holder: int | None) -> None:
        super().__init__(message)
        self.holder = holder


class FileLock:
    """An exclusive lock taken by `acquire`; `release` ends it (so does the holder's exit)."""

    def __init__(self, fd: int, path: Path) -> None:
        self._fd: int | None = fd
        self.path = path

    def current(self) -> bool:
        """Whether the locked file is still the one at `path` (a holder that removes its lock
        file on release may have replaced it between this process's open and its lock)."""
        if self._fd is None:
            return False
        try:
            mine, there = os.fstat(self._fd), os.lstat(self.path)
        except OSError:
            return False
        return (mine.st_dev, mine.st_ino) == (there.st_dev, there.st_ino)

    def release(self, remove: bool = False) -> None:
        """End the lock; with ``remove``, unlink its file first (while still held)."""
        if self._fd is not None and remove and self.current():
            owned.remove_file(self.path, quiet=True)
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None


def _refuse_unless_regular(path: Path, st: os.stat_result) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise LockError(f"{path}: the lock file is {describe_mode(st.st_mode)}, not a regular "
                        "file; remove it (plexus writes its own)")
    if st.st_nlink != 1:
        raise LockError(f"{path}: the lock file has {st.st_nlink} hard links; refusing to write "
                        "into a file shared with another name (remove it; plexus writes its own)")


def acquire(path: str | os.PathLike) -> FileLock:
    """Take the exclusive lock at ``path`` (created if missing) and write this process's pid
    into it. Raises `LockBusy` when a live process holds it, `LockError` when ``path`` is not a
    regular file of one link, cannot be opened, created or locked, or another user could have
    chosen it (`plexus_datasets.base.gate`)."""
    path = Path(path)
    try:
        write_target(path)  # no lock written through a link, into a file or folder of another user
    except UnsafeTargetError as e:
        raise LockError(str(e)) from None
    try:
        _refuse_unless_regular(path, os.lstat(path))  # never open a FIFO or a device at all
    except FileNotFoundError:
        pass
    except OSError as e:
        raise LockError(f"{path}: cannot use it as a lock file ({e.strerror or e})") from None
    try:
        # no O_TRUNC: the content changes only once the file is known to be ours and locked
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     0o644)
    except OSError as e:
        why = "is a symlink" if e.errno == errno.ELOOP else (e.strerror or str(e))
        raise LockError(f"{path}: cannot open the lock file ({why})") from None
    try:
        _refuse_unless_regular(path, os.fstat(fd))  # what was opened (the path may have changed)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                text = os.pread(fd, 32, 0).decode(errors="replace").strip()
                raise LockBusy(f"{path}: held by another process", int(text)
                               if text.isdigit() else None) from None
            raise LockError(f"{path}: cannot lock it ({e.strerror or e})") from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError as e:  # a full disk: the lock holds all the same, without the pid
            raise LockError(f"{path}: cannot write the lock file ({e.strerror or e})") from None
    except BaseException:
        os.close(fd)
        raise
    return FileLock(fd, path)
