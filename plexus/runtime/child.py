"""Run one function in a fresh child process and hand back its result: for work whose memory must
not stay with the caller (partitioning a whole graph before a job's ranks start).

The child is spawned (a fresh interpreter, nothing inherited but the arguments), dies with its
parent (the kernel's parent-death signal), and its memory goes back to the system when it ends:
the caller's resident set never holds what the child held. An exception in the child is raised
again in the caller, with the child's traceback as its cause; a child that dies without one
(killed by the OOM killer, a signal) raises `ChildDied`.
"""

from __future__ import annotations

import multiprocessing as mp
import traceback
from typing import Any, Callable

from plexus_partition.launch.lifeline import set_parent_death_signal


class ChildDied(RuntimeError):
    """The child process ended without a result (killed, or exited)."""

    def __init__(self, what: str, exitcode: int | None) -> None:
        how = (f"was killed by signal {-exitcode}" if exitcode is not None and exitcode < 0
               else f"exited with status {exitcode}")
        hint = " (out of memory?)" if exitcode == -9 else ""
        super().__init__(f"{what} in a child process failed: the child {how}{hint}")
        self.exitcode = exitcode


class ChildTraceback(Exception):
    """The traceback of an exception raised in the child (the ``__cause__`` of the re-raised
    exception)."""


def _child_main(conn: Any, fn: Callable[..., Any], args: tuple) -> None:
    set_parent_death_signal()
    try:
        result: tuple = ("ok", fn(*args))
    except BaseException as e:  # noqa: BLE001 — handed to the parent, which raises it
        text = "".join(traceback.format_exception(type(e), e, e.__traceback__))
        result = ("error", e, text)
    try:
        conn.send(result)
    except Exception as e:  # noqa: BLE001 — an unpicklable result or exception
        conn.send(("error", RuntimeError(f"{type(e).__name__}: {e}"), result[-1]))
    conn.close()


def run_in_child(what: str, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` in a spawned child process; its return value (``fn``, its arguments and its
    result must be picklable). ``what`` names the work in `ChildDied`'s message."""
    ctx = mp.get_context("spawn")
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_child_main, args=(send, fn, args), daemon=True,
                        name=f"plexus-{what.split()[0]}")
    child.start()
    send.close()
    try:
        try:
            message = receive.recv()
        except EOFError:  # the child ended without a word
            child.join()
            raise ChildDied(what, child.exitcode) from None
        child.join()
    finally:
        receive.close()
        if child.is_alive():  # the caller was interrupted: the child must not outlive it
            child.kill()
            child.join()
    if message[0] == "ok":
        return message[1]
    error = message[1]
    raise error from ChildTraceback(message[2].rstrip())
