"""``plexus-sweep`` and ``plexus-report``: the command lines of a scaling study."""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path
from typing import Sequence

from plexus_partition.model.cli import ArgumentParser, UsageError, report_error
from plexus_partition.model.layout import DEFAULT_PERMUTATION
from plexus_partition.model.model import ACTIVATIONS, DEFAULT_ACTIVATION
from plexus_partition.model.modelopts import (DEFAULT_DROPOUT, DEFAULT_HIDDEN, DEFAULT_LAYERS,
                                              DEFAULT_ORDER, check_model_options)
from plexus.engine.flags import add_comm_options

from .folder import ResultsFolder
from .launchers import LAUNCHERS, SlurmOptions, interpreter
from .plan import (
    ModelOptions,
    PlanError,
    SweepRequest,
    model_auto_grid,
    parse_world_sizes,
    plan_runs,
)
from .collect import SPREAD_THRESHOLD
from .sweep import CALIBRATION, SweepError, run_sweep

SWEEP, REPORT = "plexus-sweep", "plexus-report"


def sweep_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog=SWEEP, description="Run a scaling study: one plexus-train run per grid, world size "
        "and repeat, each writing its JSON log into OUT/runs/, or write SLURM batch scripts for "
        "them. Runs whose log is complete are skipped, so the same command resumes a sweep. "
        "Then: plexus-report OUT.")
    s = p.add_argument_group("what to run")
    s.add_argument("--dataset", required=True, metavar="SPEC",
                   help="plexus-train dataset spec (cora, ogbn-products, rmat:scale=S,..., ...)")
    s.add_argument("--root", metavar="DIR", help="directory holding the dataset's files")
    s.add_argument("--world-sizes", metavar="G,G,...",
                   help="rank counts, e.g. 1,2,4,8 (default with a grid list: its grids' sizes)")
    s.add_argument("--grids", default="all", metavar="all|auto|LIST",
                   help="all: every X·Y·Z factorization of each world size; auto: the grid the "
                        "performance model picks; or a comma-separated list of XxYxZ grids, "
                        "all and auto (default all)")
    s.add_argument("--weak", action="store_true",
                   help="weak scaling: the dataset grows with G (R-MAT: scale + log2 G; "
                        "otherwise give --weak-dataset once per world size)")
    s.add_argument("--weak-dataset", action="append", default=[], metavar="SPEC",
                   help="with --weak: the dataset of the next world size (repeat, in order)")
    s.add_argument("--epochs", type=int, default=5,
                   help="epochs per run (default 5; the first is untimed warm-up)")
    s.add_argument("--repeats", type=int, default=1,
                   help="separate runs of each configuration (default 1)")
    s.add_argument("--out", required=True, type=Path, metavar="DIR", help="results folder")
    m = p.add_argument_group("model (passed to plexus-train)")
    m.add_argument("--layers", type=int, default=DEFAULT_LAYERS,
                   help=f"GNN layers (default {DEFAULT_LAYERS})")
    m.add_argument("--hidden", type=int, default=DEFAULT_HIDDEN,
                   help=f"hidden width (default {DEFAULT_HIDDEN})")
    m.add_argument("--dropout", type=float, default=DEFAULT_DROPOUT,
                   help=f"dropout (default {DEFAULT_DROPOUT})")
    m.add_argument("--order", default=DEFAULT_ORDER,
                   help=f"product order, as plexus-train's (default {DEFAULT_ORDER}; agg is the "
                        "paper's)")
    m.add_argument("--perm", default=DEFAULT_PERMUTATION,
                   help=f"node permutation (default {DEFAULT_PERMUTATION})")
    m.add_argument("--activation", choices=ACTIVATIONS, default=DEFAULT_ACTIVATION,
                   help=f"between the layers, as plexus-train's (default {DEFAULT_ACTIVATION})")
    m.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    m.add_argument("--spmm", default="torch", help="SpMM backend (default torch)")
    m.add_argument("--eval-every", type=int, default=0,
                   help="evaluate every N epochs (default 0: only after the last, so epoch "
                        "times are training steps only)")
    add_comm_options(m)
    m.add_argument("--train-arg", action="append", default=[], metavar="ARG",
                   help="one more plexus-train argument, as is (repeat; e.g. "
                        "--train-arg=--agg-chunks --train-arg=4)")
    r = p.add_argument_group("where it runs")
    r.add_argument("--threads", type=int, default=1, metavar="T",
                   help="torch threads per rank of every run (default 1: every grid alike, so "
                        "speed-ups compare ranks, not threads; G ranks of T threads share a "
                        "node's cores when G·T exceeds them)")
    r.add_argument("--launcher", choices=LAUNCHERS, default="local",
                   help="local: plexus-train starts its own workers on this machine; torchrun: "
                        "under torchrun on this machine; slurm: write batch scripts into "
                        "OUT/slurm/ and OUT/slurm/submit.sh (default local)")
    r.add_argument("--python",
                   help="the Python with plexus installed (default: this one); runs start it "
                        "with -P (Python 3.11+): a folder named plexus where they start never "
                        "shadows the installed package")
    r.add_argument("--run-timeout", type=float, metavar="SECONDS",
                   help="stop a local run after this long (default: no limit)")
    r.add_argument("--no-calibrate", dest="calibrate", action="store_false",
                   help="do not measure this machine's rates into OUT/calibration.json before "
                        "the first run (a few seconds; local and torchrun launchers), which "
                        "plexus-report uses for its predictions")
    sl = p.add_argument_group("SLURM (--launcher slurm)")
    sl.add_argument("--array", action="store_true",
                    help="one job array per world size instead of one script per run")
    sl.add_argument("--tasks-per-node", type=int, metavar="N", help="ranks per node")
    sl.add_argument("--gpus-per-node", type=int, metavar="N", help="GPUs per node")
    sl.add_argument("--time", default="01:00:00", help="time limit per job (default 01:00:00)")
    sl.add_argument("--partition", help="SLURM partition")
    sl.add_argument("--account", help="SLURM account")
    sl.add_argument("--sbatch", action="append", default=[], metavar="OPTION",
                    help="one more #SBATCH option, e.g. --sbatch=--constraint=a100 (repeat)")
    sl.add_argument("--setup", action="append", default=[], metavar="LINE",
                    help="a shell line run before srun, e.g. 'module load cuda' (repeat)")
    sl.add_argument("--workdir",
                    help="directory the jobs start in (default: the current one)")
    return p


#: A sweep's bounds: every size and repeat is a run of its own
MAX_REPEATS = 100
MAX_WORLD_SIZES = 64


def build_request(a: argparse.Namespace) -> SweepRequest:
    checks = [(a.epochs >= 1, f"--epochs must be >= 1, got {a.epochs}"),
              (1 <= a.repeats <= MAX_REPEATS,
               f"--repeats must be in [1, {MAX_REPEATS}], got {a.repeats}"),
              (a.eval_every >= 0, f"--eval-every must be >= 0, got {a.eval_every}"),
              (a.weak or not a.weak_dataset, "--weak-dataset needs --weak"),
              (a.launcher == "slurm" or not a.array, "--array needs --launcher slurm"),
              (a.threads >= 1, f"--threads must be >= 1, got {a.threads}"),
              (a.tasks_per_node is None or a.tasks_per_node >= 1, "--tasks-per-node must be >= 1"),
              (a.run_timeout is None or 0 < a.run_timeout < math.inf,  # also false for NaN
               f"--run-timeout must be a number of seconds > 0, got {a.run_timeout}"),
              (0 <= a.seed <= 2**63 - 1, f"--seed must be in [0, 2**63 - 1], got {a.seed}")]
    for ok, message in checks:
        if not ok:
            raise UsageError(message)
    check_model_options(a)  # --layers, --hidden, --dropout as plexus-train checks them
    try:
        worlds = parse_world_sizes(a.world_sizes) if a.world_sizes else ()
    except PlanError as e:
        raise UsageError(f"--world-sizes: {e}") from None
    if len(worlds) > MAX_WORLD_SIZES:  # each size is a set of runs: thousands never finish
        raise UsageError(f"--world-sizes must list at most {MAX_WORLD_SIZES} sizes, got "
                         f"{len(worlds)}")
    model = ModelOptions(layers=a.layers, hidden=a.hidden, dropout=a.dropout, order=a.order,
                         perm=a.perm, seed=a.seed, spmm=a.spmm, eval_every=a.eval_every,
                         threads=a.threads, extra=tuple(a.train_arg),
                         comm_dtype=a.comm_dtype, sparse_comm=a.sparse_comm,
                         activation=a.activation)
    return SweepRequest(dataset=a.dataset, world_sizes=worlds, grids=a.grids, epochs=a.epochs,
                        repeats=a.repeats, weak=a.weak, weak_datasets=tuple(a.weak_dataset),
                        root=a.root, model=model)


def sweep_main(argv: Sequence[str] | None = None) -> int:
    """``plexus-sweep``; 0 when every run is complete (or its script written), 1 when a run
    failed, 2 on bad input."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        a = sweep_parser().parse_args(argv)
        request = build_request(a)
        plans = plan_runs(request, model_auto_grid(request))
        # resolved here, not as parser defaults, so --help (and docs/options.md) is the same
        # wherever the tool runs
        chosen_python = a.python or sys.executable
        python = interpreter(chosen_python)
        slurm = SlurmOptions(python=chosen_python, python_flags=python[1:],
                             workdir=a.workdir or os.getcwd(), tasks_per_node=a.tasks_per_node,
                             gpus_per_node=a.gpus_per_node, time=a.time, partition=a.partition,
                             account=a.account, sbatch=tuple(a.sbatch), setup=tuple(a.setup))
        result = run_sweep(request, plans, a.out, a.launcher, python=python, slurm=slurm,
                           array=a.array, argv=argv, timeout_s=a.run_timeout,
                           calibrate=a.calibrate)
    except (UsageError, PlanError, SweepError, ValueError, OSError) as e:
        return report_error(SWEEP, e)
    except KeyboardInterrupt:
        return report_error(SWEEP, "interrupted (SIGINT); the same command resumes the sweep",
                            130)
    total = len(plans)
    if a.launcher == "slurm":
        print(f"{SWEEP}: {len(result.skipped)} of {total} runs complete; "
              f"{len(result.scripts)} batch script(s) in {a.out / 'slurm'}; submit them with: "
              f"bash {a.out / 'slurm' / 'submit.sh'}; then: {REPORT} {a.out}")
        return 0
    print(f"{SWEEP}: {len(result.ran)} run(s) done, {len(result.skipped)} already complete "
          f"(skipped), {len(result.failed)} failed, of {total}; results in {a.out}; next: "
          f"{REPORT} {a.out}")
    if result.failed:
        print(f"{SWEEP}: failed: {', '.join(result.failed)} (the same command retries them)",
              file=sys.stderr)
        return 1
    return 0


def report_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog=REPORT, description="Turn a sweep's JSON logs (RESULTS/runs/*.json, "
                       "from any machine) into RESULTS/report/runs.csv, one row per run, and the "
                       "figures of the study (PNG).")
    p.add_argument("results", type=Path, metavar="RESULTS", help="the folder of plexus-sweep --out")
    p.add_argument("--calibration", metavar="FILE",
                   help="machine rates for the predicted times (plexus-bench calibrate); "
                        "default: RESULTS/calibration.json, which plexus-sweep measures, else "
                        "the model's order-of-magnitude GPU rates (the figures then say the "
                        "predictions are uncalibrated)")
    p.add_argument("--spread-threshold", type=float, default=SPREAD_THRESHOLD, metavar="R",
                   help="flag a configuration whose repeats' median epoch times differ by more "
                        f"than this factor (default {SPREAD_THRESHOLD})")
    return p


def report_main(argv: Sequence[str] | None = None) -> int:
    """``plexus-report``; 0 on success, 2 on bad input."""
    from plexus.perfmodel import load_calibration  # noqa: PLC0415
    from plexus.bench.output import format_table, write_csv  # noqa: PLC0415

    from .collect import ReportError, collect, columns  # noqa: PLC0415
    from .plots import write_figures  # noqa: PLC0415
    from .stats import check_scaling, prediction_stats  # noqa: PLC0415

    try:
        a = report_parser().parse_args(argv)
        if not (a.results / "runs").is_dir():
            raise UsageError(f"{a.results} has no runs/ folder; give the --out of plexus-sweep")
        if not (a.spread_threshold >= 1.0 and math.isfinite(a.spread_threshold)):
            raise UsageError(f"--spread-threshold must be a factor >= 1, got {a.spread_threshold}")
        folder = ResultsFolder(a.results)
        measured = folder.root / CALIBRATION
        if a.calibration is None and folder.read_text(measured) is not None:
            a.calibration = str(measured)  # what the sweep measured on the runs' machine
        calibration = load_calibration(a.calibration)
        rows, manifest = collect(folder, calibration, a.spread_threshold)
        out = folder.subdir("report")
        csv_path = write_csv(folder.target(out / "runs.csv"), rows, columns(rows))
        subtitle = report_subtitle(rows)
        shown = shown_source(calibration.source, folder.root)
        # one set of statistics for the text below and the figures
        stats, check = prediction_stats(rows), check_scaling(rows)
        figs = write_figures(rows, out, subtitle, manifest.get("weak_series", []),
                             shown, target=folder.target, stats=stats, check=check)
    except (UsageError, ReportError, ValueError, OSError) as e:  # FolderError, SchemaError,
        return report_error(REPORT, e)  # UnsafeTargetError are ValueErrors
    except KeyboardInterrupt:
        return report_error(REPORT, "interrupted (SIGINT)", 130)
    table = [[r["run_id"], r["grid"], r["world_size"], fmt(r.get("epoch_time_median_s")),
              fmt(r.get("epoch_time_min_s")) + ".." + fmt(r.get("epoch_time_max_s")),
              fmt(r.get("predicted_time_s")), fmt(r.get("comm_mean_s")),
              {True: "yes", False: "NO"}.get(r.get("comm_bytes_match_model"), "-")]
             for r in rows]
    print(format_table(["run", "grid", "G", "epoch s (median)", "min..max", "predicted s",
                        "comm s (mean)", "bytes = model"], table))
    warned = set()
    for r in rows:
        if r.get("spread_flagged") and (r["dataset"], r["grid"]) not in warned:
            warned.add((r["dataset"], r["grid"]))
            print(f"{REPORT}: warning: the {r['repeats']} repeats of {r['grid']} on "
                  f"{r['dataset']} differ {r['repeat_spread']:.1f}x in median epoch time "
                  f"(threshold {a.spread_threshold:g}): their median says little",
                  file=sys.stderr)
    if not calibration.calibrated:
        print(f"{REPORT}: predictions are UNCALIBRATED (the model's built-in GPU rates, not this "
              "machine's): give --calibration FILE (plexus-bench calibrate)", file=sys.stderr)
    else:
        print(f"predictions priced with {shown}")
    if stats is not None:
        print(stats.line())
        if math.isfinite(stats.spearman):
            print(f"rank correlation, measured vs predicted epoch time: "
                  f"{stats.spearman_line()}")
    for message in check.messages():
        print(f"{REPORT}: warning: {message}", file=sys.stderr)
    if figs["weak_efficiency"]:
        print("weak-scaling efficiency T(1)/T(G), best grid per G: " + ", ".join(
            f"{k} {v:.2f}" for k, v in figs["weak_efficiency"].items()))
    skipped = f" (nothing to draw: {', '.join(figs['skipped'])})" if figs["skipped"] else ""
    print(f"{REPORT}: wrote {csv_path} and {len(figs['files'])} figure(s) in {out}{skipped}")
    return 0


def report_subtitle(rows: Sequence[dict]) -> str:
    """The line under every figure's title: the runs, their hosts, the GPUs or the CPU's cores
    (what says whether ranks shared them), and torch."""
    hosts = sorted({str(r.get("host")) for r in rows})
    gpus = sorted({str(r.get("gpu")) for r in rows if r.get("gpu")})
    cpus = sorted({str(r["cpus_on_host"]) for r in rows if r.get("cpus_on_host")})
    return (f"{len(rows)} runs on {', '.join(hosts)}"
            + (f", {', '.join(gpus)}" if gpus else
               f", CPU, {'/'.join(cpus)} cores" if cpus else ", CPU")
            + f", torch {rows[0].get('torch')}")


def shown_source(source: str, root: Path) -> str:
    """A calibration's source as the report's figures name it: relative to the results folder
    when inside it, else the file's name (a figure carries no absolute path of the machine that
    drew it); a profile's or the built-in rates' name as it is."""
    path = Path(source)
    if not path.is_absolute():
        return source
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except (ValueError, OSError):
        return path.name


def fmt(v: object) -> str:
    return f"{v:.4f}" if isinstance(v, float) else "-"


if __name__ == "__main__":
    sys.exit(sweep_main())
