"""One local world per world size for the whole session (issue 58 item 5): the test files whose
checks run in gloo worlds declare, at import, which function runs on every rank at each world
size (a "family" of checks); the first test that needs a world of N ranks starts one, in which
every declared family of that size runs, one after the other. Starting a world was the slow part
(every rank importing torch and the engine anew: tens of seconds for 8 or 16 ranks on 2 cores), so
the session starts each size once instead of once per file, its ranks forked from a fork server
that imported them once.

A family runs only when a test of its file is selected (the conftest passes the session's
selection to `select`), so a narrow run starts no more than it needs. Each family's per-rank
results are exactly what ``run_world(size, fn, *args)`` would have returned; a family that raised
fails its own tests with its rank's traceback, not the others'.
"""

from __future__ import annotations

import traceback
from pathlib import Path
from typing import Callable

# size -> family -> (the declaring test file, the function every rank runs, its arguments)
_declared: dict[int, dict[str, tuple[str, Callable, tuple]]] = {}
_selected: set[str] | None = None  # the session's selected test files (None: every file)
_done: dict[int, dict[str, list]] = {}  # size -> family -> per-rank results (or the error)

#: what the fork server of the shared worlds' ranks imports once (the checks' own modules sit in
#: tests/, off the server's path: each rank imports them, 0.15 s)
PRELOAD = ("plexus.engine.model", "plexus.engine.trainer", "plexus.testing.exactness")
#: a shared world runs several files' checks before any rank reports: the silence allowed
SHARED_TIMEOUT = 3600


def declare(family: str, test_file: str, worlds: dict[int, tuple[Callable, tuple]]) -> None:
    """``worlds`` {size: (fn, args)}: ``fn(*args)`` runs on every rank of the shared world of
    ``size`` ranks for the tests of ``test_file`` (its ``__file__``); ``fn`` must be importable."""
    for size, (fn, args) in worlds.items():
        _declared.setdefault(size, {})[family] = (str(Path(test_file).resolve()), fn, tuple(args))


def declared_files() -> set[str]:
    """The resolved paths of the test files that declared a family (imported so far)."""
    return {path for families in _declared.values() for path, _, _ in families.values()}


def select(test_files: set[str]) -> None:
    """Only the families of these files (the session's selected tests) run in a shared world."""
    global _selected  # noqa: PLW0603 — the session's selection, set once by the conftest
    _selected = {str(Path(f).resolve()) for f in test_files}


def ranks(size: int, family: str) -> list:
    """Every rank's result of ``family``'s function in the shared world of ``size`` ranks (the
    world started at the first call for its size, with every selected family of that size)."""
    if family not in _declared.get(size, {}):
        raise KeyError(f"no family {family!r} declared for a world of {size} ranks")
    if family not in _done.get(size, {}):
        _start(size, family)
    got = _done[size][family]
    errors = [(r, v[1]) for r, v in enumerate(got) if v[0] == "error"]
    if errors:
        rank, tb = errors[0]
        raise RuntimeError(f"{family} checks failed on rank {rank} of the shared world of "
                           f"{size} ranks:\n{tb}")
    return [v[1] for v in got]


def merged(size: int, family: str) -> dict[str, list[str]]:
    """``family``'s per-rank {check name: [failures]} merged per check."""
    out: dict[str, list[str]] = {}
    for rank_result in ranks(size, family):
        for key, fails in rank_result.items():
            out.setdefault(key, []).extend(fails)
    return out


def _start(size: int, family: str) -> None:
    from plexus.testing.localworld import run_world  # noqa: PLC0415 (torch: at first use)

    done = _done.setdefault(size, {})
    todo = [(name, fn, args) for name, (path, fn, args) in sorted(_declared[size].items())
            if name not in done and (name == family or _selected is None or path in _selected)]
    # the shared worlds run alone (tests/workers.py): their ranks may take a core each; forked
    # from a server that imports torch and the engine once (a fresh interpreter per rank cost
    # 2.4-23 s a world here, 61 s for the session's seven sizes)
    per_rank = run_world(size, run_families, todo, timeout=SHARED_TIMEOUT, bind=True,
                         preload=list(PRELOAD))
    for name, _, _ in todo:
        done[name] = [rank_result[name] for rank_result in per_rank]


def run_families(families: list[tuple[str, Callable, tuple]]) -> dict[str, tuple[str, object]]:
    """On a rank: each family's ``fn(*args)`` in turn, {family: ("ok", result) or ("error",
    traceback)}. A family that raises does not stop the others: an error every rank meets (a
    check's own bug) fails only that family's tests; one rank's error leaves its peers in a
    collective until gloo's timeout, and they report that as theirs."""
    out: dict[str, tuple[str, object]] = {}
    for name, fn, args in families:
        try:
            out[name] = ("ok", fn(*args))
        except Exception:  # noqa: BLE001 — reported to that family's tests
            out[name] = ("error", traceback.format_exc())
    return out
