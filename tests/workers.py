"""How `./run test` shares the suite between its worker processes (pytest-xdist, ``--dist
loadfile``, whose scheduler the conftest replaces with this one): every test of the files that
declare a shared world (`tests/worlds.py`) goes to one worker, so each world size starts once in
the whole run, and they run first and alone (their ranks take every core); then every other
file's tests go together to one worker (a file's module fixtures are built once), the files
shared out as workers come free.

The scheduler runs in xdist's controller, which imports no test file: a file declares a world
when its module body calls ``worlds.declare(...)`` (read from its source).
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path
from typing import Callable

#: the scope of every test of a file that declares a shared world
WORLDS_SCOPE = "shared-worlds"


def declares_a_world(source: str) -> bool:
    """Whether a test module's top level calls ``worlds.declare``."""
    for node in ast.parse(source).body:
        call = node.value if isinstance(node, ast.Expr) else None
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) \
                and call.func.attr == "declare" and isinstance(call.func.value, ast.Name) \
                and call.func.value.id == "worlds":
            return True
    return False


def scope_of(nodeid: str, is_world_file: Callable[[str], bool]) -> str:
    """The worker scope of the test ``nodeid``: `WORLDS_SCOPE` for a test of a file (its path
    in the id) that declares a world, else that file."""
    file = nodeid.split("::", 1)[0]
    return WORLDS_SCOPE if is_world_file(file) else file


def scheduler(config, log):
    """xdist's per-file scheduler, with the world-declaring files as one scope."""
    from xdist.scheduler import LoadFileScheduling  # noqa: PLC0415 (only under xdist)

    root = Path(config.rootpath)

    @functools.cache
    def is_world_file(file: str) -> bool:
        path = root / file
        return path.suffix == ".py" and path.is_file() \
            and declares_a_world(path.read_text(encoding="utf-8"))

    class SharedWorlds(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid, is_world_file)

        def _worlds_pending(self) -> bool:
            return WORLDS_SCOPE in self.workqueue or any(
                not done for work in self.assigned_work.values()
                for done in work.get(WORLDS_SCOPE, {}).values())

        def _assign_work_unit(self, node) -> None:
            # The worlds first, and alone: their ranks take every core, and a test beside them
            # only slows both (on 2 cores a run with tests beside the worlds took longer than
            # one process: 26 min 44 s, 40% more CPU time, against 25 min 50 s).
            # (The worlds' own worker is given its next file as usual: a worker runs the last
            # test it holds only once it is sent another, or told to stop.)
            if WORLDS_SCOPE in self.workqueue:
                self.workqueue.move_to_end(WORLDS_SCOPE, last=False)
            elif self._worlds_pending() and WORLDS_SCOPE not in self.assigned_work.get(node, {}):
                return
            super()._assign_work_unit(node)

        def mark_test_complete(self, node, item_index: int, duration: float = 0) -> None:
            running = self._worlds_pending()
            super().mark_test_complete(node, item_index, duration)
            if running and not self._worlds_pending():  # the waiting workers start now
                for other in self.nodes:
                    if other is not node:
                        self._reschedule(other)

    return SharedWorlds(config, log)
