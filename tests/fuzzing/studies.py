"""Fuzz cases for study folders: what ``plexus-sweep`` and ``plexus-report`` find in ``--out``.

Kinds ``sweep`` and ``report``: a valid results folder (a planned sweep; for the report, with a
complete plexus-train log per run) is copied per case and damaged the way a shared, copied or
hand-edited folder can be: JSON edited field by field, lines cut or replaced (``Infinity``,
``[1, 2]``, bit flips), a FIFO, a directory or a symlink (out of the folder, to a FIFO, to
nothing, to /dev/null) where a file belongs, the lock file hard-linked to a file outside.
Each case runs the tool in-process (``plexus-sweep`` with the SLURM launcher: it plans, reads
and writes everything but starts no training) through the harness of `fuzzing.harness`
(a child process per batch, an alarm per case). Acceptable outcomes: status 0, or status 2
with exactly one ``PROG: error:`` line; a write outside the folder (or to /dev/null) is
reported as ``payload``.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import random
import shutil
import stat
from pathlib import Path
from typing import Any

from plexus_datasets.base import owned
from plexus.studies.cli import report_main, sweep_main
from plexus.studies.folder import LOCK_NAME

from .harness import Case, main
from .mutate import json_edit, mutate_bytes

KINDS = ("sweep", "report")
SPEC = "rmat:scale=6,edge_factor=4,features=8,classes=3"
SWEEP_ARGS = ["--dataset", SPEC, "--world-sizes", "1,2", "--grids", "1x1x1,1x2x1",
              "--epochs", "2", "--launcher", "slurm"]
VICTIM_TEXT = "outside the results folder\n"


def _log_lines(grid: str, world: int) -> list[dict[str, Any]]:
    """A complete plexus-train JSON log of a 2-epoch run (the fields plexus-report reads)."""
    epochs = [{"epoch": e, "loss": 1.1 - 0.1 * e, "train_acc": None, "val_acc": None,
               "test_acc": None, "epoch_time_s": 0.01 * e, "eval_time_s": 0.0} for e in (1, 2)]
    summary = {"summary": True, "dataset": "rmat-s6-e4", "grid": grid, "world_size": world,
               "epochs": 2, "epochs_run": 2, "final": {"epoch": 2, "loss": 0.9},
               "graph": {"nodes": 64, "nnz": 500, "features": 8, "classes": 3},
               "model": {"kind": "gcn", "layers": 2, "hidden": 16, "orders": ["agg", "agg"],
                         "perm": "double", "bias": True, "learnable_features": False},
               "timers": {"spmm": {"max": 0.01, "mean": 0.008},
                          "gemm": {"max": 0.02, "mean": 0.015},
                          "y:all_reduce": {"max": 0.003, "mean": 0.002}},
               "comm_bytes": {"x": 0.0, "y": 1024.0, "z": 0.0},
               "comm_bytes_max_rank": {"x": 0.0, "y": 512.0, "z": 0.0},
               "memory": {"peak_rss_bytes": [3e8] * world, "tracked_peak_bytes": [1e6] * world,
                          "cuda_peak_bytes": None, "predicted_bytes": 2e8},
               "environment": {"host": "fuzz", "hosts": 1, "device": "cpu", "gpu": None,
                               "torch": "2", "threads_per_rank": 1}}
    return [*epochs, summary]


def make_base(work: Path) -> Path:
    """A planned sweep folder (SLURM scripts written) whose runs all have complete logs."""
    base = work / "base-study"
    with contextlib.redirect_stdout(io.StringIO()):
        code = sweep_main([*SWEEP_ARGS, "--out", str(base)])
    if code != 0:
        raise RuntimeError("the base sweep of the study fuzz failed")
    manifest = json.loads((base / "manifest.json").read_text())
    for rid, rec in manifest["runs"].items():
        lines = _log_lines(rec["grid"], rec["world_size"])
        (base / rec["log"]).write_text("".join(json.dumps(obj) + "\n" for obj in lines))
    return base


# ---- damage ---------------------------------------------------------------------------------
def _node(rng: random.Random, path: Path, d: Path, out: Path) -> str:
    """Put something that is not a regular file of the folder at ``path``."""
    parent = Path(os.path.realpath(path.parent))
    if not parent.is_dir() or (parent != out.resolve() and out.resolve() not in parent.parents):
        return "nothing (its folder was replaced)"  # an earlier damage took the folder away
    if path.is_dir() and not path.is_symlink():
        owned.remove_tree(path)
    else:
        owned.remove_file(path)
    what = rng.choice(("fifo", "link out", "link out", "link to a fifo", "dangling link",
                       "directory", "link to /dev/null", "link to an outside directory"))
    if what == "fifo":
        os.mkfifo(path)
    elif what == "link out":
        path.symlink_to(d / "victim.txt")
    elif what == "link to a fifo":
        fifo = out / f"fifo-{rng.randrange(10**6)}"
        os.mkfifo(fifo)
        path.symlink_to(fifo)
    elif what == "dangling link":
        path.symlink_to(d / "nothing")
    elif what == "directory":
        path.mkdir()
    elif what == "link to /dev/null":
        path.symlink_to(os.devnull)
    else:
        path.symlink_to(d / "outside")
    return what


def _damage_text(text: str, rng: random.Random) -> str:
    lines = text.splitlines()
    how = rng.choice(("edit", "edit", "edit", "line", "bytes", "truncate", "top"))
    if how == "edit" and lines:
        i = rng.randrange(len(lines))
        try:
            obj = json.loads(lines[i])
        except ValueError:
            return text
        lines[i] = json.dumps(json_edit(copy.deepcopy(obj), rng))
        return "\n".join(lines) + "\n"
    if how == "line":
        junk = rng.choice(('[1, 2]', '"x"', '{"loss": Infinity}', '{"epoch": NaN}', "nul\x00l",
                           '{"summary": true, "grid": "2x2", "epochs": 2}', "{", "",
                           '{"epoch": ' + "1" * 400 + "}", "[" * 5000 + "]" * 5000,
                           '{"summary": "yes", "grid": "1x1x1", "epochs": 2}',
                           '{"summary": true, "grid": "1x1x1", "epochs": 2, "graph": "str"}',
                           '{"summary": true, "grid": "1x1x1", "epochs": 2, "graph": '
                           '{"nodes": -5, "nnz": 0, "features": 0, "classes": 0}, "model": '
                           '{"layers": 0, "hidden": -1, "orders": ["x"]}}'))
        lines.insert(rng.randrange(len(lines) + 1), junk)
        return "\n".join(lines) + "\n"
    if how == "bytes":
        return mutate_bytes(text.encode(), rng).decode("utf-8", errors="replace")
    if how == "truncate":
        return text[:rng.randrange(max(1, len(text)))]
    return json.dumps(rng.choice(([1, 2], "x", None, 3, {}, {"format": 1})))


def _damage(out: Path, d: Path, rng: random.Random, kind: str) -> str:
    """Damage the folder ``out`` once (or twice); return what was done."""
    manifest = json.loads((out / "manifest.json").read_text())
    rids = sorted(manifest["runs"])
    rid = rng.choice(rids)
    files = {"manifest": out / "manifest.json", "log": out / "runs" / f"{rid}.json",
             "log tmp": out / "runs" / f"{rid}.json.tmp", "out": out / "runs" / f"{rid}.out",
             "runs": out / "runs", "lock": out / LOCK_NAME}
    if kind == "sweep":
        files.update({"slurm": out / "slurm", "script": out / "slurm" / f"{rid}.sbatch",
                      "submit": out / "slurm" / "submit.sh"})
    else:
        (out / "report").mkdir(exist_ok=True)
        files.update({"report": out / "report", "csv": out / "report" / "runs.csv",
                      "figure": out / "report" / "strong_scaling.png"})
    done = []
    for _ in range(rng.choice((1, 1, 1, 2))):
        target = rng.choice(sorted(files))
        path = files[target]
        how = rng.random()
        if target in ("manifest", "log") and how < 0.6 and path.is_file():
            path.write_text(_damage_text(path.read_text(), rng))
            done.append(f"{target} text")
        elif target == "lock" and how < 0.3:
            if path.is_dir() and not path.is_symlink():
                owned.remove_tree(path)
            else:
                owned.remove_file(path)
            os.link(d / "victim.txt", path)
            done.append("lock hard-linked outside")
        else:
            done.append(f"{target}: {_node(rng, path, d, out)}")
    return "; ".join(done)


def make_cases(work: Path, seed: int, per_kind: int, kinds=KINDS) -> list[Case]:
    """``per_kind`` damaged copies of a study folder per kind, seeded."""
    rng = random.Random(seed)
    base = make_base(work)
    cases = []
    for kind in kinds:
        for i in range(per_kind):
            d = work / f"{kind}-{i:04d}"
            d.mkdir()
            (d / "victim.txt").write_text(VICTIM_TEXT)
            (d / "outside").mkdir()
            out = d / "out"
            shutil.copytree(base, out, symlinks=True)
            if kind == "sweep":
                owned.remove_tree(out / "runs")  # the runs are still to do: their logs are read
                (out / "runs").mkdir()
                for rid in sorted(json.loads((base / "manifest.json").read_text())["runs"])[:1]:
                    shutil.copy(base / "runs" / f"{rid}.json", out / "runs")
            what = _damage(out, d, random.Random(rng.getrandbits(64)), kind)
            cases.append(Case(kind, f"{kind}-{i:04d}", spec=what, root=str(d)))
    return cases


# ---- running them -----------------------------------------------------------------------------
def _outside_intact(d: Path) -> str | None:
    """What changed outside the folder (None: nothing)."""
    if (d / "victim.txt").read_text() != VICTIM_TEXT:
        return "a file outside the results folder was written"
    if any((d / "outside").iterdir()):
        return "a directory outside the results folder was written"
    if not stat.S_ISCHR(os.stat(os.devnull).st_mode):
        return "/dev/null was replaced"
    return None


def run_one(case: Case) -> tuple[str, str]:
    """Run the tool on the case's folder; (outcome, detail)."""
    d = Path(case.root)  # type: ignore[arg-type]
    out = d / "out"
    prog = f"plexus-{case.kind}"
    argv = [*SWEEP_ARGS, "--out", str(out)] if case.kind == "sweep" else [str(out)]
    err = io.StringIO()
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            code = (sweep_main if case.kind == "sweep" else report_main)(argv)
    except Exception as e:  # noqa: BLE001 - an escaped exception is a traceback in the tool
        return "traceback", f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
    broken = _outside_intact(d)
    if broken:
        return "payload", broken
    text = err.getvalue()
    if code == 0:
        return "ok", ""
    if code == 2 and text.count("\n") == 1 and text.startswith(f"{prog}: error: "):
        return "error", text.strip()[:300]
    return "traceback", f"status {code}: {text[-300:]!r}"


if __name__ == "__main__":
    main(run_one)
