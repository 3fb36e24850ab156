"""Running a sweep, or writing its batch scripts, into one results folder:

    RESULTS/manifest.json        what was asked (every invocation) and every run's command and state
    RESULTS/calibration.json     this machine's rates (local and torchrun sweeps measure them
                                 once, before the first run): plexus-report prices its
                                 predictions with them
    RESULTS/runs/<id>.json       each run's plexus-train JSON log (complete logs only)
    RESULTS/runs/<id>.out        each local run's console output
    RESULTS/slurm/*.sbatch       batch scripts (--launcher slurm), and submit.sh

A run whose log is complete (its summary record for the requested epochs) is skipped, so the
same command resumes a sweep after a failure or a requeued job. Runs of one folder must share
the model options and epochs (they are compared); more world sizes, grids, repeats or a weak
series may be added to it. One sweep at a time writes a folder (a lock; a second one is
refused), and every file in it is read and written through `plexus.studies.folder` (inside
the folder, regular files only) and its JSON checked (`plexus.studies.schema`).
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

from plexus_partition.launch.env import available_cores

from .folder import FolderError, ResultsFolder
from .launchers import (SlurmOptions, interpreter, local_command, slurm_array_script,
                        slurm_script, submit_script, torchrun_command)
from .plan import PlannedRun, SweepRequest
from .schema import MANIFEST as MANIFEST_SCHEMA
from .schema import SchemaError, check, parse_json
from plexus_datasets.base import owned

MANIFEST = "manifest.json"
CALIBRATION = "calibration.json"
#: The largest local world the sweep times collectives on (a 16-rank world starts in ~30 s on
#: 2 cores; larger runs are priced with its α and β).
CALIBRATION_MAX_WORLD = 16
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


def last_record(text: str) -> Any:
    """The last JSON value of a JSON-lines text (None: none, or not JSON)."""
    lines = text.strip().splitlines()
    try:
        return parse_json(lines[-1], "log") if lines else None
    except SchemaError:
        return None


def log_complete(folder: ResultsFolder, path: Path, epochs: int) -> bool:
    """The JSON log at ``path`` ends with a summary of a run of ``epochs`` epochs (raises
    `FolderError` when ``path`` is not a regular file in the folder)."""
    text = folder.read_text(path)
    last = last_record(text) if text is not None else None
    return isinstance(last, dict) and last.get("summary") is True and last.get("epochs") == epochs


def read_manifest(folder: ResultsFolder) -> dict[str, Any] | None:
    """The folder's manifest, None if there is none; raises `SchemaError` (one line naming the
    field) when it is not a plexus-sweep manifest, `FolderError` when it is no regular file."""
    path = folder.root / MANIFEST
    text = folder.read_trusted(path)  # the sweep's own state: no file another user chose
    if text is None:
        return None
    doc = check(parse_json(text, str(path)), MANIFEST_SCHEMA, str(path))
    if doc["format"] != FORMAT:
        raise SweepError(f"{path}: format {doc['format']}, this plexus-sweep writes format "
                         f"{FORMAT}; use another results folder")
    return doc


def write_manifest(folder: ResultsFolder, doc: dict[str, Any]) -> None:
    with folder.atomic(folder.root / MANIFEST, "w") as f:
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
                python: Sequence[str]) -> list[str]:
    """The command line of one run under ``launcher`` (local or torchrun); ``python``: the
    interpreter with its flags (`plexus.studies.launchers.interpreter`)."""
    args = p.train_args(request, str(log_path(out, p.run_id)))
    if launcher == "torchrun":
        return torchrun_command(python, p.world_size, args)
    return local_command(python, args)


def last_line(folder: ResultsFolder, path: Path) -> str:
    try:
        text = folder.read_text(path) or ""
    except FolderError:
        return ""
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def measure_calibration(folder: ResultsFolder, plans: Sequence[PlannedRun],
                        say: Callable[[str], None], threads: int = 1) -> Path | None:
    """Measure this machine's rates into RESULTS/calibration.json unless it is there, or copy
    the calibration $PLEXUS_CALIBRATION names (a cluster's, measured with plexus-bench calibrate)
    there (measuring takes seconds:
    `plexus.perfmodel.measure.calibrate` in its quick form, ``threads`` per rank as the runs use,
    and the collectives on a local world of each multi-rank size the sweep runs, up to
    `CALIBRATION_MAX_WORLD` ranks, as its runs' ranks share this host)."""
    from plexus.perfmodel.calibration import (CALIBRATION_ENV,  # noqa: PLC0415
                                              find_calibration, load_calibration)
    from plexus.perfmodel.measure import calibrate  # noqa: PLC0415
    from plexus.bench.stepcost import step_seconds  # noqa: PLC0415

    path = folder.root / CALIBRATION
    if folder.read_text(path) is not None:
        return None
    given = find_calibration(os.environ)
    if given:  # a cluster's calibration (plexus-bench calibrate): the report prices with it
        text = json.dumps(load_calibration(given).to_dict(), indent=1) + "\n"
        say(f"the report's predictions: {given} (${CALIBRATION_ENV}) as {CALIBRATION}")
        with folder.atomic(path, "w") as f:
            f.write(text)
        return path
    worlds = sorted({min(p.world_size, CALIBRATION_MAX_WORLD) for p in plans}) or [1]
    say(f"measuring this machine's rates for the report's predictions ({CALIBRATION}; "
        "--no-calibrate skips it) ...")
    doc = calibrate(world_size=worlds, threads=threads, quick=True, step_timer=step_seconds)
    doc["note"] = ("measured by plexus-sweep before its runs (quick: rough rates); "
                   "plexus-bench calibrate measures them more carefully")
    with folder.atomic(path, "w") as f:
        f.write(json.dumps(doc, indent=1) + "\n")
    return path


def run_one(command: list[str], output: Path, timeout_s: float | None,
            folder: ResultsFolder) -> tuple[int, float]:
    """Run ``command`` with its console output in ``output``; (exit status, seconds)."""
    start = time.perf_counter()
    with folder.open_output(output) as f:
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
              python: Sequence[str] | None = None, slurm: SlurmOptions | None = None,
              array: bool = False, argv: Sequence[str] = (), timeout_s: float | None = None,
              say: Callable[[str], None] = print, calibrate: bool = True) -> SweepResult:
    """Run every planned run that has no complete log (local, torchrun), or write the batch
    scripts for them (slurm); the manifest records each run's command and state. The folder is
    locked for the sweep: a second sweep on it is refused (`FolderError`). ``calibrate``: a
    local or torchrun sweep first measures this machine's rates (`measure_calibration`).
    ``python``: the runs' interpreter with its flags (default: this one, `interpreter`)."""
    python = tuple(python) if python is not None else interpreter(sys.executable)
    folder = ResultsFolder(out, create=True)
    lock = folder.lock()
    try:
        return _run_sweep(folder, request, plans, out, launcher, python, slurm, array, argv,
                          timeout_s, say, calibrate)
    finally:
        lock.release()


def _run_sweep(folder: ResultsFolder, request: SweepRequest, plans: Sequence[PlannedRun],
               out: Path, launcher: str, python: Sequence[str], slurm: SlurmOptions | None, array: bool,
               argv: Sequence[str], timeout_s: float | None,
               say: Callable[[str], None], calibrate: bool) -> SweepResult:
    doc = merge(read_manifest(folder), request, plans, launcher, argv)  # checks before writing
    for rec in doc["runs"].values():  # the folder is locked: no sweep is running these now
        if rec["state"] == "running":
            rec["state"] = "interrupted"
    folder.subdir("runs")
    result = SweepResult()
    todo = []
    for p in plans:
        rec = doc["runs"][p.run_id]
        log = log_path(out, p.run_id)
        if log_complete(folder, log, request.epochs):
            rec["state"] = "complete"
            result.skipped.append(p.run_id)
        else:
            todo.append(p)
            # what the run writes must be regular files in the folder, before anything runs
            for target in (log, log.with_name(log.name + ".tmp"),
                           out / "runs" / f"{p.run_id}.out"):
                folder.target(target)
    write_manifest(folder, doc)
    if launcher == "slurm":
        assert slurm is not None, "the slurm launcher needs SlurmOptions"
        result.scripts = write_slurm(request, todo, out, slurm, array, doc, folder)
        write_manifest(folder, doc)
        return result
    if calibrate and todo:
        measure_calibration(folder, todo, say, request.model.threads)
    if launcher == "local" and todo:
        cores, busiest = available_cores(), max(p.world_size for p in todo) * request.model.threads
        if busiest > cores:
            say(f"note: up to {busiest} threads (ranks x --threads {request.model.threads}) "
                f"on {cores} cores here: ranks beyond the cores share them, so those runs time "
                "sharing, not scaling")
    for i, p in enumerate(todo, 1):
        rec = doc["runs"][p.run_id]
        command = command_for(p, request, out, launcher, python)
        rec.update(command=command, launcher=launcher, state="running")
        write_manifest(folder, doc)
        say(f"[{i}/{len(todo)}] {p.run_id}: grid {p.grid} on {p.world_size} rank(s) "
            f"({launcher})")
        output = out / "runs" / f"{p.run_id}.out"
        try:
            code, seconds = run_one(command, output, timeout_s, folder)
        except BaseException:
            rec["state"] = "interrupted"
            write_manifest(folder, doc)
            raise
        ok = code == 0 and log_complete(folder, log_path(out, p.run_id), request.epochs)
        rec.update(state="complete" if ok else "failed", exit_status=code,
                   wall_s=round(seconds, 2))
        write_manifest(folder, doc)
        if ok:
            result.ran.append(p.run_id)
        else:
            result.failed.append(p.run_id)
            say(f"    failed (exit status {code}): {last_line(folder, output)} [see {output}]")
    return result


def write_slurm(request: SweepRequest, todo: Sequence[PlannedRun], out: Path,
                slurm: SlurmOptions, array: bool, doc: dict[str, Any],
                results: ResultsFolder) -> list[Path]:
    """Batch scripts for the runs without a complete log, and ``submit.sh``."""
    folder = results.subdir("slurm")
    for old in folder.glob("*.sbatch"):  # scripts of runs now complete must not be resubmitted
        owned.remove_file(old)  # a link or a FIFO of that name goes as a name, never followed
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
            scripts.append(write_script(results, folder / f"array_G{world}.sbatch", text))
    else:
        for p in todo:
            log = str(log_path(out_abs, p.run_id))
            text = slurm_script(slurm, f"plexus-{p.run_id}", p.world_size,
                                p.train_args(request, log), log,
                                str(out_abs / "slurm" / f"{p.run_id}-%j.out"),
                                f"plexus-sweep run {p.run_id}: grid {p.grid}, "
                                f"{p.world_size} ranks, dataset {p.dataset}")
            scripts.append(write_script(results, folder / f"{p.run_id}.sbatch", text))
            doc["runs"][p.run_id].update(launcher="slurm", state="script written",
                                         script=f"slurm/{p.run_id}.sbatch")
    write_script(results, folder / "submit.sh", submit_script(scripts))
    return scripts


def write_script(results: ResultsFolder, path: Path, text: str) -> Path:
    target = results.target(path)
    with results.atomic(target, "w") as f:
        f.write(text)
    os.chmod(target, 0o755)  # the file just written, never what a link there points to
    return path
