"""The command-line tools' start: `run_tool` imports a tool's module and runs its ``main``
(the entry points of ``[project.scripts]``: `plexus_partition` here, the engine's in
`plexus.console`).

Each imports its tool only when called, inside a guard: importing torch takes seconds, and a
Ctrl-C then (or anywhere a tool does not handle it itself) ends the tool with one line
``PROG: error: interrupted (SIGINT)`` and status 130, never an import traceback. (While the
modules load, the interrupt ends the process at once: an import cut half-way can leave a
module broken, and nothing has been written yet.)
"""

from __future__ import annotations

import atexit
import importlib
import os
import signal
import sys
import threading
from typing import Any, Callable

from plexus_partition.model.cli import error_line, report_error

INTERRUPTED = 128 + signal.SIGINT


def run_tool(prog: str, target: str, **options: Any) -> int:
    module, _, function = target.partition(":")

    def interrupted_while_loading(signum: int, frame: Any) -> None:  # noqa: ARG001
        try:
            os.write(2, (error_line(prog, "interrupted (SIGINT) while starting") + "\n").encode())
        finally:
            os._exit(INTERRUPTED)

    previous = signal.signal(signal.SIGINT, interrupted_while_loading)
    try:
        main: Callable[..., int] = getattr(importlib.import_module(module), function)
    finally:
        signal.signal(signal.SIGINT, previous)
    try:
        code = main(**options)
    except KeyboardInterrupt:
        code = report_error(prog, "interrupted (SIGINT)", INTERRUPTED)
    _leave(code)
    return code  # not reached where _leave exits


def _leave(code: int) -> None:
    """End the process now, as Python would but without tearing its modules down: with torch
    loaded that teardown (every module's objects freed, a last garbage collection) takes
    0.3-3 s, all of it after the tool's work is done. The exit handlers still run (temporary
    files, multiprocessing's) and the standard streams are flushed; while a second thread runs,
    the ordinary exit (which waits for it) is left to Python."""
    if threading.active_count() > 1:
        return
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):  # a reader gone away, a closed stream: nothing to keep
            pass
    os._exit(code if isinstance(code, int) else 1)


def plexus_partition() -> int:
    return run_tool("plexus-partition", "plexus_partition.cli:main")
