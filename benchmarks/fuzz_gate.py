"""Fuzz the surfaces of issue 56: outputs through links, checkpoints of another uid, ranks that
do not match, and hostile calls of the public API. Seeded; every case in this process, each
under an alarm (a case still running after `CASE_LIMIT_S` is a hang).

- ``links``: a path of 1-4 folders under a private scratch folder, each this user's (0755), one
  others can write (0777, not sticky), a sticky one (1777), another uid's (65534), this user's
  link in a private folder, another uid's link, or this user's link in a sticky folder; the last
  entry absent, this user's file, another uid's file or a FIFO. One opener of the gate
  (`write_target`, `open_stream`, `save_text`, `atomic_file`, `make_folder`, `run_folder`) is
  called on it. The oracle is the case's own recipe: refused exactly when a hostile entry lies
  on the way (or a FIFO where a file is written); a refusal is a one-line `UnsafeTargetError`;
  a link's target is byte-identical afterwards.
- ``checkpoints``: a real checkpoint (``plexus-train --epochs 1``) copied into such a path,
  ``load_checkpoint``: refused (one-line `CheckpointError`) exactly when hostile.
- ``ranks``: 2-4 ranks in threads prove their secret and options to rank 0 through an
  in-memory store (`plexus_partition.launch.peers.prove_peers`); secrets, options or a rank's
  answer (a co-user's junk) differ at random. Oracle: every rank passes exactly when all match,
  else every rank raises `PeerRefused` in one line, rank 0's naming the first bad rank and, for
  options, the first differing option.
- ``trusted``: a file read back as this user's own state (a shard store's manifest or rank
  file, a sweep's manifest, the cache's record of a graph, a JSON log a resumed run keeps)
  copied to the end of such a path, then made another uid's, others-writable, a co-user's
  link or a FIFO; its reader (`read_manifest`, `read_shard`, the sweep's `read_manifest`,
  `Cache.read_sizes`, `kept_json_records`): refused in one typed line exactly when hostile
  (a log that is no regular file is skipped, nothing kept).
- ``api``: `TrainConfig` with one field set to a hostile value, `plexus.launch` with a bad
  ``fn``, ``grid`` or ``timeout_s``, a `Layer` declaring hostile or repeated names,
  `load_dataset` and `Trainer` of non-values. Oracle: hand rules of the bounds table.
- ``widths``: a `Layer` made with a hostile in/out width, a `BatchNorm` with a hostile
  num_features (None, a bool, a float, text, 0, negative, past 2**24, numpy integers). Oracle:
  accepted exactly for a whole number (not a bool) in the table's [1, 2**24] (--hidden's).
  (Added after ``fuzz_gate.txt`` was taken: ``--kinds widths`` writes ``fuzz_gate_widths.txt``.)

Outcomes: ``ok`` (accepted, as the oracle says), ``error`` (refused in one typed line, as the
oracle says), ``wrong-ok`` (accepted where the oracle refuses), ``wrong-error`` (refused where
it accepts), ``traceback``, ``hang``; ``lost``: a file changed that the case had to keep.

    python benchmarks/fuzz_gate.py [--cases 500] [--seed 0] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import keyword
import math
import os
import random
import shutil
import signal
import stat
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parent.parent
NOBODY = 65534
CASE_LIMIT_S = 20
KINDS = ("links", "checkpoints", "ranks", "api", "trusted", "widths")
FOLDERS = ("mine", "mine", "open", "sticky", "theirs", "mylink", "theirlink", "stickylink")
HOSTILE = {"open", "theirs", "theirlink", "stickylink"}
LASTS = ("absent", "absent", "myfile", "theirfile", "fifo")
OPENERS = ("write_target", "open_stream", "save_text", "atomic_file", "make_folder",
           "run_folder")


class Hang(Exception):
    pass


def _alarm(*_: Any) -> None:
    raise Hang()


def _one_line(e: BaseException) -> bool:
    return "\n" not in str(e) and bool(str(e))


# ---- links and checkpoints ---------------------------------------------------------------------
def _build(root: Path, rng: random.Random) -> tuple[Path, bool, bool, str, Path]:
    """A path under ``root`` by a random recipe; whether a hostile folder or link lies on the
    way, whether its last entry is hostile, that entry's kind, and the file a planted link
    points to (the victim)."""
    victim_dir = root / "victim"
    victim_dir.mkdir(mode=0o700)
    victim = victim_dir / "thesis.tex"
    victim.write_text("two years\n")
    here, hostile, shared = root / "w", False, False
    here.mkdir(mode=0o755)
    for i in range(rng.randint(1, 4)):
        kind = rng.choice(FOLDERS)
        nxt = here / f"d{i}{kind}"
        if kind in ("mine", "open", "sticky", "theirs"):
            nxt.mkdir()
            nxt.chmod({"mine": 0o755, "open": 0o777, "sticky": 0o1777, "theirs": 0o755}[kind])
            if kind == "theirs":
                os.chown(nxt, NOBODY, NOBODY)
        else:
            real = root / f"real{i}"
            real.mkdir(mode=0o755)
            if kind == "stickylink":  # this user's link, but in a folder anyone may create in
                box = here / f"s{i}"
                box.mkdir()
                box.chmod(0o1777)
                nxt = box / "link"
            nxt.symlink_to(real)
            if kind == "theirlink":
                os.lchown(nxt, NOBODY, NOBODY)
            hostile |= shared  # any link in a folder others can write is never followed
        hostile |= kind in HOSTILE
        shared = kind in ("open", "sticky")
        here = nxt
    last = rng.choice(LASTS)
    target = here / "out.json"
    last_hostile = False
    if last in ("myfile", "theirfile"):
        target.write_text("{}")
    if last == "theirfile":
        os.chown(target, NOBODY, NOBODY)
        last_hostile = True
    elif last == "fifo":
        os.mkfifo(target)
    if rng.random() < 0.3 and last in ("absent", "myfile"):  # a co-user's link to the victim
        if target.exists():
            target.unlink()
        target.symlink_to(victim)
        os.lchown(target, NOBODY, NOBODY)
        last, last_hostile = "theirlink-to-victim", True
    return target, hostile, last_hostile, last, victim


def _link_case(root: Path, rng: random.Random) -> tuple[str, str]:
    from plexus_datasets.base import gate
    from plexus_datasets.base.atomic import atomic_file
    from plexus_datasets.base.gate import UnsafeTargetError

    target, on_way, last_hostile, last, victim = _build(root, rng)
    opener = rng.choice(OPENERS)
    folder = opener in ("make_folder", "run_folder")
    path = target.parent / "newdir" if folder else target
    refuse = on_way or (not folder and (last_hostile or last == "fifo" and opener in (
        "open_stream", "save_text", "atomic_file")))
    try:
        if opener == "write_target":
            gate.write_target(path)
        elif opener == "open_stream":
            with gate.open_stream(path, "w") as f:
                f.write("{}")
        elif opener == "save_text":
            gate.save_text(path, "{}")
        elif opener == "atomic_file":
            with atomic_file(path, "w") as f:
                f.write("{}")
        elif opener == "make_folder":
            gate.make_folder(path)
        else:
            gate.run_folder(path)
        got = "ok"
    except UnsafeTargetError as e:
        got = "error" if _one_line(e) else "traceback"
    if victim.read_text() != "two years\n":
        return "lost", f"{opener} {last}: the victim changed"
    return _verdict(got, refuse), f"{opener} on {last}, on the way hostile={on_way}"


def _verdict(got: str, refuse: bool) -> str:
    if got == "traceback":
        return got
    if got == "ok":
        return "wrong-ok" if refuse else "ok"
    return "error" if refuse else "wrong-error"


def _checkpoint_case(root: Path, rng: random.Random, source: Path) -> tuple[str, str]:
    from plexus.train import checkpoint as ckpt

    target, on_way, _, _, _ = _build(root, rng)
    folder = target.parent / "ck"
    folder.mkdir()
    whose = rng.choice(("mine", "mine", "theirs", "theirs-folder", "theirs-link"))
    file = folder / ckpt.CHECKPOINT_NAME
    if whose == "theirs-link":
        mine = root / "mine.pt"
        shutil.copyfile(source, mine)
        file.symlink_to(mine)
        os.lchown(file, NOBODY, NOBODY)
    else:
        shutil.copyfile(source, file)
    if whose == "theirs":
        os.chown(file, NOBODY, NOBODY)
    if whose == "theirs-folder":
        os.chown(folder, NOBODY, NOBODY)
    try:
        ckpt.load_checkpoint(folder)
        got = "ok"
    except ckpt.CheckpointError as e:
        got = "error" if _one_line(e) else "traceback"
    return _verdict(got, on_way or whose != "mine"), f"checkpoint {whose}, on the way {on_way}"


# ---- trusted reads: stores, a sweep's manifest, the cache's records, a resumed log -------------
READERS = ("manifest", "rankfile", "sweep", "cache", "log")
FILES = ("mine", "mine", "theirs", "writable", "theirlink", "fifo")


def _trusted_sources(work: Path) -> dict[str, Path]:
    """One real instance of each file a reader reads back: a 1x1x1 shard store, a sweep's
    results folder, a cache with its record of the graph, a JSON log of two epochs."""
    from plexus.studies.cli import sweep_main
    from plexus.train.cli import main as train_main
    from plexus_partition.cli import main as partition_main

    tiny = "rmat:scale=6,edge_factor=4,features=8,classes=3"
    run = ["--dataset", tiny, "--grid", "1x1x1", "--epochs", "2", "--quiet", "--eval-every", "0"]
    assert partition_main(["--dataset", tiny, "--grid", "1x1x1", "--out",
                           str(work / "store")]) == 0
    assert sweep_main(["--dataset", "cora", "--grids", "1x1x1", "--world-sizes", "1",
                       "--launcher", "slurm", "--no-calibrate", "--out",
                       str(work / "sweep")]) == 0
    assert train_main([*run, "--cache", str(work / "cache"), "--log-json",
                       str(work / "log.json")]) == 0
    return {"store": work / "store", "sweep": work / "sweep", "cache": work / "cache",
            "log": work / "log.json"}


def _trusted_case(root: Path, rng: random.Random, sources: dict[str, Path]) -> tuple[str, str]:
    """A reader's file copied to the end of a random path (`_build`'s folders), then made
    another uid's, others-writable (mode 666 or 646), a co-user's link to this user's copy, or
    a FIFO. Oracle: refused (one line, the reader's typed error) exactly when a hostile entry
    lies on the way or the file is not this user's own regular file; a log that is a FIFO or
    a link is skipped (no lines kept: a resumed run never reads through a link there)."""
    from plexus.studies.folder import FolderError, ResultsFolder
    from plexus.studies.sweep import read_manifest as sweep_manifest
    from plexus.train.cachedir import Cache
    from plexus.train.errors import CacheError
    from plexus.train.runlog import kept_json_records
    from plexus_datasets.base.gate import UnsafeTargetError
    from plexus_partition import ShardStoreError, read_manifest, read_shard

    target, on_way, _, _, _ = _build(root, rng)
    reader, how = rng.choice(READERS), rng.choice(FILES)
    folder = target.parent / "it"
    if reader in ("manifest", "rankfile"):
        shutil.copytree(sources["store"], folder)
        file = folder / ("manifest.json" if reader == "manifest" else next(
            p.name for p in folder.iterdir() if p.name.startswith("rank-")))
    elif reader == "sweep":
        shutil.copytree(sources["sweep"], folder)
        file = folder / "manifest.json"
    elif reader == "cache":
        shutil.copytree(sources["cache"], folder)
        file = next((folder / "sources").iterdir())
    else:
        folder.mkdir()
        file = folder / "log.json"
        shutil.copyfile(sources["log"], file)
    if how == "theirs":
        os.chown(file, NOBODY, NOBODY)
    elif how == "writable":
        file.chmod(rng.choice((0o666, 0o646, 0o602)))
    elif how == "theirlink":  # their link (made as root, then theirs) to this user's copy
        mine = root / f"mine-{file.name}"
        file.rename(mine)
        file.symlink_to(mine)
        os.lchown(file, NOBODY, NOBODY)
    elif how == "fifo":
        file.unlink()
        os.mkfifo(file)
    refuse = on_way or how != "mine"
    errors: tuple[type[BaseException], ...]
    try:
        if reader == "manifest":
            errors = (ShardStoreError,)
            read_manifest(folder)
        elif reader == "rankfile":
            errors = (ShardStoreError,)
            read_shard(folder, 0)
        elif reader == "sweep":
            errors = (FolderError,)
            sweep_manifest(ResultsFolder(folder, create=True))  # as plexus-sweep opens it
        elif reader == "cache":
            errors = (CacheError,)
            key = json.loads((sources["cache"] / "sources" / file.name).read_text())["source"]
            if Cache(folder).read_sizes(key) is None:
                raise AssertionError("this user's own record was not read")
        else:
            errors = (UnsafeTargetError,)
            skipped = how in ("fifo", "theirlink")  # no regular file there: nothing kept
            refuse = not skipped and (on_way or how != "mine")
            kept = kept_json_records([file], 2)
            if len(kept) != (0 if skipped else 2):
                raise AssertionError(f"kept {len(kept)} epoch lines of a {how} file")
        got = "ok"
    except Exception as e:  # noqa: BLE001 - the reader's typed error, else a traceback
        if not isinstance(e, errors):
            raise
        got = "error" if _one_line(e) else "traceback"
    return _verdict(got, refuse), f"{reader} {how}, on the way hostile={on_way}"


# ---- ranks -------------------------------------------------------------------------------------
class _Store:
    """An in-memory store: ``get`` waits for ``set``, as torch's TCPStore does."""

    def __init__(self, junk: dict[str, bytes]) -> None:
        self._d: dict[str, bytes] = {}
        self._junk = junk
        self._c = threading.Condition()

    def set(self, key: str, value: str | bytes) -> None:
        with self._c:
            self._d[key] = self._junk.get(key, value.encode() if isinstance(value, str)
                                          else value)
            self._c.notify_all()

    def get(self, key: str) -> bytes:
        with self._c:
            if not self._c.wait_for(lambda: key in self._d, timeout=10):
                raise TimeoutError(key)
            return self._d[key]


def _ranks_case(rng: random.Random) -> tuple[str, str]:
    from plexus_partition.launch.peers import PeerRefused, prove_peers

    world = rng.randint(2, 4)
    base = {"lr": "0.01", "seed": "0", "dataset": "cora", "grid": f"{world}x1x1",
            "version": "0.1.0"}
    secrets_ = [b"s" * 32] * world
    options = [dict(base) for _ in range(world)]
    bad, why = None, "none"
    how = rng.choice(("same", "secret", "option", "junk", "extra", "missing"))
    peer = rng.randrange(1, world)
    if how == "secret":
        secrets_[peer] = os.urandom(32)
        bad, why = peer, "does not hold this job's secret"
    elif how == "option":
        name = rng.choice(sorted(base))
        options[peer][name] = rng.choice(("0.5", "7", "", "x" * 50, "cora "))
        bad, why = peer, f"{name} "
    elif how == "extra":
        options[peer]["force"] = "True"
        bad, why = peer, "force (unset) at rank 0"
    elif how == "missing":
        del options[peer]["seed"]
        bad, why = peer, "seed 0 at rank 0, (unset)"
    junk = {}
    if how == "junk":
        junk[f"plexus/peers/hello/{peer}"] = rng.choice((b"", b"{", b"[]", b"\xff\xfe",
                                                         b'{"options": 5}', os.urandom(40)))
        bad, why = peer, "did not answer"
    store = _Store({k.replace("plexus/peers/", _prefix()): v for k, v in junk.items()})
    results: list[Any] = [None] * world

    def run(r: int) -> None:
        try:
            prove_peers(store, r, world, options[r], secrets_[r])
            results[r] = "ok"
        except PeerRefused as e:
            results[r] = e
        except BaseException as e:  # noqa: BLE001 - a traceback in the fuzz's terms
            results[r] = ("traceback", f"{type(e).__name__}: {e}")

    threads = [threading.Thread(target=run, args=(r,), daemon=True) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(15)
    if any(t.is_alive() for t in threads):
        return "hang", how
    if any(isinstance(x, tuple) for x in results):
        return "traceback", str(next(x for x in results if isinstance(x, tuple)))
    if bad is None:
        return ("ok" if all(x == "ok" for x in results) else "wrong-error"), how
    if any(x == "ok" for x in results):
        return "wrong-ok", f"{how}: a rank passed"
    first = str(results[0])
    if not all(_one_line(x) for x in results) or f"rank {bad}" not in first or why not in first:
        return "wrong-error", f"{how}: rank 0 said {first[:120]!r}"
    return "error", how


def _prefix() -> str:
    from plexus_partition.launch import peers

    return peers._PREFIX


# ---- the API -----------------------------------------------------------------------------------
ODD = (None, True, False, -1, 0, 1, 2.5, -0.0, 1e308, float("nan"), float("inf"), "0.1", "",
       [], {}, b"x", 10**9 + 1, 2**63, 5, 31536000, 31536000.5, 1e-3, "relu", object())
NAMES = ("w", "w2", "bias", "_x", "../x", "", "a b", "class", "None", "forward", "weight",
         "declared", 7, None, "x" * 200, "é", "w-1", "__init__")


def _train_config_ok(name: str, value: Any, default: Any) -> bool:
    """The bounds table's rule for one field (hand-written from plexus_partition.model.bounds)."""
    num = not isinstance(value, bool) and isinstance(value, (int, float))
    integer = num and (isinstance(value, int) or float(value).is_integer()) and math.isfinite(value)
    if name in ("optimizer", "lr_schedule", "weight_decay_scope"):
        return isinstance(value, str) and value in {
            "optimizer": ("adam", "adamw", "sgd"), "lr_schedule": ("none", "cosine", "step",
                                                                   "plateau"),
            "weight_decay_scope": ("all", "first")}[name]
    if value is None:
        return name in ("patience", "clip_grad_norm")
    if not num or not math.isfinite(value):
        return False
    rules = {"epochs": integer and 0 <= value <= 10**9, "lr": 0 < value <= 1e3 and value > 0.0,
             "weight_decay": 0 <= value <= 1e3, "seed": integer and 0 <= value <= 2**63 - 1,
             "eval_every": integer and 0 <= value <= 10**9, "momentum": 0 <= value < 1,
             "clip_grad_norm": 0 < value <= 1e30, "lr_step": integer and 1 <= value <= 10**9,
             "lr_gamma": 0 < value < 1, "lr_patience": integer and 0 <= value <= 10**9,
             "lr_min": 0 <= value < 0.01, "patience": integer and 1 <= value <= 10**9}
    return bool(rules[name])


def _api_case(rng: random.Random) -> tuple[str, str]:
    import dataclasses

    import plexus
    from plexus import nn
    from plexus.engine.arguments import ArgumentError
    from plexus.engine.config import TrainConfig, TrainConfigError
    from plexus_datasets import load_dataset
    from plexus_datasets.errors import DatasetError

    entry = rng.choice(("TrainConfig", "TrainConfig", "launch", "Layer", "load_dataset",
                        "Trainer"))
    value = rng.choice(ODD)
    if entry == "TrainConfig":
        field = rng.choice([f for f in dataclasses.fields(TrainConfig)])
        ok = _train_config_ok(field.name, value, field.default)
        try:
            TrainConfig(**{field.name: value})
            got = "ok"
        except TrainConfigError as e:
            got = "error" if _one_line(e) else "traceback"
        return _verdict(got, not ok), f"TrainConfig({field.name}={value!r:.30})"
    if entry == "launch":
        arg = rng.choice(("fn", "grid", "timeout_s"))
        kwargs: dict[str, Any] = {"timeout_s": 60.0, "grid": "1x1x1"}
        fn: Any = _never
        if arg == "fn":
            fn = rng.choice((None, 3, "main", [], b"f"))
        elif arg == "grid":
            kwargs["grid"] = rng.choice((7, None, (1, 1, 1), [1], 1.5, b"1x1x1", {}))
        else:
            kwargs["timeout_s"] = rng.choice((float("nan"), -1, 0, float("inf"), "5", True,
                                              31536000.5, None, [], -1e-9))
        try:
            plexus.launch(fn, **kwargs)
            got = "ok"
        except ArgumentError as e:
            got = "error" if _one_line(e) else "traceback"
        return _verdict(got, True), f"launch({arg}={kwargs.get(arg, fn)!r:.30})"
    if entry == "Layer":
        names = [rng.choice(NAMES) for _ in range(rng.randint(1, 3))]
        ok, seen = True, set()
        for n in names:
            good = isinstance(n, str) and n.isidentifier() and not keyword.iskeyword(n) \
                and n not in seen and n not in ("forward", "weight", "declared", "__init__")
            ok &= good
            if not good:
                break
            seen.add(n)
        try:
            _declaring(names)
            got = "ok"
        except ArgumentError as e:
            got = "error" if _one_line(e) else "traceback"
        return _verdict(got, not ok), f"Layer declaring {names!r:.60}"
    if entry == "load_dataset":
        value = rng.choice((None, 7, b"cora", ["cora"], {}, 2.5, object()))
        try:
            load_dataset(value)
            got = "ok"
        except DatasetError as e:
            got = "error" if _one_line(e) else "traceback"
        return _verdict(got, True), f"load_dataset({value!r:.30})"
    value = rng.choice((None, 7, "model", [], object(), {}))
    try:
        plexus.Trainer(value, TrainConfig())
        got = "ok"
    except ArgumentError as e:
        got = "error" if _one_line(e) else "traceback"
    return _verdict(got, True), f"Trainer({value!r:.30})"


WIDTHS = (*ODD, 3, 2**24, 2**24 + 1, 10**12, 7.0, -5)


def _width_ok(w: Any) -> bool:
    """--hidden's bound, written here by hand: a whole number, not a bool, in [1, 2**24]."""
    import numpy as np

    return not isinstance(w, (bool, np.bool_)) and isinstance(w, (int, np.integer)) \
        and 1 <= w <= 2**24


def _widths_case(rng: random.Random) -> tuple[str, str]:
    import numpy as np

    from plexus import nn
    from plexus.engine.arguments import ArgumentError

    norm = rng.random() < 0.3
    picks = [rng.choice((*WIDTHS, np.int64(rng.choice((0, 4, 2**24 + 1))), np.int32(2)))
             for _ in range(1 if norm else 2)]
    try:
        nn.BatchNorm(picks[0]) if norm else _declaring(["w"], *picks)
        got = "ok"
    except ArgumentError as e:
        got = "error" if _one_line(e) else "traceback"
    what = "BatchNorm" if norm else "Layer"
    return (_verdict(got, not all(_width_ok(w) for w in picks)),
            f"{what}({', '.join(f'{w!r:.20}' for w in picks)})")


def _never(grid: Any) -> None:
    raise AssertionError("a launch the fuzz refused started")


def _declaring(names: list, width_in: Any = 3, width_out: Any = 4) -> Any:
    from plexus import nn

    class Fuzzed(nn.Layer):
        def __init__(self) -> None:
            super().__init__(width_in, width_out)
            for n in names:
                self.weight(n)

    return Fuzzed()


# ---- the run -----------------------------------------------------------------------------------
def _checkpoint_source(work: Path) -> Path:
    from plexus.train.cli import main as train_main

    ck = work / "source-ck"
    code = train_main(["--dataset", "rmat:scale=6,edge_factor=4,features=8,classes=3", "--grid",
                       "1x1x1", "--epochs", "1", "--quiet", "--no-cache", "--checkpoint",
                       str(ck)])
    assert code == 0, code
    return ck / "checkpoint.pt"


def run_kind(kind: str, cases: int, seed: int, work: Path) -> list[tuple[str, str]]:
    rng = random.Random(f"{seed}-{kind}")
    source = _checkpoint_source(work) if kind == "checkpoints" else None
    sources = _trusted_sources(work) if kind == "trusted" else {}
    out = []
    signal.signal(signal.SIGALRM, _alarm)
    for i in range(cases):
        root = Path(tempfile.mkdtemp(prefix=f"{kind}{i}-", dir=work))
        root.chmod(0o700)
        signal.alarm(CASE_LIMIT_S)
        try:
            if kind == "links":
                out.append(_link_case(root, rng))
            elif kind == "checkpoints":
                out.append(_checkpoint_case(root, rng, source))
            elif kind == "ranks":
                out.append(_ranks_case(rng))
            elif kind == "trusted":
                out.append(_trusted_case(root, rng, sources))
            elif kind == "widths":
                out.append(_widths_case(rng))
            else:
                out.append(_api_case(rng))
        except Hang:
            out.append(("hang", f"case {i}"))
        except Exception as e:  # noqa: BLE001 - what a user would see as a traceback
            out.append(("traceback", f"case {i}: {type(e).__name__}: {str(e)[:160]}"))
        finally:
            signal.alarm(0)
            shutil.rmtree(root, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", type=int, default=500, help="cases per kind")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--kinds", default=",".join(KINDS))
    p.add_argument("--out", type=Path, default=Path("benchmarks/out"))
    args = p.parse_args(argv)
    if os.geteuid() != 0:
        p.error("needs root: the cases make files and links of uid 65534")
    kinds = [k for k in args.kinds.split(",") if k]
    from plexus.bench.output import write_text

    outcomes = ("ok", "error", "wrong-ok", "wrong-error", "traceback", "hang", "lost")
    import subprocess  # noqa: PLC0415

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, text=True,
                            capture_output=True).stdout.strip() or "unknown"
    argv_shown = " ".join(sys.argv[1:] if argv is None else argv)
    lines = [f"fuzz_gate: seed {args.seed}, {args.cases} cases per kind, as uid {os.geteuid()} "
             f"with a second uid {NOBODY}",
             f"command: python benchmarks/fuzz_gate.py {argv_shown}; commit {commit}; "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {os.cpu_count()} cpus, "
             f"load {' '.join(f'{x:.1f}' for x in os.getloadavg())}", "",
             f"{'kind':<12}" + "".join(f"{o:>12}" for o in outcomes) + f"{'total':>8}{'s':>8}"]
    bad = []
    with tempfile.TemporaryDirectory(prefix="plexus-fuzz-gate-") as tmp:
        for kind in kinds:
            start = time.perf_counter()
            results = run_kind(kind, args.cases, args.seed, Path(tmp))
            took = time.perf_counter() - start
            c = Counter(o for o, _ in results)
            lines.append(f"{kind:<12}" + "".join(f"{c.get(o, 0):>12}" for o in outcomes)
                         + f"{len(results):>8}{took:>8.1f}")
            bad += [(kind, o, d) for o, d in results if o not in ("ok", "error")]
    lines += ["", f"broken cases: {len(bad)} (0 signals: this process ran every case)"]
    lines += [f"  {k}: {o}: {d}" for k, o, d in bad[:200]]
    text = "\n".join(lines)
    print(text)
    # a run of other kinds than all (``--kinds widths``) never replaces the full run's file
    name = "fuzz_gate" if kinds == list(KINDS) else "fuzz_gate_" + "_".join(kinds)
    write_text(args.out / f"{name}.txt", text + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
