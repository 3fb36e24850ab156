"""Fuzz plexus-train's own inputs and outputs: the checkpoint it resumes from, and the paths
it writes (``--log-json``, ``--checkpoint``).

Each case damages a real checkpoint (random bit flips, a truncation, a field replaced by a value
of another type or size, a field removed) or points an output option at a hostile target (a
FIFO, a symlink to a device, a directory, a dangling link, a path under a file, ...), runs
``plexus-train --grid 1x1x1`` in this process and checks the promise: exit status 0, or exactly
one ``plexus-train: error:`` line and status 2; never a traceback, never a hang, never a signal
(a signal kills this script: its exit status says so), and no FIFO or device changed. Seeded:
the same ``--seed`` runs the same cases.

    python benchmarks/fuzz_app.py [--cases 300] [--seed 0] [--out DIR] [--smoke]

Prints a line per failing case and a summary (cases per kind and outcome); writes
``fuzz_app.json`` to ``--out`` and exits with status 1 if any case broke the promise.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import math
import os
import random
import signal
import stat
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import torch

from plexus.train import checkpoint as ckpt
from plexus.train import main as train_main

CASE_LIMIT_S = 120  # a case that runs longer hangs


class _Hang(Exception):
    pass


def _on_alarm(signum, frame):  # noqa: ARG001
    raise _Hang()


def run_train(args: list[str]) -> tuple[int | None, str]:
    """(exit status or None on a hang or an escaped exception, stderr) of plexus-train."""
    err = io.StringIO()
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.alarm(CASE_LIMIT_S)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = train_main(args)
    except _Hang:
        return None, err.getvalue() + f"\nHANG: still running after {CASE_LIMIT_S} s"
    except BaseException as e:  # noqa: BLE001 — escaped exception: a broken promise
        return None, err.getvalue() + f"\nESCAPED: {type(e).__name__}: {e}"
    finally:
        signal.alarm(0)
    return code, err.getvalue()


def verdict(code: int | None, err: str) -> str | None:
    """What broke the promise (None: nothing)."""
    if code is None:
        return err.strip().splitlines()[-1] if err.strip() else "no exit status"
    if "Traceback" in err:
        return "a traceback"
    if code == 0:
        return None if err == "" else f"status 0 with stderr {err[:200]!r}"
    if code == 2:
        if err.count("\n") == 1 and err.startswith("plexus-train: error: "):
            return None
        return f"status 2 with stderr {err[:300]!r}"
    return f"status {code}: {err[:300]!r}"


# ---- checkpoints ------------------------------------------------------------------------------
def _paths(obj: Any, prefix: tuple = ()) -> list[tuple]:
    """Every key path of a nested dict."""
    out = []
    if isinstance(obj, dict):
        for key, value in obj.items():
            out.append(prefix + (key,))
            out += _paths(value, prefix + (key,))
    return out


def _random_value(rng: random.Random) -> Any:
    return rng.choice([
        None, -5, 0, 2**70, -(2**63), "x", "", 1.5, math.nan, math.inf, True, [], {}, [1, 2],
        {"a": 1}, torch.zeros(()), torch.ones(3), torch.ones(2, 2, dtype=torch.int64),
        torch.full((4, 16), math.nan), torch.ones(10**5), torch.ones(0, 7),
    ])


def mutate_checkpoint(good: bytes, payload: dict, rng: random.Random, path: Path) -> str:
    """Write a damaged checkpoint to ``path``; return the kind of damage."""
    kind = rng.choice(["bitflip", "truncate", "field", "field", "drop"])
    if kind == "bitflip":
        data = bytearray(good)
        for _ in range(rng.randint(1, 8)):
            i = rng.randrange(len(data))
            data[i] ^= 1 << rng.randrange(8)
        path.write_bytes(bytes(data))
    elif kind == "truncate":
        path.write_bytes(good[:rng.randrange(len(good))])
    else:
        edited = copy.deepcopy(payload)
        where = rng.choice(_paths(edited))
        holder = edited
        for key in where[:-1]:
            holder = holder[key]
        if kind == "drop":
            del holder[where[-1]]
        else:
            holder[where[-1]] = _random_value(rng)
        torch.save(edited, path)
        kind = f"{kind}:{'/'.join(map(str, where))}"
    return kind


# ---- output targets ---------------------------------------------------------------------------
def _fifo(d: Path) -> Path:
    os.mkfifo(d / "fifo")
    return d / "fifo"


def _link(d: Path, to: Path | str, name: str = "link") -> Path:
    (d / name).symlink_to(to)
    return d / name


TARGETS: dict[str, Callable[[Path], list[str]]] = {
    "log at a fifo": lambda d: ["--log-json", str(_fifo(d))],
    "log at a link to a fifo": lambda d: ["--log-json", str(_link(d, _fifo(d)))],
    "log at a link to /dev/null": lambda d: ["--log-json", str(_link(d, os.devnull))],
    "log at a directory": lambda d: ["--log-json", str(d)],
    "log at a link to a directory": lambda d: ["--log-json", str(_link(d, d.parent))],
    "log at a dangling link": lambda d: ["--log-json", str(_link(d, d / "nothing"))],
    "log under a file": lambda d: ["--log-json", str(_file(d) / "log.json")],
    "log whose .tmp is a fifo": lambda d: (os.mkfifo(d / "log.json.tmp"),
                                           ["--log-json", str(d / "log.json")])[1],
    "log whose .tmp is a link": lambda d: (_link(d, os.devnull, "log.json.tmp"),
                                           ["--log-json", str(d / "log.json")])[1],
    "log at a regular file": lambda d: ["--log-json", str(_file(d))],
    "log at a link to a file": lambda d: ["--log-json", str(_link(d, _file(d)))],
    "checkpoint dir a fifo": lambda d: ["--checkpoint", str(_fifo(d))],
    "checkpoint dir a file": lambda d: ["--checkpoint", str(_file(d))],
    "checkpoint file a fifo": lambda d: (os.mkfifo(d / ckpt.CHECKPOINT_NAME),
                                         ["--checkpoint", str(d)])[1],
    "checkpoint file a directory": lambda d: ((d / ckpt.CHECKPOINT_NAME).mkdir(),
                                              ["--checkpoint", str(d)])[1],
    "checkpoint file a link to /dev/null": lambda d: (
        _link(d, os.devnull, ckpt.CHECKPOINT_NAME), ["--checkpoint", str(d)])[1],
    "checkpoint lock a fifo": lambda d: (os.mkfifo(d / ckpt.LOCK_NAME),
                                         ["--checkpoint", str(d)])[1],
    "checkpoint lock a directory": lambda d: ((d / ckpt.LOCK_NAME).mkdir(),
                                              ["--checkpoint", str(d)])[1],
    "checkpoint lock a link": lambda d: (_link(d, os.devnull, ckpt.LOCK_NAME),
                                         ["--checkpoint", str(d)])[1],
    "checkpoint dir new": lambda d: ["--checkpoint", str(d / "new" / "ck")],
}


def _file(d: Path) -> Path:
    (d / "file").write_text("keep me\n")
    return d / "file"


def _special_nodes(d: Path) -> dict[str, tuple]:
    """Every FIFO, device and symlink under ``d`` with what identifies its state."""
    out = {}
    for p in d.rglob("*"):
        st = os.lstat(p)
        if not stat.S_ISREG(st.st_mode) and not stat.S_ISDIR(st.st_mode):
            out[str(p)] = (st.st_mode, st.st_ino, st.st_size, st.st_mtime_ns)
    return out


# ---- driver -----------------------------------------------------------------------------------
def fuzz(cases: int, seed: int, work: Path) -> list[dict]:
    """Run ``cases`` seeded cases: checkpoints and output targets alternate until every kind of
    target ran once, then about 2/3 checkpoints."""
    rng = random.Random(seed)
    base = work / "base"
    code, err = run_train(["--grid", "1x1x1", "--epochs", "2", "--quiet", "--checkpoint",
                           str(base)])
    if code != 0:
        raise SystemExit(f"the base run failed: {err}")
    good = (base / ckpt.CHECKPOINT_NAME).read_bytes()
    payload = ckpt.load_checkpoint(base)
    null_before = os.stat(os.devnull)
    results = []
    targets = sorted(TARGETS)
    rng.shuffle(targets)
    for i in range(cases):
        d = work / f"case{i}"
        d.mkdir()
        if i % 2 == 0 or i // 2 >= len(targets) and rng.random() < 2 / 3:
            kind = mutate_checkpoint(good, payload, rng, d / ckpt.CHECKPOINT_NAME)
            # --epochs 2, where the checkpoint is: a good one resumes and trains no epoch
            args = ["--grid", "1x1x1", "--epochs", "2", "--quiet", "--eval-every", "0",
                    "--checkpoint", str(d), "--resume"]
            family = "checkpoint"
        else:  # every kind of target once, then at random
            kind = targets[i // 2] if i // 2 < len(targets) else rng.choice(targets)
            args = ["--grid", "1x1x1", "--epochs", "1", "--quiet", "--eval-every", "0",
                    *TARGETS[kind](d)]
            family = "target"
        nodes = _special_nodes(d)
        start = time.perf_counter()
        code, err = run_train(args)
        problem = verdict(code, err)
        if nodes != _special_nodes(d):
            problem = (problem + "; " if problem else "") + "a FIFO, device or link changed"
        results.append({"case": i, "family": family, "kind": kind, "status": code,
                        "error": err.strip().splitlines()[0] if err.strip() else "",
                        "problem": problem, "seconds": round(time.perf_counter() - start, 3)})
    st = os.stat(os.devnull)
    if (st.st_mode, st.st_rdev) != (null_before.st_mode, null_before.st_rdev):
        results.append({"case": -1, "family": "target", "kind": "/dev/null", "status": None,
                        "error": "", "problem": "/dev/null changed", "seconds": 0.0})
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="folder for fuzz_app.json")
    parser.add_argument("--smoke", action="store_true", help="a few cases (the test suite's)")
    args = parser.parse_args()
    cases = 2 * len(TARGETS) if args.smoke else args.cases
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="plexus-fuzz-app-") as work:
        results = fuzz(cases, args.seed, Path(work))
    bad = [r for r in results if r["problem"]]
    for r in bad:
        print(f"case {r['case']} ({r['family']}, {r['kind']}): {r['problem']}")
    outcomes = Counter((r["family"], "ok" if r["status"] == 0 else f"status {r['status']}")
                       for r in results)
    print(f"{len(results)} cases, seed {args.seed}: "
          + ", ".join(f"{fam} {what}: {n}" for (fam, what), n in sorted(outcomes.items()))
          + f"; {len(bad)} broke the promise")
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "fuzz_app.json").write_text(json.dumps(
            {"seed": args.seed, "cases": len(results), "failures": bad, "results": results},
            indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
