"""Files that never exist half-written: write a temporary file beside the target, fsync it, and
rename it over the target (a crash or ``kill -9`` leaves the old file, or none, never a torn
one).

An output path may only name a regular file or nothing: a rename over ``/dev/full``, a FIFO, a
socket or a directory (or a symlink to one, such as ``/proc/self/fd/1``) would replace a node the
user never meant to lose, so `output_target` refuses them. A symlink to a regular file is
followed (the file it points to is replaced, the link stays) only when no other user could have
made it, and nothing is written where another user could have chosen the target
(`plexus_datasets.base.gate`, the one gate of every write).
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Callable, Iterator

from . import owned
from .gate import UnsafeTargetError, write_target
from .values import ErrorType


def fsync_dir(directory: str | os.PathLike) -> None:
    """Make a rename inside ``directory`` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symlink"))


def describe_mode(mode: int) -> str:
    """What a node of ``st_mode`` is, for messages: "a directory", "a FIFO (named pipe)", ..."""
    if stat.S_ISREG(mode):
        return "a regular file"
    return next((name for test, name in _KINDS if test(mode)), "an unknown kind of node")


def output_target(path: str | os.PathLike) -> Path:
    """The file that writing ``path`` replaces: ``path`` itself, or the regular file a symlink
    points to. Raises `UnsafeTargetError` when that is anything but a regular file or nothing
    (a directory, a device, a FIFO, a socket, a dangling link), or when another user could have
    chosen it (`plexus_datasets.base.gate.write_target`: a link they could have made, their
    file, a folder they can write)."""
    path = Path(path)
    try:
        link = os.lstat(path)
    except FileNotFoundError:
        write_target(path)  # the folders on the way
        return path
    except OSError as e:  # e.g. a parent that is a file
        raise UnsafeTargetError(f"{path}: cannot write there ({e.strerror or e})") from None
    if stat.S_ISREG(link.st_mode):
        write_target(path)
        return path
    try:
        mode = os.stat(path).st_mode  # follows links, /proc/self/fd/N included
    except OSError:
        raise UnsafeTargetError(f"{path}: a symlink to nothing; refusing to write through "
                                "it") from None
    if stat.S_ISLNK(link.st_mode) and stat.S_ISREG(mode):
        return write_target(path)
    where = "a symlink to " if stat.S_ISLNK(link.st_mode) else ""
    raise UnsafeTargetError(f"{path}: is {where}{describe_mode(mode)}, not a regular file; refusing to "
                            "replace it (give a file name)")


def replace_into(tmp: str | os.PathLike, target: str | os.PathLike) -> None:
    """Rename the finished ``tmp`` onto ``target`` once `output_target` still allows it (the
    path may have changed while ``tmp`` was written)."""
    final = output_target(target)
    owned.replace_file(tmp, final)
    fsync_dir(final.parent)


class _RecordingWriter:
    """A file that keeps the `OSError` of a failed write: a library that catches it and raises
    its own error instead (``torch.save``: a RuntimeError about stream positions) loses the
    cause, and a full disk must be reported as one."""

    def __init__(self, f: IO[Any]) -> None:
        self._f = f
        self.error: OSError | None = None

    def write(self, data: Any) -> int:
        try:
            return self._f.write(data)
        except OSError as e:
            self.error = e
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)


@contextmanager
def atomic_file(path: str | os.PathLike, mode: str = "wb") -> Iterator[IO[Any]]:
    """Open a temporary file beside ``path`` (text modes: UTF-8, no newline translation); when
    the block ends without an exception it is fsynced and renamed onto ``path``, otherwise
    removed. The file is readable by others (0644), like a plain ``open``. Raises
    `UnsafeTargetError` before writing anything when ``path`` is not a regular file or
    absent. A failed write (a full disk, a quota, an I/O error) raises its `OSError`, with
    ``filename`` set to ``path``, even where the writing library replaced it with an error of
    its own; the temporary file is gone and the old file untouched."""
    path = output_target(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    writer: _RecordingWriter | None = None
    try:
        os.fchmod(fd, 0o644)  # mkstemp makes 0600
        text = {} if "b" in mode else {"encoding": "utf-8", "newline": ""}
        with os.fdopen(fd, mode, **text) as f:
            writer = _RecordingWriter(f)
            yield writer  # type: ignore[misc]
            f.flush()
            os.fsync(f.fileno())
        replace_into(tmp, path)
    except BaseException as e:
        owned.remove_file(tmp, quiet=True)
        cause = writer.error if writer is not None and writer.error is not None else e
        if isinstance(cause, OSError) and cause.filename is None:
            cause.filename = str(path)
        if cause is not e:
            raise cause from None
        raise


def output_directory(path: str | os.PathLike, recognise: Callable[[Path], bool]) -> Path:
    """The directory that writing the directory output ``path`` replaces: ``path`` itself when
    it is absent, an empty directory, or a directory this kind of output wrote before
    (``recognise(path)`` is true: its writer's signature, never a file name a user may also
    have). Raises `UnsafeTargetError` for anything else: a file, a symlink, a device, or a
    directory holding anything else (never replaced, whatever it holds)."""
    path = Path(path)
    try:
        link = os.lstat(path)
    except FileNotFoundError:
        return path
    except OSError as e:
        raise UnsafeTargetError(f"{path}: cannot write there ({e.strerror or e})") from None
    if stat.S_ISLNK(link.st_mode) or not stat.S_ISDIR(link.st_mode):
        kind = "a symlink" if stat.S_ISLNK(link.st_mode) else describe_mode(link.st_mode)
        raise UnsafeTargetError(f"{path}: is {kind}, not an output directory; refusing to "
                                "replace it (give a new directory name)")
    try:
        entries = os.listdir(path)
    except OSError as e:
        raise UnsafeTargetError(f"{path}: cannot read it ({e.strerror or e})") from None
    write_target(path, directory=True)  # the gate: no link, folder or owner another user chose
    if entries and not recognise(path):
        raise UnsafeTargetError(f"{path}: a directory that holds other files (not one this "
                                "output wrote); refusing to replace it (give a new directory "
                                "name)")
    return path


def replaceable_directory(path: Path, recognise: Callable[[Path], bool], what: str,
                          error: ErrorType = UnsafeTargetError) -> Path:
    """``path`` when it is absent, an empty directory or a directory ``recognise`` knows (a
    writer's own earlier output, named ``what`` in messages); ``error`` (one line) for a file,
    a link or a directory holding anything else, which a writer never replaces."""
    if path.exists() or path.is_symlink():
        if not path.is_dir() or path.is_symlink():
            raise error(f"{path}: exists and is not a directory; refusing to replace it")
        if not recognise(path) and any(path.iterdir()):
            raise error(f"{path}: exists and is not {what}; refusing to overwrite it")
    return path


def replace_directory(new: str | os.PathLike, target: str | os.PathLike,
                      check: Callable[[Path], Path], seal: str | None = None,
                      describes: tuple[str, ...] = ()) -> None:
    """Move the finished directory ``new`` onto ``target`` once ``check(target)`` still allows
    it (it returns the directory to replace and raises, one line, when it may not be: e.g.
    `output_directory`); a previous output there is moved aside first and then removed, so
    ``target`` is always either the old output or the new one, never a mixture. With ``seal``
    (a format of `plexus_datasets.base.owned`), ``new`` is sealed as that format first
    (``describes``: its describing files, sealed by sha256) and a previous output is replaced only
    when it carries this user's seal of it and nothing else (its files changed or gone: damage,
    replaced too); an empty directory of this user's is replaced too. A failed move puts the old one
    back; ``new`` on another file system is copied beside ``target`` first. Everything goes through
    `plexus_datasets.base.owned`: nothing is removed or replaced by name."""
    final = Path(check(Path(target)))
    if seal is not None:
        owned.write_seal(new, seal, describes)
    old = None
    if final.exists() or final.is_symlink():
        if seal is not None and any(final.iterdir()):
            why = owned.seal_problem(final, seal, exact=False)
            if why is not None:
                raise UnsafeTargetError(f"{why}; refusing to replace it (give a new directory "
                                        "name, or remove it yourself if it is yours)")
        old = final.parent / f".{final.name[:60]}.old-{os.getpid()}-{time.time_ns()}"
        try:
            owned.move(final, old)
        except owned.NotOursError as e:
            raise UnsafeTargetError(f"{e}; refusing to replace it") from None
    try:
        owned.move(new, final)
    except owned.NotOursError as e:
        if old is not None:
            owned.move(old, final)
        raise UnsafeTargetError(str(e)) from None
    except OSError as e:
        if e.errno != errno.EXDEV:
            if old is not None:
                owned.move(old, final)
            raise
        _copy_across(Path(new), final, old)
    fsync_dir(final.parent)
    if old is not None:
        owned.remove_tree(old, quiet=True)


def _copy_across(new: Path, final: Path, old: Path | None) -> None:
    """`replace_directory` where ``new`` is on another file system than ``final``: copy it into
    a hidden directory beside ``final``, rename that into place, then remove ``new``."""
    copy = final.parent / f".{final.name[:60]}.copy-{os.getpid()}-{time.time_ns()}"
    try:
        shutil.copytree(new, copy, symlinks=True)
        owned.move(copy, final)
    except BaseException:
        owned.remove_tree(copy, quiet=True)
        if old is not None and not final.exists():
            owned.move(old, final)
        raise
    owned.remove_tree(new, quiet=True)
