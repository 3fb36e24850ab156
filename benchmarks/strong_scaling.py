"""Strong scaling of Plexus on one graph over X×Y×Z grids of local gloo ranks.

Run: ``python benchmarks/strong_scaling.py [--spec SPEC] [--grids 1x1x1,2x1x1,...] [--epochs 5]``
     ``python benchmarks/strong_scaling.py --smoke`` (tiny graph, seconds; for the tests)

Default problem: R-MAT scale 17, edge factor 16, 128 features, 16 classes; a 3-layer GCN, hidden
128, dropout 0.5, bias, every layer aggregating first (``--order``), SpMM backend torch
(``--backend``), no permutation (``--perm``; R-MAT node ids are already randomly permuted).
Default grids: every ordered factorization X·Y·Z of G = 1, 2, 4, 8 (20 grids). Each rank runs
one torch thread. The grids of one world size share one gloo world (worlds take seconds per rank
to start).

Per grid it prints:
- epoch time: median over ``--epochs`` timed steps (after ``--warmup``) of the slowest rank's
  forward + backward + Adam step; speed-up over 1x1x1 and the ideal T(1x1x1)/G.
- breakdown: the engine's timers per epoch, max and mean over ranks: SpMM, GEMM, every
  collective by op and axis, and "other" (step minus all timers: dropout masks, ReLU, loss,
  Adam, autograd bookkeeping).
- bytes per axis one rank sent per epoch, from the engine's ledger and from the performance model
  (`plexus.perfmodel.epoch_volume`), and whether they are equal.
- work efficiency: sum over ranks of compute time (SpMM + GEMM) divided by the 1x1x1 compute time
  (one thread). The issue's target is <= 1.15 for G = 2, 4, 8 ranks with one thread each: the 3D
  split adds no hidden work. This machine has 2 cores, so G = 4 and 8 ranks time-share them, and
  a rank whose kernel is preempted finds its caches refilled by another rank's. The target is
  therefore judged on ``--turn-epochs`` extra epochs whose SpMM and GEMM regions run at most
  ``--turn-slots`` ranks (default: one per core) at a time, the rest waiting blocked at a
  barrier (the collectives between regions unchanged): G ranks on G cores as far as the kernels
  can tell. Its figure is the ranks' thread CPU time. The concurrent figures (thread CPU time,
  and wall time, which also counts waiting for a core) are printed beside it. On a shared
  machine both still swing from run to run; `work_efficiency.py`, which measures every rank
  alone, is the steadier figure for the target.

Caveat of this machine: G ranks share ``os.cpu_count()`` cores (2 here). Beyond that many ranks
the epoch time cannot fall further, whatever the algorithm; the plot shows both ideals,
T(1x1x1)/G and T(1x1x1)/min(G, cores). ``--profile`` adds a torch.profiler table of one more
epoch of rank 0 per grid.

Output under ``--out``: ``strong_scaling.csv`` (one row per grid), ``strong_scaling.json``
(per-rank raw data), ``strong_scaling.txt`` (the printed report) and ``strong_scaling.png``
(epoch time vs G, every grid as a point, the best grid per G joined, the ideal line).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import (AXES, OUT_DIR, SMOKE_SPEC, GridRun, Job, RunOptions,
                               add_grid_options, add_training_options,
                               Tee, training_config, format_table, grid_text,
                               load_bundle, machine_info, model_bytes, selected_grids,
                               pyplot, run_by_world, save_figure, volumes_equal, write_csv,
                               write_json, write_text)

TARGET_WORK_EFFICIENCY = 1.15


def collective_names(runs: list[GridRun]) -> list[str]:
    """Every collective timer name seen ("all_reduce:x", ...), sorted by axis then op."""
    names = {n for r in runs for n in r.timer_names() if ":" in n}
    return sorted(names, key=lambda n: (n.split(":")[1], n.split(":")[0]))


def plot(runs: list[GridRun], base: float, path: Path, title: str) -> Path | None:
    """Epoch time vs G (log-log): every grid, the best per G, and the ideal T1/G."""
    plt = pyplot()
    if plt is None:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    worlds = sorted({r.world for r in runs})
    ax.scatter([r.world for r in runs], [r.epoch_time() for r in runs], s=18, color="tab:blue",
               alpha=0.6, label="each grid")
    best = [min(r.epoch_time() for r in runs if r.world == w) for w in worlds]
    ax.plot(worlds, best, "o-", color="tab:blue", label="best grid per G")
    for w, t in zip(worlds, best):
        g = min((r for r in runs if r.world == w), key=GridRun.epoch_time)
        ax.annotate(grid_text(g.dims), (w, t), textcoords="offset points", xytext=(4, -10),
                    fontsize=7)
    ax.plot(worlds, [base / w for w in worlds], "--", color="gray", label="ideal T(1x1x1)/G")
    cores = os.cpu_count() or 1
    if max(worlds) > cores:
        ax.plot(worlds, [base / min(w, cores) for w in worlds], ":", color="tab:red",
                label=f"ideal on this machine's {cores} cores, T(1x1x1)/min(G, {cores})")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(worlds, [str(w) for w in worlds])
    ax.set_xlabel("ranks G = X·Y·Z (1 thread each)")
    ax.set_ylabel("epoch time (s)")
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    out = save_figure(fig, path)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_grid_options(p, "1,2,4,8", "; 1x1x1 is always added as the reference")
    add_training_options(p, epochs=5,
                         perm_help="node permutation: none, single, double, balanced")
    p.add_argument("--turn-epochs", type=int, default=2,
                   help="extra epochs per grid whose compute regions take turns (--turn-slots "
                        "ranks at a time), for the work efficiency (default 2)")
    p.add_argument("--turn-slots", type=int, default=os.cpu_count() or 1,
                   help="ranks computing at a time in the turn epochs (default: the cores, "
                        f"{os.cpu_count()})")
    p.add_argument("--profile", action="store_true",
                   help="print a torch.profiler table of one more epoch of rank 0 per grid")
    p.add_argument("--out", type=Path, default=OUT_DIR, help=f"output folder (default {OUT_DIR})")
    p.add_argument("--smoke", action="store_true",
                   help="tiny graph, hidden 16, grids 1x1x1,2x1x1, 2 epochs")
    args = p.parse_args(argv)
    if args.smoke:
        args.spec, args.hidden, args.warmup, args.epochs = SMOKE_SPEC, 16, 1, 2
        args.turn_epochs = 1
        args.grids = args.grids or "1x1x1,2x1x1"
    grids = selected_grids(args, p)
    if (1, 1, 1) not in grids:
        grids.insert(0, (1, 1, 1))
    if min(args.epochs, args.turn_epochs, args.turn_slots) < 1 or args.warmup < 0:
        p.error("--epochs, --turn-epochs and --turn-slots must be >= 1 and --warmup >= 0")

    say = Tee()
    cfg, engine = training_config(args, p)
    bundle = load_bundle(args.spec, args.root)
    info = machine_info()
    say(f"graph {bundle.describe()}")
    say(f"model: {args.layers} layers, hidden {args.hidden}, dropout {args.dropout}, order "
        f"{args.order}, backend {args.backend}, perm {args.perm}; 1 thread per rank; "
        f"{args.warmup} warm-up + {args.epochs} timed epochs")
    say(f"machine: {info['cpus']} cpus, load {info['loadavg']}, torch {info['torch']}")
    opts = RunOptions(args.warmup, args.epochs, threads=1, perm=args.perm, profile=args.profile,
                      turn_epochs=args.turn_epochs, turn_slots=args.turn_slots)
    runs = run_by_world(bundle, [Job(g, cfg, engine) for g in grids], opts, log=say)
    base_run = runs[grids.index((1, 1, 1))]
    t1 = base_run.epoch_time()
    base_cpu = base_run.stat("compute", cpu=True)[0]
    base_wall = base_run.stat("compute")[0]
    base_turns = base_run.stat("compute", cpu=True, turns=True)[0]

    def work(run: GridRun) -> float:
        """The work efficiency: compute CPU seconds summed over ranks taking turns / 1x1x1's."""
        return sum(run.per_rank("compute", cpu=True, turns=True)) / base_turns
    losses0 = base_run.ranks[0]["losses"]

    rows, csv_rows, vol_rows = [], [], []
    coll = collective_names(runs)
    for run in runs:
        t = run.epoch_time()
        g = run.world
        sp_max, sp_mean = run.stat("spmm")
        mm_max, mm_mean = run.stat("gemm")
        cm_max, cm_mean = run.stat("comm")
        ot_max, ot_mean = run.stat("other")
        work_cpu = sum(run.per_rank("compute", cpu=True)) / base_cpu
        work_wall = sum(run.per_rank("compute")) / base_wall
        work_turns = work(run)
        ledger = run.ledger_bytes()
        model = model_bytes(bundle, cfg, run.dims, args.perm)
        equal = volumes_equal(ledger, model)
        loss_diff = max(abs(a - b) for a, b in zip(run.ranks[0]["losses"], losses0))
        verdict = "" if g == 1 else ("ok" if work_turns <= TARGET_WORK_EFFICIENCY else "MISS")
        rows.append([grid_text(run.dims), g, f"{t:.3f}", f"{t1 / t:.2f}", f"{t1 / g:.3f}",
                     f"{sp_max:.3f}/{sp_mean:.3f}", f"{mm_max:.3f}/{mm_mean:.3f}",
                     f"{cm_max:.3f}/{cm_mean:.3f}", f"{ot_max:.3f}/{ot_mean:.3f}",
                     f"{work_turns:.3f} {verdict}".strip(), f"{work_cpu:.3f}",
                     f"{work_wall:.3f}",
                     f"{run.nnz_imbalance():.3f}"])
        vol_rows.append([grid_text(run.dims),
                         *(f"{ledger[a] / 2**20:.2f}" for a in AXES),
                         *(f"{model[a] / 2**20:.2f}" for a in AXES),
                         "yes" if equal else "NO", f"{loss_diff:.1e}"])
        rec = {"grid": grid_text(run.dims), "world": g, "epoch_s": t,
               "epoch_min_s": min(run.epoch_times()), "epoch_max_s": max(run.epoch_times()),
               "speedup": t1 / t, "ideal_s": t1 / g,
               "spmm_max_s": sp_max, "spmm_mean_s": sp_mean, "gemm_max_s": mm_max,
               "gemm_mean_s": mm_mean, "comm_max_s": cm_max, "comm_mean_s": cm_mean,
               "other_max_s": ot_max, "other_mean_s": ot_mean,
               "compute_cpu_sum_s": sum(run.per_rank("compute", cpu=True)),
               "compute_cpu_sum_turns_s": sum(run.per_rank("compute", cpu=True, turns=True)),
               "work_efficiency": work_turns, "work_efficiency_concurrent_cpu": work_cpu,
               "work_efficiency_concurrent_wall": work_wall,
               "nnz_imbalance": run.nnz_imbalance(), "volumes_equal": equal,
               "max_loss_diff_vs_1x1x1": loss_diff}
        for n in coll:
            rec[f"{n}_max_s"], rec[f"{n}_mean_s"] = run.stat(n)
        for a in AXES:
            rec[f"ledger_bytes_{a}"], rec[f"model_bytes_{a}"] = ledger[a], model[a]
        csv_rows.append(rec)

    say("")
    say("epoch s = median slowest-rank step; max/mean = over ranks, seconds per epoch; "
        "work eff = sum over ranks of (spmm+gemm) / 1x1x1's: 'turns' from thread CPU time with "
        f"at most {args.turn_slots} rank(s) computing at a time (target <= "
        f"{TARGET_WORK_EFFICIENCY}), 'cpu' and 'wall' with all ranks computing side by side; "
        "nnz imb = max/mean non-zeros per rank")
    say(format_table(["grid", "G", "epoch s", "speedup", "ideal s", "spmm max/mean",
                      "gemm max/mean", "comm max/mean", "other max/mean", "work eff (turns)",
                      "work eff (cpu)", "work eff (wall)", "nnz imb"], rows))
    say("")
    say("collectives, seconds per epoch, max/mean over ranks:")
    crow = []
    for run in runs:
        cells = []
        for n in coll:
            mx, mn = run.stat(n)
            cells.append(f"{mx:.3f}/{mn:.3f}" if mx > 0 else "-")
        crow.append([grid_text(run.dims), *cells])
    say(format_table(["grid", *coll], crow))
    say("")
    say("bytes sent per rank per epoch (MiB): engine ledger vs perf model; loss diff = max |loss - "
        "1x1x1 loss| over the epochs (the grids must train identically)")
    say(format_table(["grid", "ledger x", "ledger y", "ledger z", "model x", "model y", "model z",
                      "equal", "loss diff"], vol_rows))
    say("")
    by_world = sorted({r.world for r in runs})
    for w in by_world:
        if w == 1:
            continue
        group = [r for r in runs if r.world == w]
        best = min(group, key=GridRun.epoch_time)
        effs = [work(r) for r in group]
        concurrent = [sum(r.per_rank("compute", cpu=True)) / base_cpu for r in group]
        say(f"G={w}: best grid {grid_text(best.dims)} {best.epoch_time():.3f} s/epoch "
            f"(speed-up {t1 / best.epoch_time():.2f}, ideal {w}); work efficiency "
            f"{min(effs):.3f}..{max(effs):.3f} (side by side: {min(concurrent):.3f}.."
            f"{max(concurrent):.3f}), best grid's {work(best):.3f} -> target <= "
            f"{TARGET_WORK_EFFICIENCY}: "
            f"{'MET on every grid' if max(effs) <= TARGET_WORK_EFFICIENCY else 'MISSED on some grids'}")
    for run in runs:
        if run.ranks[0].get("profile"):
            say("")
            say(f"torch.profiler, one epoch of rank 0 of {grid_text(run.dims)}:")
            say(run.ranks[0]["profile"])
    if not all(r["volumes_equal"] for r in csv_rows):
        say("WARNING: the ledger and the perf model disagree on some grid (see the table above)")
    else:
        say("ledger and perf model volumes agree on every grid")
    args.out.mkdir(parents=True, exist_ok=True)
    write_csv(args.out / "strong_scaling.csv", csv_rows)
    write_json(args.out / "strong_scaling.json",
               {"spec": args.spec, "machine": info,
                "args": {k: str(v) for k, v in vars(args).items()},
                "runs": [r.summary() for r in runs]})
    png = plot(runs, t1, args.out / "strong_scaling.png",
               f"{bundle.spec}\n{args.layers} layers, hidden {args.hidden}, order {args.order}, "
               f"{info['cpus']} cores")
    write_text(args.out / "strong_scaling.txt", say.text())
    say(f"wrote {args.out / 'strong_scaling.csv'}, .json, .txt" + (", .png" if png else
                                                                   " (no matplotlib: no plot)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
