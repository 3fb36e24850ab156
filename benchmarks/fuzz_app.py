"""Fuzz plexus-train's own inputs and outputs: the checkpoint it resumes from, the paths it
writes (``--log-json``, ``--checkpoint``), and pairs of outputs that may name one file.

Each case damages a real checkpoint (random bit flips, a truncation, a field replaced by a value
of another type or size, a field removed) or points an output option at a hostile target (a
FIFO, a symlink to a device, a directory, a dangling link, a path under a file, ...), runs
``plexus-train --grid 1x1x1`` in this process and checks the promise: exit status 0, or exactly
one ``plexus-train: error:`` line and status 2; never a traceback, never a hang, never a signal
(a signal kills this script: its exit status says so), and no FIFO or device changed. Seeded:
the same ``--seed`` runs the same cases.

The ``outputs`` family (``--outputs N`` cases) gives two or three output options paths that may
be one file: the same name, a symlink or a hard link to another's file, a file inside another's
directory or under another's file, the JSON log's ``.tmp``, the files ``--checkpoint`` keeps,
the dataset's own file. A run that collides must end in one line before writing anything; a run
that does not must leave every output whole (each file read back as what it should be), or it
lost data.

    python benchmarks/fuzz_app.py [--cases 300] [--outputs 0] [--seed 0] [--out DIR] [--smoke]

Prints a line per failing case and a summary (cases per kind and outcome); writes
``fuzz_app.txt`` (the table) and ``fuzz_app.json`` (every case) to ``--out`` and exits with
status 1 if any case broke the promise.
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


# ---- output-path pairs ------------------------------------------------------------------------
OUTPUT_FLAGS = ("--log-json", "--log-csv", "--save-predictions", "--export", "--checkpoint",
                "--tensorboard")
_DIRS = ("--checkpoint", "--tensorboard")


def _output_paths(d: Path, rng: random.Random, flags: list[str], data: Path) -> list[str]:
    """A path per flag, drawn so that they often name one file (directly or not)."""
    paths: list[str] = []
    for flag in flags:
        earlier = paths[rng.randrange(len(paths))] if paths else None
        how = rng.choice(("own", "own", "same", "link", "hard link", "tmp", "inside", "under",
                          "checkpoint file", "dataset", "tensorboard file"))
        own = str(d / f"{flag.strip('-')}-{rng.randrange(1000)}")
        if how == "own" or earlier is None:
            path = own
        elif how == "same":
            path = earlier
        elif how == "link":
            link = d / f"link-{rng.randrange(10**6)}"
            link.symlink_to(earlier)
            path = str(link)
        elif how == "hard link":
            Path(earlier).parent.mkdir(parents=True, exist_ok=True)
            if not Path(earlier).exists():
                Path(earlier).write_text("")
            path = str(d / f"hard-{rng.randrange(10**6)}")
            if Path(earlier).is_file():
                os.link(earlier, path)
        elif how == "tmp":
            path = earlier + ".tmp"
        elif how == "inside":
            path = str(Path(earlier) / rng.choice(("x", ckpt.CHECKPOINT_NAME, ckpt.LOCK_NAME)))
        elif how == "under":
            path = str(Path(earlier).parent)
        elif how == "checkpoint file":
            path = str(Path(earlier) / rng.choice((ckpt.CHECKPOINT_NAME, ckpt.LOCK_NAME,
                                                   f".{ckpt.CHECKPOINT_NAME}.ab12.tmp")))
        elif how == "dataset":
            path = str(data)
        else:
            path = str(Path(earlier) / "events.out.tfevents.1.host.1.0")
        paths.append(path)
    return paths


def _whole(flag: str, path: Path) -> str | None:
    """Why the output of ``flag`` at ``path`` is not what a finished run writes (None: it is)."""
    import numpy as np  # noqa: PLC0415

    try:
        if flag == "--log-json":
            lines = path.read_text().splitlines()
            return None if json.loads(lines[-1]).get("summary") is True else "no summary"
        if flag == "--log-csv":
            return None if path.read_text().startswith("epoch,loss") else "no CSV header"
        if flag == "--save-predictions":
            with np.load(path) as z:
                return None if "pred" in z else "no predictions"
        if flag == "--export":
            return None if "state_dict" in torch.load(path, weights_only=True) else "no weights"
        if flag == "--checkpoint":
            ckpt.load_checkpoint(path)
            return None
        return None if any(path.glob("events.out.tfevents.*")) else "no TensorBoard events"
    except Exception as e:  # noqa: BLE001 - unreadable: lost
        return f"{type(e).__name__}: {e}"[:200]


def fuzz_outputs(cases: int, seed: int, work: Path) -> list[dict]:
    """``cases`` runs whose output options may collide (see the module docstring)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # tests/fuzzing
    from fuzzing.samples import write_npz  # noqa: PLC0415

    rng = random.Random(seed + 1)
    results = []
    for i in range(cases):
        d = work / f"outputs{i}"
        d.mkdir()
        data = d / "g.npz"
        write_npz(data)
        flags = rng.sample(OUTPUT_FLAGS, rng.choice((2, 2, 3)))
        paths = _output_paths(d, rng, flags, data)
        args = ["--grid", "1x1x1", "--epochs", "1", "--quiet", "--eval-every", "0",
                "--dataset", f"npz:{data}", "--layers", "2"]
        for flag, path in zip(flags, paths):
            args += [flag, path]
        kind = " ".join(f"{f} {Path(p).relative_to(work) if p.startswith(str(work)) else p}"
                        for f, p in zip(flags, paths))
        before = data.read_bytes()
        start = time.perf_counter()
        code, err = run_train(args)
        problem = verdict(code, err)
        if data.read_bytes() != before:
            problem = (problem + "; " if problem else "") + "the dataset file was written"
        if code == 0:
            lost = [f"{f}: {why}" for f, p in zip(flags, paths)
                    if (why := _whole(f, Path(p))) is not None
                    and not (f == "--tensorboard" and not tensorboard_installed())]
            if lost:
                problem = (problem + "; " if problem else "") + "lost " + ", ".join(lost)
        results.append({"case": i, "family": "outputs", "kind": kind, "status": code,
                        "error": err.strip().splitlines()[0] if err.strip() else "",
                        "problem": problem, "seconds": round(time.perf_counter() - start, 3)})
    return results


def tensorboard_installed() -> bool:
    from plexus.train.epochlogs import tensorboard_available  # noqa: PLC0415

    return tensorboard_available()


def outcome(r: dict) -> str:
    """ok (status 0), error (one line, status 2), traceback, hang, lost (data lost or a node
    changed), other (another status)."""
    problem = r["problem"] or ""
    if "HANG" in problem:
        return "hang"
    if "traceback" in problem or "ESCAPED" in problem:
        return "traceback"
    if "lost" in problem or "changed" in problem or "was written" in problem:
        return "lost"
    if problem:
        return "other"
    return "ok" if r["status"] == 0 else "error"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=300,
                        help="checkpoint and output-target cases")
    parser.add_argument("--outputs", type=int, default=0,
                        help="cases of the outputs family (output options that may collide)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="folder for fuzz_app.json")
    parser.add_argument("--smoke", action="store_true", help="a few cases (the test suite's)")
    args = parser.parse_args()
    cases = 2 * len(TARGETS) if args.smoke else args.cases
    outputs = 12 if args.smoke else args.outputs
    torch.set_num_threads(1)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="plexus-fuzz-app-") as work:
        results = fuzz(cases, args.seed, Path(work)) if cases else []
        if outputs:
            results += fuzz_outputs(outputs, args.seed, Path(work))
    bad = [r for r in results if r["problem"]]
    lines = [f"case {r['case']} ({r['family']}, {r['kind']}): {r['problem']}" for r in bad]
    kinds = ("ok", "error", "traceback", "hang", "lost", "other")
    table = Counter((r["family"], outcome(r)) for r in results)
    families = sorted({r["family"] for r in results})
    lines.append(f"fuzz_app: seed {args.seed}, {len(results)} cases in "
                 f"{time.perf_counter() - started:.0f} s; no signal (the script ran to its end)")
    lines.append(f"{'family':<12}" + "".join(f"{k:>11}" for k in kinds) + f"{'total':>8}")
    for fam in families:
        lines.append(f"{fam:<12}" + "".join(f"{table[(fam, k)]:>11}" for k in kinds)
                     + f"{sum(table[(fam, k)] for k in kinds):>8}")
    lines.append(f"{len(bad)} broke the promise (ok: status 0 with every output whole; error: "
                 "one line, status 2; lost: an output missing or damaged, a FIFO or device "
                 "changed)")
    print("\n".join(lines))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "fuzz_app.txt").write_text("\n".join(lines) + "\n")
        (args.out / "fuzz_app.json").write_text(json.dumps(
            {"seed": args.seed, "cases": len(results), "failures": bad, "results": results},
            indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
