"""Large files written once and not read back by the writer: every few tens of MB the written
part is synced and dropped from the page cache (``posix_fadvise(DONTNEED)``), so the writer keeps
reusing the same few pages instead of filling memory with a cache of its output. On machines
where a page touched for the first time is expensive (virtual machines whose free memory goes back
to the host) this takes most of the system time out of writing a shard store: measured in
docs/design.md, "Big graphs". Where the call does not exist (macOS) it is a plain file, synced
once at the end."""

from __future__ import annotations

import os
from typing import BinaryIO, Callable

#: bytes written between syncs (the page cache a writer holds at most, about)
STEP_BYTES = 64 << 20


class WriteBehind:
    """Writes to ``raw`` (a binary file open for writing, which the caller closes) whose data
    leaves the page cache as it goes; `finish` makes the whole file durable."""

    def __init__(self, raw: BinaryIO, step: int = STEP_BYTES) -> None:
        self.raw, self.step = raw, max(1, int(step))
        self._synced = 0  # bytes synced and dropped
        self._written = 0
        self._drop = getattr(os, "posix_fadvise", None)

    def write(self, data: bytes | memoryview) -> int:
        count = self.raw.write(data)
        self._written += count
        if self._drop is not None and self._written - self._synced >= self.step:
            self._sync(os.fdatasync)
        return count

    def flush(self) -> None:
        self.raw.flush()

    def finish(self) -> None:
        """Sync the file (data and size: fsync) and drop the rest of it from the cache."""
        self._sync(os.fsync)

    def _sync(self, sync: Callable[[int], None]) -> None:
        self.raw.flush()
        fd = self.raw.fileno()
        sync(fd)
        if self._drop is not None and self._written > self._synced:  # (length 0: to the end)
            try:
                self._drop(fd, self._synced, self._written - self._synced,
                           os.POSIX_FADV_DONTNEED)
            except OSError:
                pass  # advice only: the data is synced either way
        self._synced = self._written
