"""Fuzz the shard-store cache as a hostile co-user and a careless user would, and print the
outcomes (issue 46: planted links, foreign owners, forged manifests, concurrent clean and runs).

    python benchmarks/fuzz_cache.py [--cases 500] [--seed 0] [--out benchmarks/results] [--smoke]

Each case copies a built private cache (one real store of a small R-MAT graph, whose labels are
the oracle), applies one to three random plants, then one action — a run finding its store
(`plexus.train.cache.cached_options`, what ``plexus-train --dataset`` does), ``--cache-clean``
(``plexus-train``'s `main`, exit status read), ``--cache-max-gb`` eviction, or a clean and a run
at once in two processes. Plants: a ``graphs`` link, a store name linked, lock files linked to a
victim's file, a user's folders in ``graphs/`` and beside the stores, a file added to the store,
a rank file truncated or flipped, the store forged (labels and features zeroed, the manifest's
sha256 rewritten; its seal kept, rewritten without the key, or removed), a seal copied from
another store, the store, the cache or ``graphs`` owned by another uid, the cache writable by
the group or others, a ``verified/`` stamp or ``sources/`` record forged; as root, also a shared
sticky folder where uid 65534 (a forked child) makes the cache and plants a forged store and a
``graphs`` link. Every case runs in a forked child under an alarm.

Outcomes: ``ok`` (what was run succeeded, and a store a run got has the oracle's labels) and
``error`` (one typed line) are acceptable; ``traceback``, ``signal``, ``hang``, ``lost`` (a file
of the victim outside the cache, or of the user's folders inside it, changed or gone) and
``wrong`` (exit 0 with a store whose labels differ from the oracle's, or a clean of exit 0
that left a store no run holds) are bugs, listed. Writes ``fuzz_cache.txt`` and
``fuzz_cache.json`` under ``--out``; exit status 1 if any case was not acceptable.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # tests/fuzzing
from fuzzing.harness import Hang, fork_json, on_alarm, read_until_eof  # noqa: E402
from fuzzing.storedamage import (contents, forge_store, reseal_without_key,  # noqa: E402
                                 store_labels)

SPEC = "rmat:scale=6,edge_factor=4,features=8,classes=3"
NOBODY = 65534
CASE_LIMIT_S = 120
GOOD = ("ok", "error")
PLANTS = ("graphs_link", "store_link", "lock_link", "users_folders", "file_added", "truncated",
          "flipped", "forged", "forged_resealed", "forged_unsealed", "seal_swapped",
          "store_foreign", "cache_foreign", "graphs_foreign", "cache_open", "stamp_forged",
          "source_forged", "shared_by_nobody")
ACTIONS = ("run", "clean", "evict", "clean_and_run")


def _plan(grid: str = "1x1x1") -> Any:
    from plexus_partition.model.grid import GridShape
    from plexus.engine.config import EngineConfig, ModelConfig, TrainConfig
    from plexus.train.plan import RunRequest

    return RunRequest(grid=GridShape.parse(grid), dataset=SPEC, root=None, model=ModelConfig(),
                      train=TrainConfig(epochs=1, seed=0), engine=EngineConfig())


def _run(cache: Path) -> Any:
    """A run's store from the cache, held as a run holds it (raises what the run would say)."""
    from plexus.train.cache import Cache, cached_options

    return cached_options(_plan(), Cache(cache), None)[1]


def _fork() -> int:
    """``os.fork``, tried again while the shared machine has no process to give (EAGAIN: the
    machine's load, not the case's doing)."""
    for attempt in range(30):
        try:
            return os.fork()
        except BlockingIOError:
            time.sleep(1 + attempt % 5)
    return os.fork()


def _chown_tree(path: Path) -> None:
    for p in [path, *path.rglob("*")]:
        os.lchown(p, NOBODY, NOBODY)


def _as_nobody(fn: Callable[[], None]) -> None:
    pid = _fork()
    if pid == 0:
        code = 1
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            fn()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError("the planting child failed")


class Case:
    """One case's folders: the cache, the victim outside it, and what must not change."""

    def __init__(self, d: Path, base: Path, shared: Path | None) -> None:
        self.d, self.shared = d, shared
        self.cache = d / "cache"
        shutil.copytree(base, self.cache, symlinks=True)
        self.store = next(p for p in self.cache.iterdir() if p.name.startswith("rmat-"))
        self.victim = d / "victim"
        (self.victim / "thesis").mkdir(parents=True)
        (self.victim / "thesis" / "chapter1.tex").write_text("years of work\n")
        (self.victim / "data.csv").write_text("1,2,3\n")
        self.keep: dict[Path, dict] = {}

    def users_folder(self, path: Path) -> None:
        (path / "src").mkdir(parents=True, exist_ok=True)
        (path / "src" / "main.py").write_text("print('mine')\n")
        (path / "notes.md").write_text("notes\n")
        self.keep[path] = contents(path)

    def plant(self, what: str, rng: random.Random) -> None:
        cache, store = self.cache, self.store
        if what == "graphs_link":
            shutil.rmtree(cache / "graphs", ignore_errors=True)  # (the harness's own doing)
            self.keep = {k: v for k, v in self.keep.items() if k.parent != cache / "graphs"}
            os.symlink(self.victim, cache / "graphs")
        elif what == "store_link":
            other = cache / store.name.replace("rmat-", "rmat-x")
            os.symlink(self.victim, other)
        elif what == "lock_link":
            (cache / "locks").mkdir(exist_ok=True)
            lock = cache / "locks" / f"{store.name}.use"
            lock.unlink(missing_ok=True)
            os.symlink(self.victim / "data.csv", lock)
        elif what == "users_folders":
            self.users_folder(cache / "graphs" / "thesis")
            self.users_folder(cache / "my-project")
        elif what == "file_added":
            (store / "notes.txt").write_text("which run\n")
        elif what in ("truncated", "flipped"):
            rank = next(store.glob("rank-*.npz"))
            data = bytearray(rank.read_bytes())
            if what == "truncated":
                data = data[:rng.randrange(1, len(data))]
            else:
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
            rank.write_bytes(bytes(data))
        elif what == "forged":
            forge_store(store)
        elif what == "forged_resealed":
            forge_store(store)
            reseal_without_key(store)
        elif what == "forged_unsealed":
            forge_store(store)
            (store / ".plexus-seal.json").unlink(missing_ok=True)
        elif what == "seal_swapped" and (store / ".plexus-seal.json").exists():
            fake = cache / "elsewhere"
            shutil.copytree(store, fake)
            (fake / "manifest.json").write_text((fake / "manifest.json").read_text() + " ")
            shutil.copy(fake / ".plexus-seal.json", store / ".plexus-seal.json")
            shutil.rmtree(fake)
        elif what == "store_foreign" and os.geteuid() == 0:
            _chown_tree(store)
        elif what == "cache_foreign" and os.geteuid() == 0:
            os.lchown(cache, NOBODY, NOBODY)
        elif what == "graphs_foreign" and os.geteuid() == 0:
            (cache / "graphs").mkdir(exist_ok=True)
            self.users_folder(cache / "graphs" / "planted")
            _chown_tree(cache / "graphs")
            self.keep.pop(cache / "graphs" / "planted")  # another user's: theirs to lose
        elif what == "cache_open":
            cache.chmod(rng.choice((0o777, 0o770, 0o775, 0o1777, 0o720)))
        elif what == "stamp_forged":
            (cache / "verified").mkdir(exist_ok=True)
            for stamp in (cache / "verified").glob("*.json"):
                stamp.write_text(json.dumps([["rank-x0-y0-z0.npz", 1, 2, 3, 4, "0" * 64]]))
        elif what == "source_forged":
            for record in (cache / "sources").glob("*.json"):
                doc = json.loads(record.read_text())
                doc["sizes"]["num_nodes"] = rng.choice((1, 10**6, 63))
                record.write_text(json.dumps(doc))
        elif what == "shared_by_nobody" and self.shared is not None and os.geteuid() == 0:
            readable = self.shared / f"{self.d.name}-copy"  # what the co-user may read
            shutil.copytree(store, readable / store.name)
            shutil.copytree(cache / "sources", readable / "sources")
            for p in [readable, *readable.rglob("*")]:
                p.chmod(0o755 if p.is_dir() else 0o644)
            self.cache = self.shared / f"{self.d.name}-cache"
            victim = self.victim

            def plant() -> None:
                os.mkdir(self.cache, 0o777)
                os.chmod(self.cache, 0o777)
                shutil.copytree(readable / store.name, self.cache / store.name)
                shutil.copytree(readable / "sources", self.cache / "sources")
                forge_store(self.cache / store.name)
                os.symlink(victim, self.cache / "graphs")

            _as_nobody(plant)
            self.store = self.cache / store.name


def _call(fn: Callable[[], Any]) -> tuple[str, str, Any]:
    try:
        from plexus_datasets.base.owned import NotOursError
    except ImportError:  # a Plexus before it (the harness also runs there, to show what it sees)
        NotOursError = ValueError  # noqa: N806
    from plexus_partition import ShardStoreError
    from plexus.train.errors import CacheError

    try:
        return "ok", "", fn()
    except (CacheError, ShardStoreError, NotOursError, OSError) as e:
        text = str(e)
        if "\n" in text.strip() or not text:
            return "traceback", f"{type(e).__name__}: {text[:300]}", None
        return "error", f"{type(e).__name__}: {text[:300]}", None
    except Exception as e:  # noqa: BLE001 - anything else is a bug of the code under test
        tb = traceback.extract_tb(e.__traceback__)[-1]
        return "traceback", f"{type(e).__name__}: {str(e)[:200]} ({Path(tb.filename).name}:" \
                            f"{tb.lineno})", None


def _clean(cache: Path) -> tuple[str, str, Any]:
    """``plexus-train --cache DIR --cache-clean`` in this process: its exit status."""
    import contextlib
    import io

    from plexus.train.cli import main

    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        status = main(["--cache", str(cache), "--cache-clean"])
    text = err.getvalue().strip()
    if status == 0:
        return "ok", "", 0
    if status == 2 and text.count("\n") == 0 and "Traceback" not in text:
        return "error", text[:300], 2
    return "traceback", f"exit {status}: {text[-300:]}", status


def _evict(cache: Path) -> tuple[str, str, Any]:
    from plexus.train.cacheuse import evict

    return _call(lambda: evict(cache, 1))


def _check_run(outcome: str, detail: str, store: Any, oracle: list) -> tuple[str, str]:
    """A run's outcome, its store read while the run still holds it (as training would)."""
    if outcome != "ok":
        return outcome, detail
    try:
        if store_labels(Path(store.path)) != oracle:
            return "wrong", f"reused {store.path} whose labels differ from the graph's"
    finally:
        store.hold.release()
    return outcome, detail


def run_one(d: Path, base: Path, shared: Path | None, oracle: list,
            rng: random.Random) -> tuple[str, str, str]:
    case = Case(d, base, shared)
    plants = rng.sample(PLANTS, rng.choice((1, 1, 2, 3)))
    action = rng.choice(ACTIONS)
    how = f"{'+'.join(plants)} -> {action}"
    for what in plants:
        case.plant(what, rng)
    victim = contents(case.victim)
    if action == "run":
        outcome, detail, store = _call(lambda: _run(case.cache))
        outcome, detail = _check_run(outcome, detail, store, oracle)
    elif action == "clean":
        outcome, detail, _ = _clean(case.cache)
        if outcome == "ok" and any(p.name.startswith("rmat-") and p.is_dir()
                                   and not p.is_symlink() and p.stat().st_uid == os.geteuid()
                                   and (p / ".plexus-seal.json").exists()
                                   and not any(p.glob("notes.txt"))
                                   for p in case.cache.iterdir()) and not plants_touch_store(
                                       plants):
            outcome, detail = "wrong", "exit 0 but an unheld store of this user's is left"
    elif action == "evict":
        outcome, detail, _ = _evict(case.cache)
    else:
        pid, read = fork_json(lambda: _clean(case.cache)[:2], fork=_fork)
        outcome, detail, store = _call(lambda: _run(case.cache))
        outcome, detail = _check_run(outcome, detail, store, oracle)
        got, _ = read_until_eof(read, pid)
        _, status = os.waitpid(pid, 0)
        other = json.loads(got) if got else ["signal", f"clean exit {status}"]
        if other[0] not in GOOD:
            outcome, detail = other[0], f"the concurrent clean: {other[1]}"
    if contents(case.victim) != victim:
        return how, "lost", "a file of the victim outside the cache changed or went"
    for path, files in case.keep.items():
        if contents(path) != files:
            return how, "lost", f"the user's {path.name}/ in the cache changed or went"
    return how, outcome, detail


def plants_touch_store(plants: list[str]) -> bool:
    """Plants after which the store may rightly stay after a clean (not provably this user's,
    or in a cache not trusted)."""
    return bool(set(plants) & {"file_added", "forged_resealed", "forged_unsealed",
                               "seal_swapped", "store_foreign", "cache_foreign", "cache_open",
                               "forged", "truncated", "flipped", "lock_link",
                               "shared_by_nobody"})


def run_case(index: int, seed: int, base: Path, shared: Path | None, oracle: list,
             folder: Path) -> dict:
    """One case in a forked child under an alarm: its outcome."""
    def case() -> tuple[str, str, str]:  # in the forked child
        signal.signal(signal.SIGALRM, on_alarm)
        signal.alarm(CASE_LIMIT_S)
        d = folder / f"case-{index}"
        d.mkdir()
        try:
            result = run_one(d, base, shared, oracle, random.Random(f"{seed}-{index}"))
        except Hang:
            result = ("?", "hang", f"still running after {CASE_LIMIT_S} s")
        signal.alarm(0)
        return result

    # a harness that itself failed says so
    pid, read = fork_json(case, lambda: ["?", "traceback", traceback.format_exc()[-400:]],
                          fork=_fork)
    got, killed = read_until_eof(read, pid, CASE_LIMIT_S + 30)
    _, status = os.waitpid(pid, 0)
    for leftover in (folder / f"case-{index}", *(shared.glob(f"case-{index}-*") if shared
                                                 else ())):
        subprocess_rm(leftover)
    if killed:
        return {"index": index, "how": "?", "outcome": "hang", "detail": "killed"}
    if os.WIFSIGNALED(status):
        return {"index": index, "how": "?", "outcome": "signal",
                "detail": f"signal {os.WTERMSIG(status)}"}
    how, outcome, detail = json.loads(got or b'["?", "signal", "no result"]')
    return {"index": index, "how": how, "outcome": outcome, "detail": detail}


def subprocess_rm(path: Path) -> None:
    """The harness's own scratch (the case's copies, as root: whoever owns them)."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        for p in [path, *path.rglob("*")]:
            if p.is_dir() and not p.is_symlink():
                p.chmod(0o700)
        shutil.rmtree(path, ignore_errors=True)


def build_base(folder: Path) -> tuple[Path, list]:
    """A private cache with one real store of SPEC, and its labels (the oracle)."""
    from plexus_datasets import load_dataset

    base = folder / "base"
    held = _run(base)
    held.hold.release()
    store = Path(held.path)
    graph = load_dataset(SPEC, seed=0)
    labels = store_labels(store)
    manifest = json.loads((store / "manifest.json").read_text())
    assert manifest["num_nodes"] == graph.num_nodes
    assert sorted(v for rank in labels for v in rank if v >= 0) == \
        sorted(graph.labels.tolist()), "the store's labels are not the graph's"
    return base, labels


def run_cases(folder: Path, cases: int, seed: int,
              progress: Callable[[dict], None] = lambda r: None) -> list[dict]:
    folder.mkdir(parents=True, exist_ok=True)
    shared = None
    if os.geteuid() == 0:
        shared = Path(tempfile.mkdtemp(prefix="plexus-fuzz-shared-", dir="/tmp"))
        shared.chmod(0o1777)
    try:
        base, oracle = build_base(folder)
        results = []
        for i in range(cases):
            results.append(run_case(i, seed, base, shared, oracle, folder))
            progress(results[-1])
        return results
    finally:
        if shared is not None:
            subprocess_rm(shared)


def summarize(results: list[dict]) -> dict:
    outcomes = collections.Counter(r["outcome"] for r in results)
    plants = collections.Counter(p for r in results for p in r["how"].split(" -> ")[0].split("+"))
    actions = collections.Counter(r["how"].split(" -> ")[-1] for r in results)
    return {"cases": len(results), "outcomes": dict(outcomes), "plants": dict(plants),
            "actions": dict(actions),
            "bad": [r for r in results if r["outcome"] not in GOOD]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", type=int, default=500)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path("benchmarks/out"))
    p.add_argument("--smoke", action="store_true", help="24 cases")
    args = p.parse_args(argv)
    if args.smoke:
        args.cases = 24
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)

    def progress(r: dict) -> None:
        if r["outcome"] not in GOOD:
            print(f"case {r['index']}: {r['outcome']}: {r['how']}: {r['detail'][:300]}",
                  file=sys.stderr, flush=True)
        if (r["index"] + 1) % 50 == 0:
            print(f"{r['index'] + 1} cases", file=sys.stderr, flush=True)

    start = time.perf_counter()
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="plexus-fuzz-cache-") as tmp:
        results = run_cases(Path(tmp), args.cases, args.seed, progress)
    summary = summarize(results)
    summary.update(seed=args.seed, seconds=round(time.perf_counter() - start, 1),
                   load_before=[round(x, 2) for x in load],
                   load_after=[round(x, 2) for x in os.getloadavg()],
                   as_root=os.geteuid() == 0, date=time.strftime("%Y-%m-%d %H:%M UTC",
                                                                 time.gmtime()))
    lines = [f"fuzz_cache: {summary['cases']} cases (seed {args.seed}), "
             f"{summary['seconds']} s, load {summary['load_before']} -> {summary['load_after']}"
             f"{', two users (root and uid 65534)' if summary['as_root'] else ''}",
             "outcomes: " + ", ".join(f"{k} {v}" for k, v in sorted(summary["outcomes"].items())),
             "plants: " + ", ".join(f"{k} {v}" for k, v in sorted(summary["plants"].items())),
             "actions: " + ", ".join(f"{k} {v}" for k, v in sorted(summary["actions"].items())),
             f"not acceptable: {len(summary['bad'])}"]
    lines += [f"  case {r['index']}: {r['outcome']}: {r['how']}: {r['detail'][:200]}"
              for r in summary["bad"]]
    print("\n".join(lines))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "fuzz_cache.txt").write_text("\n".join(lines) + "\n")
    (args.out / "fuzz_cache.json").write_text(json.dumps({**summary, "results": results},
                                                         indent=1) + "\n")
    return 1 if summary["bad"] else 0


if __name__ == "__main__":
    sys.exit(main())
