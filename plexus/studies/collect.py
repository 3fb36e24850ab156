"""plexus-train JSON logs to report rows: one row per run, with the performance model's
predictions for the same graph, model and grid.

One epoch-selection rule for every figure: the timed epochs are every epoch but the first
(warm-up: first-touch allocations) when there are two or more. The epoch time is rank 0's
training step (forward, backward, Adam; collectives make it wait for the slowest rank); its
median and spread are over the timed epochs. Timers are the log's ``timers_timed`` (the same
timed epochs, max and mean over ranks, so imbalance stays visible) divided by their count; an
older log without them gives the run's totals divided by the epochs run (``timers_epochs`` says
which). Bytes are the run's totals divided by the epochs run. Memory comes from the log's
``memory`` record when the run measured it (max and mean over ranks); the prediction is the
log's or the model's.

Repeats of one configuration (dataset and grid) are compared: ``repeat_spread`` is the slowest
repeat's median epoch time over the fastest one's, and ``spread_flagged`` marks a spread above
the report's threshold (such a median says little; the figures draw every repeat).
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any, Iterable

from plexus_partition.model.grid import AXES, GridShape
from plexus_partition.model.model import DTYPE_BYTES

from .folder import ResultsFolder
from .schema import EPOCH_RECORD, SUMMARY_RECORD, SchemaError, check, parse_json
from .sweep import read_manifest

MEMORY_KINDS = ("peak_rss", "tracked_peak", "cuda_peak")
#: Repeats whose median epoch times differ by more than this factor are flagged.
SPREAD_THRESHOLD = 1.5


class ReportError(ValueError):
    """Logs that cannot be reported (a one-line message)."""


def read_log(text: str, where: str) -> tuple[list[dict[str, Any]], dict[str, Any]] | None:
    """(epoch records, summary) of a complete JSON log's ``text``; None if it has no summary
    (a run still going, or one that failed). A line that is not a plexus-train record raises
    `SchemaError` naming ``where``, the line and the field."""
    epochs, summary = [], None
    lines = text.split("\n")
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        at = f"{where} line {number}"
        try:
            obj = parse_json(line, at)
        except SchemaError:
            if number == len(lines):  # a last line being written (or cut): not complete yet
                return None
            raise
        if isinstance(obj, dict) and obj.get("summary") is not None:
            summary = check(obj, SUMMARY_RECORD, at)
        else:
            epochs.append(check(obj, EPOCH_RECORD, at))
    return None if summary is None else (epochs, summary)


def quantile(values: list[float], q: float) -> float:
    """Linear-interpolated quantile of sorted-able values (NaN for none)."""
    if not values:
        return float("nan")
    v = sorted(values)
    pos = q * (len(v) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def timed_epochs(epochs: list[dict[str, Any]]) -> list[float]:
    """Epoch times without the first (warm-up) epoch, when there are two or more."""
    times = [float(e["epoch_time_s"]) for e in epochs if e.get("epoch_time_s") is not None]
    return times[1:] if len(times) > 1 else times


def evaluations(epochs: list[dict[str, Any]]) -> int:
    """Evaluation passes the run made: every evaluated epoch, plus the final one plexus-train
    adds when the last epoch was not evaluated."""
    n = sum(1 for e in epochs if e.get("test_acc") is not None)
    return n + (1 if epochs and epochs[-1].get("test_acc") is None else 0)


def model_spec(summary: dict[str, Any]) -> Any | None:
    """The performance model's `ModelSpec` of the logged run (None: the log lacks the sizes)."""
    from plexus_partition.model.model import ModelConfig  # noqa: PLC0415
    from plexus.perfmodel import ModelSpec  # noqa: PLC0415

    g, m = summary.get("graph"), summary.get("model") or {}
    if not g or "orders" not in m:
        return None
    options = dict(m.get("config") or {})  # the whole ModelConfig (older logs: its main fields)
    if not options:
        options = {"num_layers": m["layers"], "hidden": m["hidden"],
                   "kind": m.get("kind", "gcn"), "bias": m.get("bias", True),
                   "learnable_features": m.get("learnable_features", False)}
    per_layer = len(m["orders"]) // max(int(options["num_layers"]), 1)
    options["order"] = ",".join(o for o in m["orders"][::max(per_layer, 1)])  # the conv stages
    if any(o not in ("agg", "combine") for o in options["order"].split(",")):
        options["order"] = "agg"  # dense-only models: their order is not used
    # the engine's exchanges, wire precision and kept input as logged (older logs:
    # all-reduces, payloads as computed, layer 0's features gathered every step)
    sparse = summary.get("sparse_comm", "off")
    return ModelSpec(g["nodes"], g["nnz"], g["features"], g["classes"],
                     ModelConfig.from_options(**options), perm=m.get("perm", "double"),
                     multilabel=summary.get("metric") == "rocauc",  # binary tasks: BCE
                     sparse_comm=sparse,
                     comm_dtype_bytes=DTYPE_BYTES.get(summary.get("comm_dtype") or "", 0),
                     keep_input=bool(summary.get("kept_input")))  # the engine's decision


def predictions(summary: dict[str, Any], epochs: list[dict[str, Any]],
                calibration: Any) -> dict[str, Any]:
    """The model's time, memory and bytes for the logged run (empty without graph sizes)."""
    from plexus.perfmodel import epoch_volume, estimate, setup_volume  # noqa: PLC0415

    spec = model_spec(summary)
    if spec is None:
        return {}
    grid = GridShape.parse(summary["grid"]).dims
    # ranks that shared a host's cores (on a calibrated CPU machine each runs at its share)
    per_host = (summary.get("environment") or {}).get("ranks_per_host") or {}
    p = estimate(spec, grid, calibration,
                ranks_per_host=max(per_host.values()) if per_host else None)
    train = epoch_volume(spec, grid).per_axis("bytes")
    with_eval = epoch_volume(spec, grid, evaluate=True).per_axis("bytes")
    setup = setup_volume(spec, grid).per_axis("bytes")  # once per run (a kept input)
    runs, evals = int(summary.get("epochs_run") or 0), evaluations(epochs)
    row = {"predicted_time_s": p.time_s, "predicted_comm_s": p.comm_s,
           "predicted_compute_s": p.compute_s, "predicted_comm_share": p.comm_fraction,
           "predicted_memory_bytes": p.memory.total}
    for a in AXES:
        # what the ledger of the busiest rank must show: the set-up, the training steps and the
        # evaluations
        row[f"model_bytes_{a}_run"] = (setup[a] + runs * train[a]
                                       + evals * (with_eval[a] - train[a]))
    return row


def memory_columns(summary: dict[str, Any]) -> dict[str, Any]:
    """Measured memory per rank (max and mean over ranks) and the log's prediction, if any."""
    mem = summary.get("memory") or {}
    row: dict[str, Any] = {}
    for kind in MEMORY_KINDS:
        values = [float(v) for v in (mem.get(f"{kind}_bytes") or []) if v is not None]
        row[f"mem_{kind}_max_bytes"] = max(values) if values else None
        row[f"mem_{kind}_mean_bytes"] = statistics.fmean(values) if values else None
    row["mem_logged_predicted_bytes"] = mem.get("predicted_bytes")
    return row


def run_row(rid: str, epochs: list[dict[str, Any]], summary: dict[str, Any],
            info: dict[str, Any], calibration: Any) -> dict[str, Any]:
    """One report row (see the module docstring for what each figure means)."""
    grid = GridShape.parse(summary["grid"])
    env, graph, model = (summary.get("environment") or {}, summary.get("graph") or {},
                         summary.get("model") or {})
    runs = max(int(summary.get("epochs_run") or 0), 1)
    times = timed_epochs(epochs)
    row: dict[str, Any] = {
        "run_id": rid, "dataset": summary.get("dataset"), "spec": info.get("dataset"),
        "grid": str(grid), "x": grid["x"], "y": grid["y"], "z": grid["z"],
        "world_size": grid.world_size, "repeat": info.get("repeat"),
        "studies": " ".join(info.get("studies", ["strong"])),
        "picked_by": " ".join(info.get("picked_by", [])),
        "nodes": graph.get("nodes"), "nnz": graph.get("nnz"), "features": graph.get("features"),
        "classes": graph.get("classes"), "layers": model.get("layers"),
        "hidden": model.get("hidden"), "orders": ",".join(model.get("orders", [])),
        "perm": model.get("perm"), "epochs": summary.get("epochs"),
        "timed_epochs": len(times),
        "epoch_time_median_s": statistics.median(times) if times else None,
        "epoch_time_min_s": min(times) if times else None,
        "epoch_time_p25_s": quantile(times, 0.25) if times else None,
        "epoch_time_p75_s": quantile(times, 0.75) if times else None,
        "epoch_time_max_s": max(times) if times else None,
        "epoch_time_mean_s": statistics.fmean(times) if times else None,
        "final_loss": (summary.get("final") or {}).get("loss"),
    }
    timed = summary.get("timers_timed")
    if timed and timed.get("epochs"):  # the timed epochs only, as the epoch times above
        timers, per = timed.get("timers") or {}, int(timed["epochs"])
        row["timers_epochs"] = "timed"
    else:  # an older log: totals of every epoch, the first included
        timers, per = summary.get("timers") or {}, runs
        row["timers_epochs"] = "all"
    compute = comm = 0.0
    for name in sorted(timers):
        mx, mean = timers[name]["max"] / per, timers[name]["mean"] / per
        row[f"t_{name}_max_s"], row[f"t_{name}_mean_s"] = mx, mean
        if ":" in name:
            comm += mean
        elif name in ("spmm", "gemm"):
            compute += mean
    row["compute_mean_s"], row["comm_mean_s"] = compute, comm
    if row["epoch_time_mean_s"] is not None and timers:
        row["other_mean_s"] = max(row["epoch_time_mean_s"] - compute - comm, 0.0)
    comm_total = summary.get("comm_bytes") or {}
    comm_max = summary.get("comm_bytes_max_rank") or {}
    for a in AXES:
        row[f"comm_bytes_{a}_per_epoch"] = comm_total.get(a, 0.0) / runs
        row[f"comm_bytes_{a}_max_rank_per_epoch"] = comm_max.get(a, 0.0) / runs
    row.update(memory_columns(summary))
    pred = predictions(summary, epochs, calibration)
    model_bytes = {a: pred.pop(f"model_bytes_{a}_run", None) for a in AXES}
    row.update(pred)
    if row.get("predicted_time_s") and row["epoch_time_median_s"]:
        row["predicted_over_measured"] = row["predicted_time_s"] / row["epoch_time_median_s"]
    if pred:  # whose machine rates priced them: the CSV says so as the figures' titles do
        row["calibration"] = calibration.source
        row["predictions_calibrated"] = calibration.calibrated
    if row.get("mem_logged_predicted_bytes") is not None:
        row["predicted_memory_bytes"] = row["mem_logged_predicted_bytes"]
    declared = summary.get("comm_bytes_declared_max_rank")
    if isinstance(declared, dict):  # the schedule priced with the run's own sparse exchanges' rows
        model_bytes = {a: declared.get(a, 0.0) for a in AXES}
    if all(v is not None for v in model_bytes.values()) and comm_max:
        row["comm_bytes_match_model"] = all(
            abs(comm_max.get(a, 0.0) - model_bytes[a]) <= 1e-6 * max(model_bytes[a], 1.0)
            for a in AXES)
    row.update({"host": env.get("host"), "hosts": env.get("hosts"), "device": env.get("device"),
                "gpu": env.get("gpu"), "torch": env.get("torch"),
                "threads_per_rank": env.get("threads_per_rank"),
                "cpus_on_host": env.get("cpus_on_host"),
                "oversubscribed": oversubscribed(env),
                "slurm_job_id": env.get("slurm_job_id")})
    return row


def add_loss_diffs(rows: list[dict[str, Any]], losses: dict[str, list[float]]) -> None:
    """``loss_diff_vs_1x1x1``: the largest |loss - loss of the 1x1x1 run| over the epochs, for the
    same dataset (grids must train identically, to float rounding)."""
    base = {r["dataset"]: losses[r["run_id"]] for r in rows if r["grid"] == "1x1x1"}
    for r in rows:
        ref, mine = base.get(r["dataset"]), losses[r["run_id"]]
        if ref is not None and len(ref) == len(mine) and mine:
            r["loss_diff_vs_1x1x1"] = max(abs(a - b) for a, b in zip(mine, ref)
                                          if a is not None and b is not None)


def add_repeat_spread(rows: list[dict[str, Any]], threshold: float = SPREAD_THRESHOLD) -> None:
    """``repeat_spread`` (slowest over fastest median epoch time of the repeats of the same
    dataset and grid; None for a single run) and ``spread_flagged`` (spread > ``threshold``)."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((str(r.get("spec") or r["dataset"]), r["grid"]), []).append(r)
    for group in groups.values():
        medians = [r["epoch_time_median_s"] for r in group if r["epoch_time_median_s"]]
        spread = max(medians) / min(medians) if len(medians) > 1 else None
        for r in group:
            r["repeats"] = len(group)
            r["repeat_spread"] = spread
            r["spread_flagged"] = spread is not None and spread > threshold


def collect(results: Path | ResultsFolder, calibration: Any = None,
            spread_threshold: float = SPREAD_THRESHOLD) -> tuple[list[dict[str, Any]], dict]:
    """(rows, manifest) of every complete log in ``results/runs``; raises ReportError when there
    is none. Logs without a manifest entry count as strong-scaling runs. Every file is read
    through `ResultsFolder` (inside the folder, regular files only) and schema-checked: a bad
    one raises `FolderError` or `SchemaError`, one line naming it."""
    from plexus.perfmodel import Calibration  # noqa: PLC0415

    folder = results if isinstance(results, ResultsFolder) else ResultsFolder(results)
    calibration = calibration or Calibration()
    manifest: dict[str, Any] = read_manifest(folder) or {}
    infos = manifest.get("runs", {})
    rows, losses = [], {}
    runs = folder.root / "runs"
    if not folder.inside(runs).is_dir():
        raise ReportError(f"{folder.given} has no runs/ folder; give the --out of plexus-sweep")
    for path in sorted(runs.glob("*.json")):
        text = folder.read_text(path)
        log = read_log(text, str(path)) if text is not None else None
        if log is None:
            continue
        epochs, summary = log
        rid = path.stem
        try:
            rows.append(run_row(rid, epochs, summary, infos.get(rid, {}), calibration))
        except (ValueError, ArithmeticError) as e:  # sizes no model takes, a grid no grid is
            raise ReportError(f"{path}: cannot report this run ({e})") from None
        losses[rid] = [e.get("loss") for e in epochs]
    if not rows:
        raise ReportError(f"no complete run log in {runs}; run plexus-sweep first")
    rows.sort(key=lambda r: (str(r["dataset"]), r["world_size"], r["grid"], r["repeat"] or 0))
    add_loss_diffs(rows, losses)
    add_repeat_spread(rows, spread_threshold)
    return rows, manifest


def columns(rows: Iterable[dict[str, Any]]) -> list[str]:
    """Every column in first-seen order, the timers (which vary with the grids) together:
    SpMM, GEMM, then the collectives by axis."""
    keys = list(dict.fromkeys(k for r in rows for k in r))
    timers = [k for k in keys if k.startswith("t_")]
    timers.sort(key=lambda k: (":" in k, k.split(":")[-1], k))
    rest = [k for k in keys if not k.startswith("t_")]
    at = rest.index("compute_mean_s") if "compute_mean_s" in rest else len(rest)
    return rest[:at] + timers + rest[at:]


def oversubscribed(env: dict[str, Any]) -> bool | None:
    """Whether a CPU run's busiest host ran more threads (its ranks times the threads per rank)
    than it has cores: its epochs time the sharing, not the grid. None where the log does not
    say (a GPU run is never)."""
    if env.get("device") not in (None, "cpu"):
        return False
    per_host, threads, cpus = (env.get("ranks_per_host") or {}, env.get("threads_per_rank"),
                               env.get("cpus_on_host"))
    if not per_host or not isinstance(threads, int) or not isinstance(cpus, int):
        return None
    return max(per_host.values()) * threads > cpus
