"""Every file ``plexus-sweep`` and ``plexus-report`` read or write in a results folder.

A results folder is shared, copied between machines and edited by hand, so nothing in it is
trusted: a path is used only when it resolves inside the folder (a symlink out of it is
refused, never followed), only regular files are read or written (reading a FIFO blocks
forever, opening a device may do anything: both are refused before they are opened), and a
file read is bounded in size. One sweep at a time writes a folder: `lock` holds it
(`plexus_datasets.base.lockfile`). Every refusal is a `FolderError`, one line naming the file.
"""

from __future__ import annotations

import os
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Iterator

from plexus_datasets.base.atomic import UnsafeTargetError, atomic_file, describe_mode, output_target
from plexus_datasets.base.lockfile import FileLock, LockBusy, LockError, acquire
from plexus_datasets.base import gate

#: The sweep's lock file in a results folder.
LOCK_NAME = ".plexus-sweep.lock"
#: Largest file of a results folder read whole (a manifest, a run's JSON log).
MAX_READ_BYTES = 256 << 20


class FolderError(ValueError):
    """A file of a results folder that cannot be used (a one-line message naming it)."""


class ResultsFolder:
    """The folder of ``plexus-sweep --out`` (itself resolved once: it may be a symlink)."""

    def __init__(self, out: str | os.PathLike, create: bool = False) -> None:
        given = Path(out).expanduser()
        if create:
            try:
                gate.make_folder(gate.run_folder(given))
            except gate.UnsafeTargetError as e:
                raise FolderError(str(e)) from None
            except OSError as e:
                raise FolderError(f"{given}: cannot create the results folder "
                                  f"({e.strerror or e})") from None
        if not given.is_dir():
            raise FolderError(f"{given}: not a directory")
        self.root = Path(os.path.realpath(given))
        self.given = given

    def inside(self, path: str | os.PathLike) -> Path:
        """``path`` resolved (symlinks followed), refused unless it lies in the folder."""
        real = Path(os.path.realpath(path))
        if real != self.root and self.root not in real.parents:
            raise FolderError(f"{path}: leads out of the results folder {self.root} (to {real}); "
                              "refusing to follow it")
        return real

    def subdir(self, *parts: str) -> Path:
        """The directory ``root/parts`` (made if missing), which must be a real directory in
        the folder."""
        path = self.root.joinpath(*parts)
        try:
            gate.make_folder(path)
        except FileExistsError:
            pass
        except gate.UnsafeTargetError as e:
            raise FolderError(str(e)) from None
        except OSError as e:
            raise FolderError(f"{path}: cannot create it ({e.strerror or e})") from None
        real = self.inside(path)
        if not real.is_dir():
            raise FolderError(f"{path}: is {describe_mode(os.lstat(real).st_mode)}, not a "
                              "directory")
        return real

    def _regular(self, path: str | os.PathLike) -> Path | None:
        """The resolved regular file at ``path`` (None when nothing is there)."""
        real = self.inside(path)
        try:
            mode = os.lstat(real).st_mode
        except FileNotFoundError:
            return None
        except OSError as e:
            raise FolderError(f"{path}: cannot use it ({e.strerror or e})") from None
        if not stat.S_ISREG(mode):
            raise FolderError(f"{path}: is {describe_mode(mode)}, not a regular file; move it "
                              "out of the results folder")
        return real

    def exists(self, path: str | os.PathLike) -> bool:
        """Whether a regular file is at ``path`` (refused: anything else there)."""
        return self._regular(path) is not None

    def read_text(self, path: str | os.PathLike) -> str | None:
        """The UTF-8 text of the regular file at ``path``, None when it does not exist."""
        real = self._regular(path)
        if real is None:
            return None
        try:
            fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise FolderError(f"{path}: cannot read it ({e.strerror or e})") from None
        with open(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):  # swapped since the check
                raise FolderError(f"{path}: is {describe_mode(st.st_mode)}, not a regular file")
            if st.st_size > MAX_READ_BYTES:
                raise FolderError(f"{path}: {st.st_size} bytes; more than a results file holds "
                                  f"({MAX_READ_BYTES} at most)")
            try:
                return f.read(MAX_READ_BYTES + 1).decode("utf-8")
            except (OSError, UnicodeDecodeError) as e:
                raise FolderError(f"{path}: cannot read it as UTF-8 text ({e})") from None

    def read_trusted(self, path: str | os.PathLike) -> str | None:
        """`read_text` of a file the sweep reads back as this user's own state (its manifest),
        through `plexus_datasets.base.gate.open_trusted`: refused (`FolderError`) when another
        user could have chosen it or may rewrite it; None when it does not exist."""
        if self._regular(path) is None:
            return None
        try:  # by the name given: a link on the way is judged, not resolved away
            with gate.open_trusted(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size > MAX_READ_BYTES:
                    raise FolderError(f"{path}: {size} bytes; more than a results file holds "
                                      f"({MAX_READ_BYTES} at most)")
                return f.read(MAX_READ_BYTES + 1).decode("utf-8")
        except FileNotFoundError:
            return None
        except gate.UnsafeTargetError as e:
            raise FolderError(f"{path}: {str(e).partition(': ')[2]}") from None
        except (OSError, UnicodeDecodeError) as e:
            raise FolderError(f"{path}: cannot read it as UTF-8 text ({e})") from None

    def target(self, path: str | os.PathLike) -> Path:
        """The regular file (or nothing) that writing ``path`` replaces, inside the folder."""
        try:
            target = output_target(path)
        except UnsafeTargetError as e:
            raise FolderError(str(e)) from None
        self.inside(target)
        return target

    @contextmanager
    def atomic(self, path: str | os.PathLike, mode: str = "w") -> Iterator[IO[Any]]:
        """`plexus_datasets.base.atomic.atomic_file` on ``path``, once `target` allows it."""
        with atomic_file(self.target(path), mode) as f:
            yield f

    def write_text(self, path: str | os.PathLike, text: str) -> Path:
        """Write ``text`` to ``path`` atomically."""
        with self.atomic(path) as f:
            f.write(text)
        return Path(path)

    def open_output(self, path: str | os.PathLike) -> IO[str]:
        """A file written as a run goes (a run's console output): a regular file inside the
        folder, opened without following a link and truncated only once known to be one."""
        target = self.target(path)
        try:
            return gate.open_stream(target, "w")  # never a link, a FIFO or a device
        except gate.UnsafeTargetError:
            kind = describe_mode(os.lstat(target).st_mode)
            raise FolderError(f"{path}: is {kind}, not a regular file") from None
        except OSError as e:
            raise FolderError(f"{path}: cannot write it ({e.strerror or e})") from None

    def lock(self) -> FileLock:
        """Hold the folder for this sweep; raises `FolderError` while another sweep holds it."""
        try:
            return acquire(self.root / LOCK_NAME)
        except LockBusy as e:
            who = f" (pid {e.holder})" if e.holder is not None else ""
            raise FolderError(f"{self.given}: another plexus-sweep{who} is running on this "
                              "results folder; wait for it to end, or use another --out"
                              ) from None
        except LockError as e:
            raise FolderError(str(e)) from None
