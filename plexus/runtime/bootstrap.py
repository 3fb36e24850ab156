"""Loaded into the fork server that starts local workers (`plexus.runtime.local` preloads it):
a worker whose start-up fails because its launcher went away ends without a traceback.

A worker forked while its launcher is being stopped (Ctrl-C during start-up) finds the
launcher's semaphores or pipes gone as it unpickles its task, and the fork server would print
that traceback to the job's console; the launcher reports the stop itself, in one line. Any
other start-up failure (a task that cannot be unpickled) still prints its traceback.
"""

from __future__ import annotations

import sys
from types import TracebackType

#: What a worker's start-up meets when its launcher is gone: a missing semaphore, a closed pipe.
LAUNCHER_GONE = (FileNotFoundError, EOFError, ConnectionError)

_default_hook = sys.excepthook


def _in_worker_start(tb: TracebackType | None) -> bool:
    """Whether the traceback passes through the fork server's start of a worker."""
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_name == "_serve_one" and code.co_filename.endswith("forkserver.py"):
            return True
        tb = tb.tb_next
    return False


def _hook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
    if issubclass(kind, LAUNCHER_GONE) and _in_worker_start(tb):
        return
    _default_hook(kind, value, tb)


sys.excepthook = _hook
