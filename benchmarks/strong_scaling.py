"""Strong scaling of Plexus on one graph over X×Y×Z grids of local ranks: a thin front end of
``plexus-sweep`` (one ``plexus-train`` run per grid) and ``plexus-report`` (CSV and figures).

Run: ``python benchmarks/strong_scaling.py [--spec SPEC] [--grids 1x1x1,2x1x1,...] [--epochs 5]``
     ``python benchmarks/strong_scaling.py --smoke`` (tiny graph, seconds; for the tests)

Default problem: R-MAT scale 17, edge factor 16, 128 features, 16 classes; a 3-layer GCN, hidden
128, dropout 0.5, bias, every layer aggregating first (``--order``), SpMM backend torch
(``--backend``), no permutation (``--perm``; R-MAT node ids are already randomly permuted).
Default grids: every ordered factorization X·Y·Z of G = 1, 2, 4, 8 (20 grids), plus the grid the
performance model picks for each G (``--grids`` replaces the list; 1x1x1 is always added as the
reference). Each grid is its own ``plexus-train`` job (workers started by it, or by torchrun with
``--launcher torchrun``), with the same threads per rank on every grid (plexus-sweep's
``--threads``, default 1); the first epoch is warm-up, the others are timed.

Output under ``--out`` (the sweep folder): ``manifest.json``, ``runs/<id>.json`` (each run's
plexus-train log), and ``report/``: ``runs.csv`` (one row per run: epoch time median and spread,
the engine's timers per epoch max and mean over ranks, bytes per axis and whether they equal the
performance model's, the loss difference to 1x1x1, predicted time and memory) and the figures
(``strong_scaling.png``: epoch time vs G with the ideal line; ``breakdown.png``,
``comm_share.png``, ``memory.png``, ``predicted_vs_measured.png``). Re-running the same command
skips the grids already measured. Work efficiency (Σ compute over ranks / 1x1x1's) is measured
by ``work_efficiency.py``.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import (OUT_DIR, SMOKE_SPEC, add_grid_options, add_training_options,
                               engine_config)
from plexus.engine.config import EngineConfig
from plexus.studies.cli import report_main, sweep_main

# EngineConfig field -> the plexus-train flag that sets it away from its default
ENGINE_FLAGS = {"agg_chunks": "--agg-chunks", "overlap": "--overlap", "tune_gemms": "--tune-gemms",
                "huge_pages": "--no-huge-pages", "timers": "--no-timers"}


def engine_args(backend: str, options: str) -> list[str]:
    """plexus-train arguments of ``--engine key=value,...`` (validated by `engine_config`)."""
    cfg, default = engine_config(backend, options), EngineConfig()
    args: list[str] = []
    for f in dataclasses.fields(EngineConfig):
        value = getattr(cfg, f.name)
        if f.name not in ENGINE_FLAGS or value == getattr(default, f.name):
            continue
        flag = ENGINE_FLAGS[f.name]
        args += [flag, str(value)] if isinstance(value, int) and not isinstance(value, bool) \
            else [flag]
    return args


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_grid_options(p, "1,2,4,8", "; 1x1x1 is always added as the reference")
    add_training_options(p, epochs=5,
                         perm_help="node permutation: none, single, double, balanced")
    p.add_argument("--repeats", type=int, default=1, help="runs of each grid (default 1)")
    p.add_argument("--launcher", choices=("local", "torchrun"), default="local",
                   help="who starts the ranks of each run (default local: plexus-train)")
    p.add_argument("--calibration", help="perf-model calibration for the predicted times")
    p.add_argument("--out", type=Path, default=OUT_DIR / "strong_scaling",
                   help=f"sweep folder (default {OUT_DIR / 'strong_scaling'})")
    p.add_argument("--smoke", action="store_true",
                   help="tiny graph, hidden 16, grids 1x1x1,2x1x1, 2 epochs")
    args = p.parse_args(argv)
    if args.smoke:
        args.spec, args.hidden, args.warmup, args.epochs = SMOKE_SPEC, 16, 1, 2
        args.grids = args.grids or "1x1x1,2x1x1"
    if args.warmup != 1:
        p.error("--warmup: each run's first epoch is its warm-up (plexus-report); only 1 is "
                "supported")
    try:
        extra = engine_args(args.backend, args.engine)
    except ValueError as e:
        p.error(str(e))
    grids = args.grids or "all,auto"
    worlds = [] if args.grids else ["--world-sizes", args.world_sizes]
    if "1x1x1" not in grids.split(","):
        grids = "1x1x1," + grids
        if worlds and "1" not in args.world_sizes.split(","):
            worlds = ["--world-sizes", "1," + args.world_sizes]
    sweep = ["--dataset", args.spec, *worlds, "--grids", grids,
             "--epochs", str(args.warmup + args.epochs), "--repeats", str(args.repeats),
             "--layers", str(args.layers), "--hidden", str(args.hidden),
             "--dropout", str(args.dropout), "--order", args.order, "--perm", args.perm,
             "--spmm", args.backend, "--launcher", args.launcher, "--out", str(args.out),
             *(f"--train-arg={a}" for a in extra)]
    if args.root:
        sweep += ["--root", args.root]
    code = sweep_main(sweep)
    if code == 2:
        return code
    report = [str(args.out)] + (["--calibration", args.calibration] if args.calibration else [])
    return report_main(report) or code


if __name__ == "__main__":
    sys.exit(main())
