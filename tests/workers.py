"""How `./run test` shares the suite between its worker processes (pytest-xdist, ``--dist
loadgroup``): the tests of the shared worlds (`tests/worlds.py`) all in one worker, first, so
each world size starts once in the whole run and the longest piece of work starts at once; every
other test file's tests together in one worker (a file's module fixtures are built once) and the
files shared out as workers come free.
"""

from __future__ import annotations

from pathlib import Path

#: the group of every test of a file that declares a shared world
WORLDS_GROUP = "shared-worlds"


def group_of(test_file: str | Path, world_files: set[str]) -> str:
    """The worker group of a test of ``test_file``: `WORLDS_GROUP` for a file whose checks run in
    a shared world (``world_files``: their resolved paths), else the file itself."""
    path = str(Path(test_file).resolve())
    return WORLDS_GROUP if path in world_files else path


def worlds_first(groups: list[str]) -> list[int]:
    """The order (indices into ``groups``, one per collected test) that puts the shared worlds'
    tests first and keeps every other test where it was."""
    return sorted(range(len(groups)), key=lambda i: groups[i] != WORLDS_GROUP)
