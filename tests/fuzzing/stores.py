"""Seeded fuzzing of what Plexus finds on disk from its own earlier runs (issue 37): the
partitioner's work directories, the cache's stores and converted graphs, outputs directories.

Every case starts from a real artefact (a killed partition's work directory, a built cache, a
written outputs directory), damages it from a seed (markers edited, truncated, planted or lost;
scratch files flipped, truncated, swapped, replaced by symlinks; signatures and records forged;
store and graph files changed in place, to the same size too; outputs directories given other
files, links, edited markers; a marker forged with its sha256 recomputed is a hand that knows
the format as well as the code, and is not among them), then runs what would find it next
(`partition_to_store` resuming, the cache reusing or rebuilding, the outputs check and write,
through `Targets`), each in a forked child (a segfault must be seen, not suffered) under an
alarm. Outcomes:

- ``ok``: it ran, and what it produced is right (the store equals the clean run's, byte for
  byte; the cache's store and graph hash to the clean ones);
- ``error``: a typed one-line error (what a command line prints with exit status 2);
- ``traceback``: any other exception; ``signal``: the child died; ``hang``: past the alarm;
- ``lost``: something outside the target changed or vanished (a planted link followed, a
  user's file replaced); ``wrong``: it ran and produced something other than the clean result.

Only the first two are acceptable. Each case's peak RSS is the forked child's
(``ru_maxrss``; it includes what it shares with the warm parent). ``benchmarks/fuzz_stores.py``
runs at least 500 cases per kind; ``tests/partitioners/test_hardening_round4_stores.py`` a small
sample.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from plexus_datasets.base import owned

from .harness import Hang, fork_json, on_alarm, read_until_eof
from .storedamage import (damage_cache, damage_outputs, damage_workdir, intact,
                          make_victim)

KINDS = ("workdir", "cache", "outputs")
GOOD = ("ok", "error")
OUTCOMES = ("ok", "error", "traceback", "signal", "hang", "lost", "wrong")
CASE_LIMIT_S = 60
SPEC = "rmat:scale=6,edge_factor=4,features=4,classes=2"
RUN = {"chunk_edges": 200, "bucket_entries": 300}


@dataclass
class Result:
    """One case's outcome, what it said, and its peak RSS in bytes."""

    kind: str
    index: int
    how: str
    outcome: str
    detail: str = ""
    peak_rss: int = 0


@dataclass(frozen=True)
class Targets:
    """What the cache and outputs kinds call, `plexus.train`'s cache and `plexus.api`'s outputs
    (`Targets.of(fuzzing.targets)`), or a test's stand-ins for them."""

    #: (cache directory, grid) -> the store the cache gives for `SPEC` (found, or built out of
    #: core through its ``graphs/``)
    cache_build: Callable[[Path, str], Path]
    #: (directory, rows) -> an outputs directory written as `plexus.save_outputs` writes one
    write_outputs: Callable[[Path, int], Path]
    #: raises a typed error unless a directory may be replaced by an outputs write
    check_outputs: Callable[[Path], Any]
    #: the outputs.json name, the array file names, the format key
    outputs_marker: str
    outputs_files: tuple[str, ...]
    outputs_format: str

    @classmethod
    def of(cls, module: Any) -> "Targets":
        """From a module defining ``cache_build(cache, grid, spec)``, ``write_outputs``,
        ``check_outputs`` and the ``OUTPUTS_*`` names (`fuzzing.targets`)."""
        return cls(lambda cache, grid: module.cache_build(cache, grid, SPEC),
                   module.write_outputs, module.check_outputs, module.OUTPUTS_MARKER,
                   tuple(module.OUTPUTS_FILES), module.OUTPUTS_FORMAT)


@dataclass
class Bases:
    """The clean artefacts every case copies: killed work directories, the clean store, a cache
    and its clean hashes, an outputs directory."""

    root: Path
    targets: Targets | None = None
    work: dict[str, Path] = field(default_factory=dict)
    store: dict[str, bytes] = field(default_factory=dict)
    cache: Path | None = None
    cache_sha: dict[str, str] = field(default_factory=dict)
    outputs: Path | None = None


# ------------------------------------------------------------------------- the clean artefacts
def _store_bytes(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.iterdir())}


def make_bases(root: Path, kinds: tuple[str, ...] = KINDS,
               targets: Targets | None = None) -> Bases:
    """Build the clean artefacts once (a few seconds); the cache and outputs kinds need
    ``targets``."""
    from plexus_partition import partition_to_store, rankfile  # noqa: PLC0415

    if targets is None and ("cache" in kinds or "outputs" in kinds):
        raise ValueError("the cache and outputs kinds need targets "
                         "(Targets.of(fuzzing.targets))")
    bases = Bases(root, targets)
    if "workdir" in kinds:
        partition_to_store(SPEC, root / "clean" / "s", "2x1x1", 2, **RUN)
        bases.store = _store_bytes(root / "clean" / "s")
        for where in ("rank_task", "manifest_step"):  # killed before / after the rank files
            folder = root / f"killed-{where}"
            real = getattr(rankfile, where)

            def crash(*args: Any, **kwargs: Any) -> Any:
                raise RuntimeError("killed")

            setattr(rankfile, where, crash)
            try:
                partition_to_store(SPEC, folder / "s", "2x1x1", 2, **RUN)
            except RuntimeError:
                pass
            finally:
                setattr(rankfile, where, real)
            [work] = [p for p in folder.iterdir() if p.name.startswith(".s.work-")]
            bases.work[where] = work
    if "cache" in kinds:
        from plexus_partition import read_manifest  # noqa: PLC0415

        bases.cache = root / "cache"
        for grid in ("1x1x1", "2x1x1"):
            path = targets.cache_build(bases.cache, grid)
            bases.cache_sha[grid] = read_manifest(path)["graph_sha256"]
        owned.remove_tree(targets.cache_build(bases.cache, "2x1x1"))  # left for the cases to build
    if "outputs" in kinds:
        bases.outputs = targets.write_outputs(root / "outputs" / "res", 5)
    return bases


# ------------------------------------------------------------------------------- running
def _typed(e: BaseException) -> bool:
    return isinstance(e, ValueError) and bool(str(e).strip()) and "\n" not in str(e)


def _run_workdir(d: Path, bases: Bases, rng: random.Random) -> tuple[str, str, str]:
    from plexus_partition import partition_to_store  # noqa: PLC0415

    victim = make_victim(d)
    base = bases.work[rng.choice(sorted(bases.work))]
    work = d / base.name
    shutil.copytree(base, work, symlinks=True)
    from plexus_datasets.base.tasks import record_files  # noqa: PLC0415

    record_files(work)  # as the killed run left it (a copy has new inodes and change times)
    how = damage_workdir(work, victim, rng)
    outcome, detail = _call(lambda: partition_to_store(SPEC, d / "s", "2x1x1", 2, **RUN))
    if not intact(d):
        return how, "lost", f"the victim changed ({detail})"
    if outcome == "ok" and _store_bytes(d / "s") != bases.store:
        return how, "wrong", "a store other than the clean run's"
    return how, outcome, detail


def _run_cache(d: Path, bases: Bases, rng: random.Random) -> tuple[str, str, str]:
    from plexus_partition import read_manifest  # noqa: PLC0415
    from plexus_partition.store import file_sha256  # noqa: PLC0415

    assert bases.cache is not None
    cache = d / "cache"
    shutil.copytree(bases.cache, cache, symlinks=True)
    how, grid = damage_cache(cache, rng)
    box: list[Path] = []
    outcome, detail = _call(lambda: box.append(bases.targets.cache_build(cache, grid)))
    if outcome != "ok":
        return how, outcome, detail
    m = read_manifest(box[0])
    if m["graph_sha256"] != bases.cache_sha[grid] or any(
            file_sha256(box[0] / r["file"]) != r["sha256"] for r in m["ranks"]):
        return how, "wrong", f"a store of graph {m['graph_sha256'][:12]} or a damaged file"
    return how, outcome, detail


def _run_outputs(d: Path, bases: Bases, rng: random.Random) -> tuple[str, str, str]:
    assert bases.outputs is not None and bases.targets is not None
    targets = bases.targets
    victim = make_victim(d)
    res = d / "res"
    shutil.copytree(bases.outputs, res, symlinks=True)
    how, ours = damage_outputs(res, victim, rng)
    before = sorted(os.listdir(res))
    ours = ours or _plexus_only(res, targets)

    def write() -> None:
        targets.check_outputs(res)
        targets.write_outputs(res, 7)

    outcome, detail = _call(write)
    if not intact(d):
        return how, "lost", "the victim changed"
    if outcome == "ok" and not ours:
        return how, "lost", f"replaced a directory holding {before}"
    return how, outcome, detail


def _plexus_only(res: Path, targets: Targets) -> bool:
    """Whether ``res`` holds nothing a user could lose: only regular files of the names Plexus
    writes, and an outputs.json of its format (fields other than the signature edited or
    not)."""
    names = set(os.listdir(res))
    if not names <= {targets.outputs_marker, *targets.outputs_files} or any(
            os.path.islink(res / n) or not (res / n).is_file() for n in names):
        return False
    try:
        meta = json.loads((res / targets.outputs_marker).read_text())
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(meta, dict) and meta.get("format") == targets.outputs_format


RUNNERS: dict[str, Callable[[Path, Bases, random.Random], tuple[str, str, str]]] = {
    "workdir": _run_workdir, "cache": _run_cache, "outputs": _run_outputs}


def _call(fn: Callable[[], Any]) -> tuple[str, str]:
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - sorted: typed one line, or a traceback
        if _typed(e):
            return "error", f"{type(e).__name__}: {str(e)[:300]}"
        tb = traceback.extract_tb(e.__traceback__)[-1]
        return "traceback", (f"{type(e).__name__}: {' '.join(str(e).split())[:300]} "
                             f"({Path(tb.filename).name}:{tb.lineno})")
    return "ok", ""


#: what the machine, not the case, ran out of (other processes' load): the case runs again
_STARVED = ("can't start new thread", "Resource temporarily unavailable")


def run_case(kind: str, index: int, seed: int, bases: Bases, folder: Path,
             limit_s: int = CASE_LIMIT_S) -> Result:
    """One case in a forked child: its outcome and the child's peak RSS (run again, up to 5
    times, when the machine could not give it a process or a thread)."""
    for attempt in range(5):
        try:
            result = _run_case(kind, index, seed, bases, folder, limit_s)
        except BlockingIOError:  # fork: no process to be had just now
            result = Result(kind, index, "?", "traceback", _STARVED[1])
        if not any(s in result.detail for s in _STARVED):
            return result
        owned.remove_tree(folder / f"{kind}-{index}", quiet=True)
        time.sleep(1 + attempt)
    return result


def _run_case(kind: str, index: int, seed: int, bases: Bases, folder: Path,
              limit_s: int) -> Result:
    def case() -> list:  # in the forked child
        signal.signal(signal.SIGALRM, on_alarm)
        signal.alarm(limit_s)
        rng = random.Random(f"{seed}-{kind}-{index}")
        d = folder / f"{kind}-{index}"
        d.mkdir(parents=True)
        try:
            how, outcome, detail = RUNNERS[kind](d, bases, rng)
        except Hang:
            how, outcome, detail = "?", "hang", f"still running after {limit_s} s"
        signal.alarm(0)
        return [how, outcome, detail]

    # a harness that itself failed says so
    pid, read = fork_json(case, lambda: ["?", "traceback", traceback.format_exc()[-300:]])
    data, killed = read_until_eof(read, pid, limit_s + 30)
    _, status, usage = os.wait4(pid, 0)
    owned.remove_tree(folder / f"{kind}-{index}", quiet=True)
    peak = int(usage.ru_maxrss) * 1024
    if killed:
        return Result(kind, index, "?", "hang", f"killed after {limit_s + 30} s", peak)
    if os.WIFSIGNALED(status):
        return Result(kind, index, "?", "signal", f"signal {os.WTERMSIG(status)}", peak)
    try:
        how, outcome, detail = json.loads(data or b"null")
    except (TypeError, ValueError):
        how, outcome, detail = "?", "signal", f"no result, exit status {status}"
    return Result(kind, index, how, outcome, detail, peak)


def run_cases(root: Path, per_kind: int, seed: int, kinds: tuple[str, ...] = KINDS,
              targets: Targets | None = None,
              progress: Callable[[Result], None] | None = None) -> list[Result]:
    """``per_kind`` cases of every kind in ``kinds`` under ``root``; every case's result."""
    bases = make_bases(root / "bases", kinds, targets)
    results = []
    for kind in kinds:
        for i in range(per_kind):
            result = run_case(kind, i, seed, bases, root / "cases")
            results.append(result)
            if progress is not None:
                progress(result)
    return results


def summarize(results: list[Result]) -> dict[str, dict[str, Any]]:
    """Per kind: the count of each outcome and the largest peak RSS."""
    out: dict[str, dict[str, Any]] = {}
    for r in results:
        entry = out.setdefault(r.kind, {"outcomes": Counter(), "max_peak_rss": 0,
                                        "damage": Counter()})
        entry["outcomes"][r.outcome] += 1
        entry["damage"][r.how.split()[0] if r.how else "?"] += 1
        entry["max_peak_rss"] = max(entry["max_peak_rss"], r.peak_rss)
    return out
