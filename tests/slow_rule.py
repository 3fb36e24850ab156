"""The slow rule at run time (issue 58 item 5): a fast test (not `@pytest.mark.slow`, nor its
module) that starts a world of several ranks or a tool's process fails. The conftest watches every
fast test from its set-up to its end; `tests/docs/test_suite_layout.py` checks the watch itself.

What it counts: fresh interpreters started with `multiprocessing` (spawn or forkserver: the ranks
of a local world; one rank alone is allowed, as the static rule allows ``run_world(1, ...)``; a fork
of the test's process is not counted), and subprocesses that run a tool or a Python program: a
``plexus-*`` command, ``torchrun``, or a Python interpreter given a script or ``-m``, or a ``-c``
snippet that imports ``plexus`` (and torch with it). Other snippets (the partitioner's, which has
no torch) and other programs (git, find, a stand-in ``./run``) are not tools.
"""

from __future__ import annotations

import multiprocessing.process
import os
import re
import subprocess
from contextlib import contextmanager
from typing import Iterator, Sequence

_IMPORTS_PLEXUS = re.compile(r"\b(import|from)\s+plexus\b")  # the engine's package (torch)
_watching: list[list[str]] = []  # the open watches' records (one at a time in practice)


def tool_command(argv: Sequence[str] | str) -> bool:
    """Whether a subprocess's command line runs a tool or a Python program (see the module's
    docstring)."""
    args = [argv] if isinstance(argv, (str, bytes, os.PathLike)) else list(argv)
    if not args:
        return False
    first = os.path.basename(os.fspath(args[0]))
    if isinstance(first, bytes):
        first = first.decode(errors="replace")
    if first.startswith("plexus-") or first == "torchrun":
        return True
    if first.startswith("python"):
        rest = [os.fspath(a) for a in args[1:]]
        if "-c" in rest:  # a snippet: a tool when it imports the project
            code = rest[rest.index("-c") + 1] if rest.index("-c") + 1 < len(rest) else ""
            return bool(_IMPORTS_PLEXUS.search(str(code)))
        return any(not a.startswith("-") for a in rest) or "-m" in rest
    return False


def _install() -> None:
    """Wrap process starts once per session: each start is recorded in the open watch."""
    if getattr(subprocess.Popen, "_slow_rule", False):
        return
    popen_init = subprocess.Popen.__init__
    process_start = multiprocessing.process.BaseProcess.start

    def init(self, args, *a, **k):
        if _watching and tool_command(args):
            _watching[-1].append(f"a tool process: {args!r}"[:120])
        popen_init(self, args, *a, **k)

    def start(self):
        # a fresh interpreter (spawn, forkserver: a world's rank imports torch anew); a fork of
        # this process (a partitioning pool's worker) starts nothing new
        if _watching and getattr(self, "_start_method", None) in ("spawn", "forkserver"):
            _watching[-1].append(f"a process of a world: {self.name}")
        process_start(self)

    subprocess.Popen.__init__ = init
    subprocess.Popen._slow_rule = True
    multiprocessing.process.BaseProcess.start = start


def breaks_the_rule(starts: Sequence[str]) -> list[str]:
    """The starts a fast test may not make: any tool process, and a world's processes when
    there are two or more."""
    ranks = [s for s in starts if s.startswith("a process of a world")]
    return [s for s in starts if s.startswith("a tool process")] + (ranks if len(ranks) > 1
                                                                      else [])


def begin() -> list[str]:
    """Start recording the processes started from now on; `end` stops it."""
    _install()
    record: list[str] = []
    _watching.append(record)
    return record


def end(record: list[str]) -> None:
    """Stop the recording `begin` returned (again: nothing). By identity: two empty records are
    equal lists."""
    _watching[:] = [r for r in _watching if r is not record]


@contextmanager
def watch() -> Iterator[list[str]]:
    """Record the processes started inside the block (see `breaks_the_rule`)."""
    record = begin()
    try:
        yield record
    finally:
        end(record)
