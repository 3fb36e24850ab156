"""Files a reader opens: regular files only, checked on the open descriptor itself.

Opening a FIFO for reading blocks until someone writes to it, and a device can be read forever
(``/dev/zero``), so a graph directory, an export or an outputs directory whose file was swapped
for one would hang its reader. `open_regular` opens without blocking, checks what the
descriptor is (no race between a check and the open) and only then hands back a file object.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path
from typing import IO

from .errors import DatasetError, ErrorType

_NOT_REGULAR = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                (stat.S_ISSOCK, "a socket"))


def open_regular(path: str | os.PathLike, error: ErrorType = DatasetError,
                 mode: str = "rb") -> IO:
    """``path`` opened for reading (``mode`` "rb" or "r": UTF-8 text), once its descriptor is
    known to be a regular file; ``error`` (one line naming the path) for anything else, and
    `FileNotFoundError` for nothing there (callers word that case themselves)."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise
    except OSError as e:
        raise error(f"{path}: cannot open it ({e.strerror or e})") from None
    try:
        st_mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(st_mode):
            kind = next((name for test, name in _NOT_REGULAR if test(st_mode)),
                        "not a regular file")
            raise error(f"{path}: is {kind}, not a regular file; give the file itself")
        os.set_blocking(fd, True)
        return os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"}))
    except BaseException:
        os.close(fd)
        raise


def check_regular(path: str | os.PathLike, error: ErrorType = DatasetError) -> Path:
    """``path`` after checking it is a regular file (`open_regular`'s rule), for readers that
    open it themselves (numpy's memory maps, torch.load); returns it."""
    with open_regular(path, error):
        return Path(path)


_HASH_BUF = 1 << 20


def file_sha256(path: str | os.PathLike) -> str:
    """sha256 of a file, read in 1 MiB pieces (memory independent of the file size)."""
    with open(path, "rb") as f:
        return stream_sha256(f)


def stream_sha256(f: IO[bytes]) -> str:
    """sha256 of what is left to read of the open binary file ``f``, in 1 MiB pieces (a file
    held by its descriptor is hashed and then read from the same descriptor)."""
    h = hashlib.sha256()
    while chunk := f.read(_HASH_BUF):
        h.update(chunk)
    return h.hexdigest()
