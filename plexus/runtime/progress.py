"""Which rank is stuck: every local worker publishes how many collectives it has entered.

A collective that times out names no peer (gloo says only "Timed out waiting 8000ms"), and every
rank waiting on the stuck one, directly or through others, times out alike. Ranks of one job issue
the same sequence of collectives, so the stuck rank is the one whose count stopped below all the
others': each worker's daemon thread writes its count to a file of the job's directory, and the
launcher reads them when the job failed on a timeout. (Only for local jobs: the files live on the
launcher's machine.)
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Callable

from plexus_datasets.base import gate

#: The directory the workers of a local job publish their progress in (set by the launcher).
PROGRESS_DIR_ENV = "PLEXUS_PROGRESS_DIR"
_WIDTH = 20  # digits of a count: every write has the same size


def _file(directory: str | os.PathLike, rank: int) -> Path:
    return Path(directory) / f"progress-{rank}"


def start_beacon(rank: int, count: Callable[[], int], interval_s: float = 0.5) -> bool:
    """Publish ``count()`` for ``rank`` every ``interval_s`` from a daemon thread, when this
    process is a worker of a local job; returns whether it does."""
    directory = os.environ.get(PROGRESS_DIR_ENV)
    if not directory or not os.path.isdir(directory):
        return False
    try:
        fd = gate.open_file(_file(directory, rank), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    except (OSError, gate.UnsafeTargetError):
        return False

    def beat() -> None:
        last = None
        stop = threading.Event()
        while not stop.wait(interval_s):
            try:
                value = int(count())
            except RuntimeError:  # the counted dict grew while being read: next time
                continue
            if value != last:
                try:
                    os.pwrite(fd, f"{value:0{_WIDTH}d}".encode(), 0)
                except OSError:
                    return
                last = value

    threading.Thread(target=beat, name="plexus-progress", daemon=True).start()
    return True


def read_progress(directory: str | os.PathLike) -> dict[int, int]:
    """Rank -> last published count (ranks that published nothing are absent)."""
    out = {}
    for path in Path(directory).glob("progress-*"):
        try:
            out[int(path.name.rpartition("-")[2])] = int(path.read_text().strip())
        except (OSError, ValueError):
            continue
    return out


def lagging_rank(progress: dict[int, int], world_size: int) -> int | None:
    """The one rank whose count is below every other rank's, when every rank published one."""
    if len(progress) != world_size or world_size < 2:
        return None
    ranked = sorted(progress.items(), key=lambda item: item[1])
    if ranked[0][1] < ranked[1][1]:
        return ranked[0][0]
    return None
