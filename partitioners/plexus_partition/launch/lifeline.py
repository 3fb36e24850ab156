"""Tie a locally launched worker's life to its launcher's, and leave nothing behind when the
launcher is killed outright.

Workers forked from a fork server (CPU workers of more than one thread) are its children, not
the launcher's, so the kernel's parent-death signal alone does not reach them when the launcher
dies: it fires when the fork server dies, and the fork server outlives a SIGKILLed launcher.
Each worker therefore also runs a watchdog thread that waits on a pidfd of the launcher (no
polling, no pid reuse; a worker forked from the launcher itself has only this); when the launcher
is gone it removes the job's temporary directories (which the launcher's own clean-up, never run
after SIGKILL, would have removed), kills the fork server (which brings down every other worker
through their parent-death signal) and ends itself. The resource tracker then sees its last
client go, unlinks the job's semaphores and exits.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from plexus_datasets.base import owned


def set_parent_death_signal(sig: int = signal.SIGKILL) -> bool:
    """Ask the kernel to send ``sig`` to this process when its parent dies (0: no signal;
    Linux; elsewhere a no-op returning False)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes  # noqa: PLC0415

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        return libc.prctl(pr_set_pdeathsig, int(sig)) == 0
    except (OSError, AttributeError):
        return False


def _wait_for_exit(pid: int) -> None:
    """Return once process ``pid`` has ended (at once if it has already)."""
    try:
        fd = os.pidfd_open(pid)  # readable when the process ends
    except ProcessLookupError:
        return
    except (AttributeError, OSError):  # no pidfd (old kernel, not Linux): poll
        while True:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            except PermissionError:
                pass
            time.sleep(0.2)
    try:
        select.select([fd], [], [])
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Lifeline:
    """What a worker needs to end with its launcher: the launcher's pid and the temporary
    directories the launcher would remove when it exits normally."""

    launcher_pid: int
    cleanup: tuple[str, ...] = field(default_factory=tuple)

    def hold(self) -> None:
        """Call first thing in a worker: it ends, and cleans up, when the launcher ends."""
        parent = os.getppid()  # the launcher, or the fork server (killed in `_launcher_died`)
        if parent != self.launcher_pid:
            # a fork server's child: its death (killed below) ends the others
            set_parent_death_signal()
            if os.getppid() != parent:  # the parent died before the request took effect
                self._launcher_died(parent)
        else:
            # a worker forked from the launcher itself takes no such signal (torch's process
            # starter asks for SIGINT): every worker would die with the launcher at once,
            # before any removed the job's files. The watchdog ends it
            set_parent_death_signal(0)
        threading.Thread(target=self._watch, args=(parent,), name="plexus-lifeline",
                         daemon=True).start()

    def _watch(self, parent: int) -> None:
        _wait_for_exit(self.launcher_pid)
        self._launcher_died(parent)

    def _launcher_died(self, parent: int) -> None:
        for path in self.cleanup:
            owned.remove_tree(path, quiet=True)
        if parent != self.launcher_pid and os.getppid() == parent:
            try:  # the fork server: its death ends every other worker (parent-death signal)
                os.kill(parent, signal.SIGKILL)
            except OSError:
                pass
        os._exit(1)
