"""Running a sweep, or writing its batch scripts, into one results folder:

    RESULTS/manifest.json        what was asked (every invocation) and every run's command and state
    RESULTS/runs/<id>.json       each run's plexus-train JSON log (complete logs only)
    RESULTS/runs/<id>.out        each local run's console output
    RESULTS/slurm/*.sbatch       batch scripts (--launcher slurm), and submit.sh

A run whose log is complete (its summary record for the requested epochs) is skipped, so the
same command resumes a sweep after a failure or a requeued job. Runs of one folder must share
the model options and epochs (they are compared); more world sizes, grids, repeats or a weak
series may be added to it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from plexus.core.atomic import atomic_file

from .launchers import (SlurmOptions, local_command, slurm_array_script, slurm_script,
                        submit_script, torchrun_command)
from .plan import PlannedRun, SweepRequest

MANIFEST = "manifest.json"
FORMAT = 1


class SweepError(ValueError):
    """A results folder that cannot take this sweep (a one-line message)."""


@dataclass
class SweepResult:
    """What one invocation did."""

    ran: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    scripts: list[Path] = field(default_factory=list)


def log_path(out: Path, rid: str) -> Path:
    return out / "runs" / f"{rid}.json"


def log_complete(path: Path, epochs: int) -> bool:
    """The JSON log at ``path`` ends with a summary of a run of ``epochs`` epochs."""
    try:
        lines = path.read_text(encoding="utf-8").strip().splitlines()
        last = json.loads(lines[-1]) if lines else {}
    except (OSError, ValueError):
        return False
    return bool(last.get("summary")) and last.get("epochs") == epochs


def read_manifest(out: Path) -> dict[str, Any] | None:
    """The folder's manifest, None if there is none; raises SweepError if it is unreadable."""
    path = out / MANIFEST
    if not path.exists():
        return None
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise SweepError(f"{path} is not a readable manifest ({e}); move it away") from None
    if doc.get("format") != FORMAT or not isinstance(doc.get("runs"), dict):
        raise SweepError(f"{path} is not a plexus-sweep manifest; use another results folder")
    return doc


def write_manifest(out: Path, doc: dict[str, Any]) -> None:
    with atomic_file(out / MANIFEST, "w") as f:
        f.write(json.dumps(doc, indent=1) + "\n")


def merge(old: dict[str, Any] | None, request: SweepRequest, plans: Sequence[PlannedRun],
          launcher: str, argv: Sequence[str]) -> dict[str, Any]:
    """The manifest with this invocation added; raises SweepError if the folder holds runs of
    other model options or epochs."""
    common = json.loads(json.dumps(request.common()))
    if old is None:
        doc: dict[str, Any] = {"format": FORMAT, "common": common, "requests": [], "runs": {},
                               "weak_series": []}
    else:
        doc = old
        if doc["common"] != common:
            was, now = flat(doc["common"]), flat(common)
            diff = [f"{k} {was.get(k)} here, {now.get(k)} asked"
                    for k in sorted(set(was) | set(now)) if was.get(k) != now.get(k)]
            raise SweepError(f"the results folder holds runs of other options ({'; '.join(diff)}); "
                             "use another --out, or the same options")
    doc["requests"].append({"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "argv": list(argv),
                            "launcher": launcher, "request": request.to_dict()})
    for p in plans:
        run = doc["runs"].setdefault(p.run_id, {
            "dataset": p.dataset, "grid": str(p.grid), "world_size": p.world_size,
            "repeat": p.repeat, "studies": [], "picked_by": [], "log": f"runs/{p.run_id}.json",
            "state": "pending"})
        run["studies"] = sorted(set(run["studies"]) | set(p.studies))
        run["picked_by"] = sorted(set(run["picked_by"]) | set(p.picked_by))
    if request.weak:
        series = {str(p.world_size): p.dataset for p in plans}
        entry = {"base": request.dataset, "datasets": dict(sorted(series.items(),
                                                                  key=lambda kv: int(kv[0])))}
        if entry not in doc["weak_series"]:
            doc["weak_series"].append(entry)
    return doc


def flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"model": {"hidden": 16}} -> {"model.hidden": 16}."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def command_for(p: PlannedRun, request: SweepRequest, out: Path, launcher: str,
                python: str) -> list[str]:
    """The command line of one run under ``launcher`` (local or torchrun)."""
    args = p.train_args(request, str(log_path(out, p.run_id)))
    if launcher == "torchrun":
        return torchrun_command(python, p.world_size, args)
    return local_command(python, args)


def last_line(path: Path) -> str:
    try:
        lines = [l for l in path.read_text(encoding="utf-8", errors="replace").splitlines()
                 if l.strip()]
    except OSError:
        return ""
    return lines[-1].strip() if lines else ""


def run_one(command: list[str], output: Path, timeout_s: float | None) -> tuple[int, float]:
    """Run ``command`` with its console output in ``output``; (exit status, seconds)."""
    start = time.perf_counter()
    with open(output, "w", encoding="utf-8") as f:
        f.write("$ " + " ".join(command) + "\n")
        f.flush()
        try:
            code = subprocess.run(command, stdout=f, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, timeout=timeout_s).returncode
        except subprocess.TimeoutExpired:
            f.write(f"plexus-sweep: stopped after {timeout_s:g} s (--run-timeout)\n")
            code = 124
    return code, time.perf_counter() - start


def run_sweep(request: SweepRequest, plans: Sequence[PlannedRun], out: Path, launcher: str,
              python: str = sys.executable, slurm: SlurmOptions | None = None,
              array: bool = False, argv: Sequence[str] = (), timeout_s: float | None = None,
              say: Callable[[str], None] = print) -> SweepResult:
    """Run every planned run that has no complete log (local, torchrun), or write the batch
    scripts for them (slurm); the manifest records each run's command and state."""
    doc = merge(read_manifest(out), request, plans, launcher, argv)  # checks before writing
    (out / "runs").mkdir(parents=True, exist_ok=True)
    result = SweepResult()
    todo = []
    for p in plans:
        rec = doc["runs"][p.run_id]
        if log_complete(log_path(out, p.run_id), request.epochs):
            rec["state"] = "complete"
            result.skipped.append(p.run_id)
        else:
            todo.append(p)
    write_manifest(out, doc)
    if launcher == "slurm":
        assert slurm is not None, "the slurm launcher needs SlurmOptions"
        result.scripts = write_slurm(request, todo, out, slurm, array, doc)
        write_manifest(out, doc)
        return result
    for i, p in enumerate(todo, 1):
        rec = doc["runs"][p.run_id]
        command = command_for(p, request, out, launcher, python)
        rec.update(command=command, launcher=launcher, state="running")
        write_manifest(out, doc)
        say(f"[{i}/{len(todo)}] {p.run_id}: grid {p.grid} on {p.world_size} rank(s) "
            f"({launcher})")
        output = out / "runs" / f"{p.run_id}.out"
        code, seconds = run_one(command, output, timeout_s)
        ok = code == 0 and log_complete(log_path(out, p.run_id), request.epochs)
        rec.update(state="complete" if ok else "failed", exit_status=code,
                   wall_s=round(seconds, 2))
        write_manifest(out, doc)
        if ok:
            result.ran.append(p.run_id)
        else:
            result.failed.append(p.run_id)
            say(f"    failed (exit status {code}): {last_line(output)} [see {output}]")
    return result


def write_slurm(request: SweepRequest, todo: Sequence[PlannedRun], out: Path,
                slurm: SlurmOptions, array: bool, doc: dict[str, Any]) -> list[Path]:
    """Batch scripts for the runs without a complete log, and ``submit.sh``."""
    folder = out / "slurm"
    folder.mkdir(exist_ok=True)
    for old in folder.glob("*.sbatch"):  # scripts of runs now complete must not be resubmitted
        old.unlink()
    scripts = []
    out_abs = out.resolve()
    if array:
        for world in sorted({p.world_size for p in todo}):
            group = [p for p in todo if p.world_size == world]
            runs = []
            for p in group:
                log = str(log_path(out_abs, p.run_id))
                runs.append((p.run_id, p.train_args(request, log), log))
                doc["runs"][p.run_id].update(launcher="slurm", state="script written",
                                             script=f"slurm/array_G{world}.sbatch")
            text = slurm_array_script(slurm, f"plexus-G{world}", world, runs,
                                      str(out_abs / "slurm" / "%x-%A_%a.out"),
                                      f"plexus-sweep: {len(runs)} runs of {world} ranks")
            scripts.append(write_script(folder / f"array_G{world}.sbatch", text))
    else:
        for p in todo:
            log = str(log_path(out_abs, p.run_id))
            text = slurm_script(slurm, f"plexus-{p.run_id}", p.world_size,
                                p.train_args(request, log), log,
                                str(out_abs / "slurm" / f"{p.run_id}-%j.out"),
                                f"plexus-sweep run {p.run_id}: grid {p.grid}, "
                                f"{p.world_size} ranks, dataset {p.dataset}")
            scripts.append(write_script(folder / f"{p.run_id}.sbatch", text))
            doc["runs"][p.run_id].update(launcher="slurm", state="script written",
                                         script=f"slurm/{p.run_id}.sbatch")
    write_script(folder / "submit.sh", submit_script(scripts))
    return scripts


def write_script(path: Path, text: str) -> Path:
    with atomic_file(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o755)
    return path
